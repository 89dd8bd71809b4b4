// Where the engine's OpenMP compute threads run. The GEMV kernels split rows
// across an OpenMP team, and libgomp keeps its pool threads between parallel
// regions (team member i is served by the same OS thread each time, as long
// as no OMP_PLACES/OMP_PROC_BIND asks libgomp to move them). So pinning
// member i to one PU once holds for every later region of at most that many
// threads. The probe's tuning phase measures with exactly this placement and
// the engine applies it, so the threads measured are the threads that run.
//
// Member 0 is the calling thread: pinning confines it too, and threads it
// creates afterwards inherit that one-PU mask. Create helper threads (I/O)
// before pinning, or release the team first.
#pragma once

#include <vector>

#include "coli/base/cpu_set.h"
#include "coli/base/result.h"

namespace coli::kernels::cpu {

// Pins member i of an OpenMP team of pus.size() threads to pus.cpus()[i]
// (ascending PU order), then checks every member landed where asked. The
// affinity the calling thread had before the first pin is remembered (see
// release_openmp_team). Errors: an empty set, a PU the process may not use,
// an OpenMP runtime that gives fewer threads or moves members.
Status pin_openmp_team(const CpuSet& pus);

// Pins member i to pus[i] in the given order (the order matters when the team
// is later run with fewer threads than pinned: members 0..n-1 are used).
Status pin_openmp_team(const std::vector<int>& pus);

// Undoes pin_openmp_team: every member that was pinned (and the calling
// thread) may again run anywhere the calling thread could before the first
// pin. No-op when nothing is pinned.
Status release_openmp_team();

// Releases the team when it goes out of scope: a measurement that pins sets
// leaves the calling thread free again on every path out.
struct TeamRelease {
  ~TeamRelease() { (void)release_openmp_team(); }
};

// The affinity of each member of a team of `threads` threads (for checks and
// reports; members run one region to read it).
std::vector<CpuSet> openmp_team_affinity(int threads);

// The calling thread's affinity now (empty where the OS has no affinity API).
CpuSet current_thread_affinity();

}  // namespace coli::kernels::cpu
