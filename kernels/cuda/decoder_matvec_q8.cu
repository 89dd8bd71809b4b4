// The routed experts on int8 activations (q8_row and q4_g64 weights); the
// dense matvec, q/k/v and SwiGLU serve both activation types in
// decoder_matvec.cu. A warp per output row; gate/up's blocks are 32
// warps, one activation block of act, which the block then quantises for
// the down projection.
#include <cuda_runtime.h>

#include "cuda/decoder_q8.cuh"

namespace coli::kernels::cuda::decoder {
namespace {

using detail::aligned16;

bool quantised(WeightFormat format) { return format == WeightFormat::q8_row || format == WeightFormat::q4_g64; }

constexpr int kGateUpWarps = kQ8Block;  // a warp per row: a block is one activation block of act

// Block (b, choice): rows 32b..32b+31 of the choice's gate and up, a warp
// per row (its gate and up loads in flight together, every load of the
// kernel issued at once for rows of up to 4096 columns); the block's 32
// outputs go to act and, quantised, to act_q's block.
template <WeightFormat kFormat>
__global__ void __launch_bounds__(kGateUpWarps * kWarpSize)
    expert_gate_up_q8_kernel(Experts e, Q8Activations x, float* act, Q8Activations act_q) {
  __shared__ float values[kQ8Block];
  const ExpertRecordLayout& l = e.layout;
  const int choice = static_cast<int>(blockIdx.y);
  const std::uint8_t* record = record_of(e, e.choices[choice].slot);
  if (record == nullptr && e.host_rows != nullptr) return;  // the whole block: the host computes this choice
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int row = static_cast<int>(blockIdx.x) * kQ8Block + warp;
  float value = detail::quiet_nan();  // a slot outside the slab: NaN, which shows
  if (record != nullptr) {
    value = swiglu_row<kFormat>(part(e, record, l.gate_weights, l.gate_scales, l.width, l.hidden),
                                part(e, record, l.up_weights, l.up_scales, l.width, l.hidden), row, x);
  }
  if (lane_zero()) {
    values[warp] = value;
    act[static_cast<std::size_t>(choice) * l.width + row] = value;
  }
  __syncthreads();
  if (warp == 0) {
    const std::size_t block = (static_cast<std::size_t>(choice) * l.width) / kQ8Block + blockIdx.x;
    quantize_block(values[threadIdx.x], act_q, block);
  }
}

// Row `row` of every choice's down projection, weighted: the lanes walk the
// chunks of all k experts' rows as one sequence (their loads independent of
// each other), then one warp sum; the host's rows are added by lane 0 in
// routing order, as expert_down_add does.
template <WeightFormat kFormat>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    expert_down_add_q8_kernel(Experts e, Q8Activations act, const float* shared, const float* shared_gate, float* x) {
  const int row = warp_row();
  const ExpertRecordLayout& l = e.layout;
  if (row >= l.hidden) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int per_expert = l.width / kChunkCols<kFormat>;
  const int blocks_per_expert = l.width / kQ8Block;
  float device_sum = 0;
#pragma unroll 4
  for (int f = lane; f < e.k * per_expert; f += kWarpSize) {
    const int i = f / per_expert;
    const ExpertChoice choice = e.choices[i];
    const std::uint8_t* record = record_of(e, choice.slot);
    if (record == nullptr) continue;  // the host's, or missing: lane 0 below
    const Matrix down = part(e, record, l.down_weights, l.down_scales, l.hidden, l.width);
    const Q8Activations expert_act{act.values + static_cast<std::size_t>(i) * l.width,
                                   act.blocks + static_cast<std::size_t>(i) * blocks_per_expert};
    device_sum += choice.weight * chunk_dot_q8<kFormat>(row_ref<kFormat>(down, row), f - i * per_expert, expert_act);
  }
  float sum = warp_sum(device_sum);
  if (lane != 0) return;
  for (int i = 0; i < e.k; ++i) {
    const ExpertChoice choice = e.choices[i];
    if (record_of(e, choice.slot) != nullptr) continue;
    if (e.host_rows == nullptr) {
      sum = detail::quiet_nan();
      break;
    }
    if (!e.host_later) sum += choice.weight * e.host_rows[static_cast<std::size_t>(i) * l.hidden + row];
  }
  if (shared != nullptr) {
    const float gate = shared_gate != nullptr ? 1.0f / (1.0f + expf(-shared_gate[0])) : 1.0f;
    sum += gate * shared[row];
  }
  x[row] += sum;
}

template <WeightFormat kFormat>
struct GateUpQ8Launch {
  static void run(cudaStream_t s, const Experts& e, const Q8Activations& x, float* act, const Q8Activations& act_q) {
    const dim3 grid(e.layout.width / kQ8Block, e.k);
    expert_gate_up_q8_kernel<kFormat><<<grid, dim3(kGateUpWarps * kWarpSize), 0, s>>>(e, x, act, act_q);
  }
};
template <WeightFormat kFormat>
struct DownAddQ8Launch {
  static void run(cudaStream_t s, const Experts& e, const Q8Activations& act, const float* shared, const float* gate,
                  float* x) {
    expert_down_add_q8_kernel<kFormat><<<row_grid(e.layout.hidden), row_block(), 0, s>>>(e, act, shared, gate, x);
  }
};

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

bool q8_input_fits(const Matrix& w) {
  return quantised(w.format) && w.cols > 0 && w.cols % kQ8Block == 0 && aligned16(w.weights);
}

bool experts_q8_fit(const ExpertRecordLayout& l) {
  return quantised(l.format) && l.hidden > 0 && l.width > 0 && l.hidden % kQ8Block == 0 && l.width % kQ8Block == 0 &&
         l.record_stride % 16 == 0 && l.gate_weights % 16 == 0 && l.up_weights % 16 == 0 && l.down_weights % 16 == 0;
}

int expert_gate_up_q8(Stream stream, const Experts& e, Q8Activations x, float* act, Q8Activations act_q) {
  if (!experts_q8_fit(e.layout) || !aligned16(e.slab) || !x.on() || !act_q.on()) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return for_q8_format<GateUpQ8Launch>(e.layout.format, stream_of(stream), e, x, act, act_q);
}

int expert_down_add_q8(Stream stream, const Experts& e, Q8Activations act, const float* shared, const float* shared_gate,
                       float* x) {
  if (!experts_q8_fit(e.layout) || !aligned16(e.slab) || !act.on() || e.k > kMaxSelectedExperts) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return for_q8_format<DownAddQ8Launch>(e.layout.format, stream_of(stream), e, act, shared, shared_gate, x);
}

}  // namespace coli::kernels::cuda::decoder
