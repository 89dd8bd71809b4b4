// Between the checked host API (cuda_api.cpp) and the kernels (*.cu): raw
// device pointers, already validated. Each launcher returns the CUDA error
// code of its launch (0 = cudaSuccess) as an int, so this header stays free
// of CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/cuda_kernels.h"

namespace coli::kernels::cuda::detail {

// One quantised matrix on the device, as the reference lays it out.
struct MatrixPointers {
  const std::uint8_t* weights = nullptr;
  const void* scales = nullptr;  // float per row (q8_row) or binary16 per 64 columns (q4_g64)
  int rows = 0;
  int cols = 0;
};

// The slab of expert records and one token's choices, on the device.
struct ExpertPointers {
  const std::uint8_t* slab = nullptr;
  int slot_count = 0;
  const ExpertChoice* choices = nullptr;
  int k = 0;
};

// The warps of one block; each warp computes one output row.
inline constexpr int kWarpSize = 32;
inline constexpr int kWarpsPerBlock = 8;

// Ok for code 0, else an error naming `call` and the CUDA error.
Status launch_status(const std::string& call, int code);

int launch_gemv(WeightFormat format, const MatrixPointers& matrix, const float* x, float* y, int count);
int launch_expert_gate_up(const ExpertRecordLayout& layout, const ExpertPointers& experts, const float* x,
                          float* activations);
int launch_expert_down_sum(const ExpertRecordLayout& layout, const ExpertPointers& experts, const float* activations,
                           float* out);

}  // namespace coli::kernels::cuda::detail
