// step(i) for every i < count: on a team of `threads` OpenMP threads when
// `parallel` says the fork/join pays, else on the calling thread without
// entering OpenMP. Keep `threads` the caller's usual team size even for few
// steps: libgomp rebuilds its team when consecutive regions differ in size.
#pragma once

#include <cstddef>

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

}  // namespace coli::kernels::cpu
