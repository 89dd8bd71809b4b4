#include "cpu/thread_placement.h"

#include <omp.h>
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace coli::kernels::cpu {
namespace {

#if defined(__linux__)
// Process-wide: the calling thread's affinity before the first pin, and how
// many team members are pinned (release must reach every one of them).
std::mutex placement_mutex;
std::optional<cpu_set_t> home_affinity;
int pinned_members = 0;

CpuSet to_cpu_set(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return CpuSet(std::move(cpus));
}

int set_thread_affinity(const cpu_set_t& set) { return pthread_setaffinity_np(pthread_self(), sizeof(set), &set); }

// Runs one region of `threads` members, each applying affinity_of(member);
// returns the team size OpenMP gave and the first failure (member, errno).
struct TeamResult { int team = 0; int failed_member = -1; int error = 0; };
template <class AffinityOf>
TeamResult apply_to_team(int threads, const AffinityOf& affinity_of) {
  std::vector<int> errors(static_cast<std::size_t>(threads), 0);
  int team = 0;
#pragma omp parallel num_threads(threads)
  {
    const int member = omp_get_thread_num();
    if (member == 0) team = omp_get_num_threads();
    if (member < threads) errors[static_cast<std::size_t>(member)] = set_thread_affinity(affinity_of(member));
  }
  TeamResult result{team};
  for (int i = 0; i < threads; ++i) {
    if (errors[static_cast<std::size_t>(i)] != 0) {
      result.failed_member = i, result.error = errors[static_cast<std::size_t>(i)];
      break;
    }
  }
  return result;
}

Status release_locked() {
  if (!home_affinity) return Ok{};
  const cpu_set_t home = *home_affinity;
  const int members = std::max(1, pinned_members);
  const TeamResult result = apply_to_team(members, [&](int) -> const cpu_set_t& { return home; });
  set_thread_affinity(home);  // the caller, also when OpenMP gave fewer members
  home_affinity.reset();
  pinned_members = 0;
  if (result.failed_member >= 0)
    return make_error("could not release OpenMP thread " + std::to_string(result.failed_member) + ": " +
                      std::strerror(result.error));
  return Ok{};
}
#endif

}  // namespace

Status pin_openmp_team(const CpuSet& pus) { return pin_openmp_team(pus.cpus()); }

Status pin_openmp_team(const std::vector<int>& pus) {
#if defined(__linux__)
  if (pus.empty()) return make_error("thread placement: the set of PUs to pin to is empty");
  if (std::set<int>(pus.begin(), pus.end()).size() != pus.size())
    return make_error("thread placement: a PU appears twice in " + CpuSet(pus).to_list());
  for (int pu : pus) {
    if (pu < 0 || pu >= CPU_SETSIZE)
      return make_error("thread placement: PU " + std::to_string(pu) + " is outside 0.." + std::to_string(CPU_SETSIZE - 1));
  }
  std::lock_guard lock(placement_mutex);
  if (!home_affinity) {
    cpu_set_t home;
    CPU_ZERO(&home);
    if (pthread_getaffinity_np(pthread_self(), sizeof(home), &home) != 0)
      return make_error("thread placement: cannot read this thread's affinity");
    home_affinity = home;
  }
  const int threads = static_cast<int>(pus.size());
  pinned_members = std::max(pinned_members, threads);
  std::vector<cpu_set_t> masks(pus.size());
  for (std::size_t i = 0; i < pus.size(); ++i) {
    CPU_ZERO(&masks[i]);
    CPU_SET(pus[i], &masks[i]);
  }
  const TeamResult result = apply_to_team(threads, [&](int member) -> const cpu_set_t& { return masks[static_cast<std::size_t>(member)]; });
  std::optional<Error> error;
  if (result.team != threads) {
    error = Error{"thread placement: OpenMP gave " + std::to_string(result.team) + " threads instead of " +
                  std::to_string(threads) + " (OMP_THREAD_LIMIT or OMP_DYNAMIC set?)"};
  } else if (result.failed_member >= 0) {
    error = Error{"thread placement: cannot pin a thread to PU " + std::to_string(pus[static_cast<std::size_t>(result.failed_member)]) +
                  " (" + std::strerror(result.error) + "); the process may not use it (affinity or cgroup cpuset)"};
  } else {
    // A second region must find every member where it was put; OMP_PLACES or
    // OMP_PROC_BIND make libgomp move threads itself.
    std::vector<CpuSet> seen(pus.size());
#pragma omp parallel num_threads(threads)
    {
      cpu_set_t set;
      CPU_ZERO(&set);
      const auto member = static_cast<std::size_t>(omp_get_thread_num());
      if (member < seen.size() && pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0) seen[member] = to_cpu_set(set);
    }
    for (std::size_t i = 0; i < pus.size() && !error; ++i) {
      if (seen[i] != CpuSet({pus[i]}))
        error = Error{"thread placement: OpenMP thread " + std::to_string(i) + " runs on PUs '" + seen[i].to_list() +
                      "', not on PU " + std::to_string(pus[i]) + " (unset OMP_PLACES and OMP_PROC_BIND)"};
    }
  }
  if (error) {
    (void)release_locked();  // leave nothing half pinned
    return *error;
  }
  return Ok{};
#else
  (void)pus;
  return make_error("thread placement: this OS has no thread affinity API; run without pinned PUs");
#endif
}

Status release_openmp_team() {
#if defined(__linux__)
  std::lock_guard lock(placement_mutex);
  return release_locked();
#else
  return Ok{};
#endif
}

std::vector<CpuSet> openmp_team_affinity(int threads) {
  std::vector<CpuSet> seen(static_cast<std::size_t>(std::max(threads, 0)));
#if defined(__linux__)
  if (threads <= 0) return seen;
#pragma omp parallel num_threads(threads)
  {
    const auto member = static_cast<std::size_t>(omp_get_thread_num());
    if (member < seen.size()) seen[member] = current_thread_affinity();
  }
#endif
  return seen;
}

CpuSet current_thread_affinity() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return {};
  return to_cpu_set(set);
#else
  return {};
#endif
}

}  // namespace coli::kernels::cpu
