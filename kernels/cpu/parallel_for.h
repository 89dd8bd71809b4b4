// step(i) for every i < count: on a team of `threads` OpenMP threads when
// `parallel` says the fork/join pays, else on the calling thread without
// entering OpenMP. Keep `threads` the caller's usual team size even for few
// steps: libgomp rebuilds its team when consecutive regions differ in size.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

namespace coli::kernels::cpu {

// equal_steps: contiguous ranges per thread (static); unequal_steps: steps
// handed out one by one as threads finish (dynamic).
enum class StepCost { equal_steps, unequal_steps };

template <class Step>
void parallel_for(std::size_t count, int threads, bool parallel, const Step& step,
                  StepCost cost = StepCost::equal_steps) {
  if (!parallel || threads <= 1) {
    for (std::size_t i = 0; i < count; ++i) step(i);
    return;
  }
  const auto steps = static_cast<long long>(count);
  if (cost == StepCost::unequal_steps) {
#pragma omp parallel for num_threads(threads) schedule(dynamic)
    for (long long i = 0; i < steps; ++i) step(static_cast<std::size_t>(i));
  } else {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long long i = 0; i < steps; ++i) step(static_cast<std::size_t>(i));
  }
}

// Steps that run back to back on one team of `threads` OpenMP threads, in
// one parallel region: every member runs steps[0], all meet at a barrier,
// then steps[1], and so on. A barrier costs about a third of a region's
// fork/join at 16 threads (docs/benchmarks.md), so steps that would each be
// a region cost less this way. Inside a step the members share its work
// (for_each_in_team, GemvTeamWork::share). threads <= 1: the calling thread
// runs the steps in order without entering OpenMP.
inline void team_steps(int threads, std::span<const std::function<void()>> steps) {
  if (threads <= 1) {
    for (const auto& step : steps) step();
    return;
  }
#pragma omp parallel num_threads(threads)
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (i > 0) {
#pragma omp barrier
    }
    steps[i]();
  }
}

// step(i) for every i < count, shared by the members of the team that runs
// this (as parallel_for: contiguous ranges for equal steps, one by one as
// members finish for unequal ones), with no barrier at the end (team_steps
// has one between steps). Outside a parallel region the calling thread runs
// them all.
template <class Step>
void for_each_in_team(std::size_t count, const Step& step, StepCost cost = StepCost::equal_steps) {
  const auto steps = static_cast<long long>(count);
  if (cost == StepCost::unequal_steps) {
#pragma omp for schedule(dynamic) nowait
    for (long long i = 0; i < steps; ++i) step(static_cast<std::size_t>(i));
  } else {
#pragma omp for schedule(static) nowait
    for (long long i = 0; i < steps; ++i) step(static_cast<std::size_t>(i));
  }
}

}  // namespace coli::kernels::cpu
