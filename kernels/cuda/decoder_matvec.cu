// The decoder's matrix kernels for one token: dense matvec (+ bias,
// accumulate), q/k/v in one grid and the SwiGLU half of a dense MLP, on f32
// activations (const float* x) or their int8 copy (Q8Activations x: the
// overloads of row_dot and swiglu_row in decoder_q8.cuh); the routed
// experts' gate/up and weighted down (added to the residual) on f32
// activations (decoder_matvec_q8.cu has their int8 forms). One warp per
// output row.
#include <cuda_runtime.h>

#include "cuda/decoder_q8.cuh"

namespace coli::kernels::cuda::decoder {
namespace {

template <WeightFormat kFormat, typename X>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    matvec_kernel(Matrix m, X x, float* y, const float* bias, bool accumulate) {
  const int row = warp_row();
  if (row >= m.rows) return;  // the whole warp
  float value = row_dot<kFormat>(m, row, x);
  if (!lane_zero()) return;
  if (bias != nullptr) value += bias[row];
  y[row] = accumulate ? y[row] + value : value;
}

// One grid over the rows of every matrix, one after another.
template <WeightFormat kFormat, typename X>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize) matvecs_kernel(Matvecs m, X x) {
  int row = warp_row();
  int i = 0;
  while (i < m.count && row >= m.w[i].rows) row -= m.w[i++].rows;
  if (i >= m.count) return;  // the whole warp
  float value = row_dot<kFormat>(m.w[i], row, x);
  if (!lane_zero()) return;
  if (m.bias[i] != nullptr) value += m.bias[i][row];
  m.y[i][row] = value;
}

template <WeightFormat kFormat, typename X>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize) swiglu_kernel(Matrix gate, Matrix up, X x, float* out) {
  const int row = warp_row();
  if (row >= gate.rows) return;
  const float value = swiglu_row<kFormat>(gate, up, row, x);
  if (lane_zero()) out[row] = value;
}

// Gate and up of one row: both rows' loads in flight before the two sums.
template <WeightFormat kFormat>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    expert_gate_up_kernel(Experts e, const float* x, float* act) {
  const int row = warp_row();
  const ExpertRecordLayout& l = e.layout;
  if (row >= l.width) return;
  const int choice = static_cast<int>(blockIdx.y);
  const std::uint8_t* record = record_of(e, e.choices[choice].slot);
  if (record == nullptr && e.host_rows != nullptr) return;  // the host computes this choice
  float value = detail::quiet_nan();
  if (record != nullptr) {  // the same for the whole warp
    value = swiglu_row<kFormat>(part(e, record, l.gate_weights, l.gate_scales, l.width, l.hidden),
                                part(e, record, l.up_weights, l.up_scales, l.width, l.hidden), row, x);
  }
  if (lane_zero()) act[static_cast<std::size_t>(choice) * l.width + row] = value;
}

// Row `row` of every choice's down projection, weighted: each lane sums its
// weighted partials over the k experts (their loads independent), one
// warp sum at the end; the host's rows are added by lane 0 in the same
// routing order.
template <WeightFormat kFormat>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    expert_down_add_kernel(Experts e, const float* act, const float* shared, const float* shared_gate, float* x) {
  const int row = warp_row();
  const ExpertRecordLayout& l = e.layout;
  if (row >= l.hidden) return;
  float device_sum = 0, host_sum = 0;
  bool missing = false;
  for (int i = 0; i < e.k; ++i) {
    const ExpertChoice choice = e.choices[i];
    const std::uint8_t* record = record_of(e, choice.slot);
    if (record == nullptr && e.host_rows != nullptr) {
      if (!e.host_later) host_sum += choice.weight * e.host_rows[static_cast<std::size_t>(i) * l.hidden + row];
      continue;
    }
    if (record == nullptr) {
      missing = true;
      break;
    }
    const Matrix down = part(e, record, l.down_weights, l.down_scales, l.hidden, l.width);
    device_sum += choice.weight * row_partial<kFormat>(down, row, act + static_cast<std::size_t>(i) * l.width);
  }
  float sum = warp_sum(device_sum) + host_sum;
  if (missing) sum = detail::quiet_nan();
  if (!lane_zero()) return;
  if (shared != nullptr) {
    const float gate = shared_gate != nullptr ? 1.0f / (1.0f + expf(-shared_gate[0])) : 1.0f;
    sum += gate * shared[row];
  }
  x[row] += sum;
}

// X: const float* or Q8Activations (only through for_q8_format).
template <WeightFormat kFormat>
struct MatvecLaunch {
  template <typename X>
  static void run(cudaStream_t s, const Matrix& w, const X& x, float* y, const float* bias, bool accumulate) {
    matvec_kernel<kFormat, X><<<row_grid(w.rows), row_block(), 0, s>>>(w, x, y, bias, accumulate);
  }
};
template <WeightFormat kFormat>
struct MatvecsLaunch {
  template <typename X>
  static void run(cudaStream_t s, const Matvecs& m, const X& x) {
    int rows = 0;
    for (int i = 0; i < m.count; ++i) rows += m.w[i].rows;
    matvecs_kernel<kFormat, X><<<row_grid(rows), row_block(), 0, s>>>(m, x);
  }
};

// Up to kMaxMatvecs matrices of one format and one cols.
bool matvecs_fit(const Matvecs& m) {
  if (m.count < 1 || m.count > kMaxMatvecs) return false;
  for (int i = 1; i < m.count; ++i) {
    if (m.w[i].format != m.w[0].format || m.w[i].cols != m.w[0].cols) return false;
  }
  return true;
}
template <WeightFormat kFormat>
struct SwigluLaunch {
  template <typename X>
  static void run(cudaStream_t s, const Matrix& gate, const Matrix& up, const X& x, float* out) {
    swiglu_kernel<kFormat, X><<<row_grid(gate.rows), row_block(), 0, s>>>(gate, up, x, out);
  }
};
template <WeightFormat kFormat>
struct GateUpLaunch {
  static void run(cudaStream_t s, const Experts& e, const float* x, float* act) {
    expert_gate_up_kernel<kFormat><<<row_grid(e.layout.width, e.k), row_block(), 0, s>>>(e, x, act);
  }
};
template <WeightFormat kFormat>
struct DownAddLaunch {
  static void run(cudaStream_t s, const Experts& e, const float* act, const float* shared, const float* gate, float* x) {
    expert_down_add_kernel<kFormat><<<row_grid(e.layout.hidden), row_block(), 0, s>>>(e, act, shared, gate, x);
  }
};

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int matvec(Stream stream, const Matrix& w, const float* x, float* y, const float* bias, bool accumulate) {
  for_format<MatvecLaunch>(w.format, stream_of(stream), w, x, y, bias, accumulate);
  return static_cast<int>(cudaGetLastError());
}

int matvecs(Stream stream, const Matvecs& m, const float* x) {
  if (!matvecs_fit(m)) return static_cast<int>(cudaErrorInvalidValue);
  for_format<MatvecsLaunch>(m.w[0].format, stream_of(stream), m, x);
  return static_cast<int>(cudaGetLastError());
}

int matvec_q8(Stream stream, const Matrix& w, Q8Activations x, float* y, const float* bias, bool accumulate) {
  if (!q8_input_fits(w) || !x.on()) return static_cast<int>(cudaErrorInvalidValue);
  return for_q8_format<MatvecLaunch>(w.format, stream_of(stream), w, x, y, bias, accumulate);
}

int matvecs_q8(Stream stream, const Matvecs& m, Q8Activations x) {
  if (!matvecs_fit(m) || !x.on()) return static_cast<int>(cudaErrorInvalidValue);
  for (int i = 0; i < m.count; ++i) {
    if (!q8_input_fits(m.w[i])) return static_cast<int>(cudaErrorInvalidValue);
  }
  return for_q8_format<MatvecsLaunch>(m.w[0].format, stream_of(stream), m, x);
}

int swiglu(Stream stream, const Matrix& gate, const Matrix& up, const float* x, float* out) {
  if (gate.format != up.format || gate.rows != up.rows || gate.cols != up.cols) {
    return static_cast<int>(cudaErrorInvalidValue);  // the caller checked; never a mixed pair
  }
  for_format<SwigluLaunch>(gate.format, stream_of(stream), gate, up, x, out);
  return static_cast<int>(cudaGetLastError());
}

int swiglu_q8(Stream stream, const Matrix& gate, const Matrix& up, Q8Activations x, float* out) {
  if (!q8_input_fits(gate) || !q8_input_fits(up) || gate.format != up.format || gate.rows != up.rows ||
      gate.cols != up.cols || !x.on()) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return for_q8_format<SwigluLaunch>(gate.format, stream_of(stream), gate, up, x, out);
}

int expert_gate_up(Stream stream, const Experts& e, const float* x, float* act) {
  for_format<GateUpLaunch>(e.layout.format, stream_of(stream), e, x, act);
  return static_cast<int>(cudaGetLastError());
}

__global__ void add_host_rows_kernel(Experts e, float* x) {
  const int row = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (row >= e.layout.hidden) return;
  float sum = 0;
  for (int i = 0; i < e.k; ++i) {
    const ExpertChoice choice = e.choices[i];
    if (record_of(e, choice.slot) == nullptr) sum += choice.weight * e.host_rows[static_cast<std::size_t>(i) * e.layout.hidden + row];
  }
  x[row] += sum;
}

int add_host_rows(Stream stream, const Experts& e, float* x) {
  if (e.host_rows == nullptr || e.k < 1 || e.layout.hidden < 1) return static_cast<int>(cudaErrorInvalidValue);
  constexpr int kThreads = 256;
  add_host_rows_kernel<<<(e.layout.hidden + kThreads - 1) / kThreads, kThreads, 0, stream_of(stream)>>>(e, x);
  return static_cast<int>(cudaGetLastError());
}

int expert_down_add(Stream stream, const Experts& e, const float* act, const float* shared, const float* shared_gate,
                    float* x) {
  for_format<DownAddLaunch>(e.layout.format, stream_of(stream), e, act, shared, shared_gate, x);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::decoder
