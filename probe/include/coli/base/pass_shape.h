// How the CPU engine cuts a prompt's pass, shared by the engine (which runs
// it) and the planner (which counts the pass's parallel regions from it).
#pragma once

#include <cstddef>

namespace coli {

// Tokens per batched pass of the attention half and of a dense MLP: enough
// to reuse every weight row many times over (the kernels' tiles are 4 to 8
// tokens), few enough that q, k, v, attention and MLP rows stay a few MiB
// whatever the prompt's length.
inline constexpr int kPassSlice = 128;
// From this many tokens on, per-token steps (norms, rope, the experts'
// weighted sums, residual adds) run across the team: serial, they were a
// fifth of a 512-token prefill at 16 threads while 15 threads waited.
inline constexpr std::size_t kParallelTokens = 16;

}  // namespace coli
