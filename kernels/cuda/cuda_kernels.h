// CUDA kernels for quantised expert weights, behind a plain C++ API: this
// header includes no CUDA header, so code built without nvcc can call it.
// The weight layouts are kernels/reference/gemv_reference.h's (q8_row,
// q4_g64), and every kernel is tested against that reference
// (tests/unit/cuda_kernels_test.cpp).
//
// The CUDA runtime is linked statically and opens the driver at the first
// call, so a binary built with these kernels starts without a driver; the
// calls then return an error Status naming the CUDA call and error.
//
// Launches are asynchronous on the default stream; their errors (and those
// of kernels that ran) surface at the next download() or synchronize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"

namespace coli::kernels::cuda {

// Devices the CUDA runtime sees; 0 with `reason` when there is no driver,
// no device, or the driver is older than the runtime. Never fails.
struct CudaDeviceCount {
  int devices = 0;
  std::string reason;  // why there are none ("" when devices > 0)
};
CudaDeviceCount cuda_device_count();

// Device memory (cudaMalloc/cudaFree), owned. Empty when default-built.
class DeviceBuffer {
 public:
  static Result<DeviceBuffer> allocate(std::size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  // Host -> device and back, `bytes` at `offset` into this buffer; an error
  // when the range does not fit. download() waits for earlier launches.
  Status upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  Status download(void* host, std::size_t bytes, std::size_t offset = 0) const;

 private:
  DeviceBuffer(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Waits for every launch so far; the first error of any of them.
Status synchronize();

// The most tokens one gemv() call takes.
inline constexpr int kMaxGemvTokens = 16;

// y[t][r] = sum_c W[r][c] * x[t][c] for t < count (1..kMaxGemvTokens):
// x is float [count][cols], y float [count][rows], W a q8_row or q4_g64
// matrix (weights and scales as the reference lays them out, each starting
// at its buffer's start). Float accumulation.
struct DeviceMatrix {
  WeightFormat format = WeightFormat::q4_g64;
  int rows = 0;
  int cols = 0;
  const DeviceBuffer* weights = nullptr;
  const DeviceBuffer* scales = nullptr;
};
Status gemv(const DeviceMatrix& w, const DeviceBuffer& x, DeviceBuffer& y, int count);

// One MoE layer's routed experts for one token, the expert ids read on the
// device. Record i of the slab starts at slab + slot * record_stride and
// holds gate and up ([width][hidden]) and down ([hidden][width]), all in
// `format`, at the byte offsets below (weights and scales as the reference
// lays them out). Weight offsets and the stride are multiples of 16 (the
// kernels' 16-byte loads; the container aligns to 64), scale offsets of 4.
struct ExpertRecordLayout {
  WeightFormat format = WeightFormat::q4_g64;
  int hidden = 0;
  int width = 0;                  // the experts' intermediate size
  std::size_t record_stride = 0;  // bytes from one record to the next
  std::size_t gate_weights = 0, gate_scales = 0;
  std::size_t up_weights = 0, up_scales = 0;
  std::size_t down_weights = 0, down_scales = 0;
};

// One selected expert, as the router writes it to device memory. A slot
// outside the slab makes that expert's activations (and so the output) NaN:
// wrong output that shows, never a read outside the slab.
struct ExpertChoice {
  std::int32_t slot = 0;
  float weight = 0;
};
static_assert(sizeof(ExpertChoice) == 8, "the device reads ExpertChoice as 8 bytes");

// The most experts one token may select.
inline constexpr int kMaxSelectedExperts = 64;

// The slab, its record count and the token's k choices (ExpertChoice[k]).
struct ExpertSelection {
  const DeviceBuffer* slab = nullptr;
  int slot_count = 0;
  const DeviceBuffer* choices = nullptr;
  int k = 0;
};

// Kernel A: activations[e][j] = silu(gate_e x)[j] * (up_e x)[j] for the k
// choices; x is float [hidden], activations float [k][width].
Status expert_gate_up(const ExpertRecordLayout& layout, const ExpertSelection& selection, const DeviceBuffer& x,
                      DeviceBuffer& activations);
// Kernel B: out[r] = sum over e = 0..k-1, in that order, of
// weight_e * (down_e activations_e)[r]; no atomics, so the same inputs give
// the same bits. out is float [hidden].
Status expert_down_sum(const ExpertRecordLayout& layout, const ExpertSelection& selection,
                       const DeviceBuffer& activations, DeviceBuffer& out);

}  // namespace coli::kernels::cuda
