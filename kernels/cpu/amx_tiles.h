// The amx variant's tile shape (gemm_amx.cpp), header only: the kernels
// size their activations and choose their path by it, and the planner, which
// links no kernel, prices the padded rows it makes (planner/src/measured_rates.h).
#pragma once

namespace coli::kernels::cpu {

// Tokens (activation rows) one AMX tile multiplies at once: a job's last
// tile of fewer tokens computes all 16, the sums past its count dropped.
inline constexpr int kAmxTileTokens = 16;
// Jobs of fewer tokens run the avx512vnni GEMM instead, unpadded (decode).
inline constexpr int kAmxMinTokens = 4;

}  // namespace coli::kernels::cpu
