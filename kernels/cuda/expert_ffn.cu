// One MoE layer's routed experts for one token, expert ids read on the
// device. Kernel A: grid.y = expert e, one warp per row j of the expert's
// width, reading gate row j and up row j: silu(gate x) * (up x). Kernel B:
// one warp per output row, the experts' down rows in routing order, so the
// weighted sum is the same sum every run (no atomics).
#include <cuda_runtime.h>

#include "cuda/quantized_rows.cuh"

namespace coli::kernels::cuda::detail {
namespace {

// The record of choice e, or null when its slot is outside the slab.
__device__ __forceinline__ const std::uint8_t* expert_record(const ExpertRecordLayout& layout,
                                                             const ExpertPointers& experts, int slot) {
  if (slot < 0 || slot >= experts.slot_count) return nullptr;
  return experts.slab + static_cast<std::size_t>(slot) * layout.record_stride;
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

template <WeightFormat kFormat>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    expert_gate_up_kernel(ExpertRecordLayout layout, ExpertPointers experts, const float* x, float* activations) {
  const int row = warp_row();
  if (row >= layout.width) return;
  const int e = static_cast<int>(blockIdx.y);
  const std::uint8_t* record = expert_record(layout, experts, experts.choices[e].slot);
  float value = quiet_nan();
  if (record != nullptr) {  // the same for the whole warp
    const MatrixPointers gate{record + layout.gate_weights, record + layout.gate_scales, layout.width, layout.hidden};
    const MatrixPointers up{record + layout.up_weights, record + layout.up_scales, layout.width, layout.hidden};
    float g[1];
    float u[1];
    row_dots<kFormat, 1>(gate, row, x, 1, g);
    row_dots<kFormat, 1>(up, row, x, 1, u);
    value = silu(g[0]) * u[0];
  }
  if (lane_zero()) activations[static_cast<std::size_t>(e) * layout.width + row] = value;
}

template <WeightFormat kFormat>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    expert_down_sum_kernel(ExpertRecordLayout layout, ExpertPointers experts, const float* activations, float* out) {
  const int row = warp_row();
  if (row >= layout.hidden) return;
  float sum = 0;
  for (int e = 0; e < experts.k; ++e) {
    const ExpertChoice choice = experts.choices[e];
    const std::uint8_t* record = expert_record(layout, experts, choice.slot);
    if (record == nullptr) {
      sum = quiet_nan();
      break;
    }
    const MatrixPointers down{record + layout.down_weights, record + layout.down_scales, layout.hidden, layout.width};
    float d[1];
    row_dots<kFormat, 1>(down, row, activations + static_cast<std::size_t>(e) * layout.width, 1, d);
    sum += choice.weight * d[0];
  }
  if (lane_zero()) out[row] = sum;
}

dim3 grid_for(int rows, int experts) { return dim3((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, experts); }

}  // namespace

int launch_expert_gate_up(const ExpertRecordLayout& layout, const ExpertPointers& experts, const float* x,
                          float* activations) {
  const dim3 grid = grid_for(layout.width, experts.k);
  const dim3 block(kWarpsPerBlock * kWarpSize);
  if (layout.format == WeightFormat::q8_row) {
    expert_gate_up_kernel<WeightFormat::q8_row><<<grid, block>>>(layout, experts, x, activations);
  } else {
    expert_gate_up_kernel<WeightFormat::q4_g64><<<grid, block>>>(layout, experts, x, activations);
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_expert_down_sum(const ExpertRecordLayout& layout, const ExpertPointers& experts, const float* activations,
                           float* out) {
  const dim3 grid = grid_for(layout.hidden, 1);
  const dim3 block(kWarpsPerBlock * kWarpSize);
  if (layout.format == WeightFormat::q8_row) {
    expert_down_sum_kernel<WeightFormat::q8_row><<<grid, block>>>(layout, experts, activations, out);
  } else {
    expert_down_sum_kernel<WeightFormat::q4_g64><<<grid, block>>>(layout, experts, activations, out);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::detail
