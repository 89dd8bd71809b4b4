#include "cuda/cuda_selftest.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>

#include "cuda/decoder_kernels.h"
#include "measure/stats.h"
#include "reference/gemv_reference.h"
#include "coli/base/clock.h"

namespace coli::cuda {
namespace {

using kernels::cuda::DeviceBuffer;
namespace dk = kernels::cuda::decoder;
using Clock = std::chrono::steady_clock;

constexpr double kTolerance = 1e-3;  // relative to the largest |y| (float accumulation in another order)

// One matrix in the reference layout: its bytes and the offset of its scales.
struct HostMatrix {
  std::vector<std::byte> bytes;
  std::size_t scales_offset = 0;
  std::vector<float> reference;  // W x on the CPU
};

HostMatrix make_matrix(WeightFormat format, int rows, int cols, const std::vector<float>& x, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(rows) * cols);
  for (float& v : values) v = normal(rng);
  HostMatrix m;
  m.reference.resize(static_cast<std::size_t>(rows));
  const auto append = [&](const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    m.bytes.insert(m.bytes.end(), p, p + n);
  };
  if (format == WeightFormat::q8_row) {
    const kernels::Q8RowMatrix q = kernels::quantize_q8_row(values, rows, cols);
    append(q.weights.data(), q.weights.size());
    m.scales_offset = (m.bytes.size() + 15) / 16 * 16;
    m.bytes.resize(m.scales_offset);
    append(q.scales.data(), q.scales.size() * sizeof(float));
    kernels::gemv_reference(q, x, m.reference);
  } else {
    const kernels::Q4G64Matrix q = kernels::quantize_q4_g64(values, rows, cols);
    append(q.nibbles.data(), q.nibbles.size());
    m.scales_offset = (m.bytes.size() + 15) / 16 * 16;
    m.bytes.resize(m.scales_offset);
    append(q.scales.data(), q.scales.size() * sizeof(std::uint16_t));
    kernels::gemv_reference(q, x, m.reference);
  }
  m.bytes.resize((m.bytes.size() + 255) / 256 * 256);  // the next copy starts aligned
  return m;
}

GpuKernelResult base_result(const std::string& device, int ordinal, WeightFormat format, int rows, int cols) {
  GpuKernelResult r;
  r.device = device;
  r.backend = "cuda";
  r.variant = "cuda_matvec_" + std::string(name_of(format));
  r.rows = rows;
  r.cols = cols;
  r.device_index = ordinal;
  return r;
}

Status cuda_status(const std::string& call, cudaError_t code) {
  if (code == cudaSuccess) return Ok{};
  cudaGetLastError();
  return make_error(call + " failed: " + cudaGetErrorName(code));
}

// Correctness on the first copy, then GB/s over every copy of the pool, round-robin.
GpuKernelResult run_case(const std::string& device, int ordinal, WeightFormat format, int rows, int cols,
                         const CudaSelftestOptions& options, std::mt19937_64& rng) {
  GpuKernelResult r = base_result(device, ordinal, format, rows, cols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (float& v : x) v = normal(rng);
  const HostMatrix m = make_matrix(format, rows, cols, x, rng);
  const std::size_t copies = std::max<std::size_t>(1, options.pool_bytes / m.bytes.size());
  auto pool = DeviceBuffer::allocate(copies * m.bytes.size());
  auto dx = DeviceBuffer::allocate(x.size() * sizeof(float));
  auto dy = DeviceBuffer::allocate(static_cast<std::size_t>(rows) * sizeof(float));
  if (!pool || !dx || !dy) {
    r.note = "could not allocate the test buffers: " + (!pool ? pool.error().message : !dx ? dx.error().message : dy.error().message);
    return r;
  }
  for (std::size_t c = 0; c < copies; ++c) {
    if (Status s = pool->upload(m.bytes.data(), m.bytes.size(), c * m.bytes.size()); !s) {
      r.note = s.error().message;
      return r;
    }
  }
  if (Status s = dx->upload(x.data(), x.size() * sizeof(float)); !s) {
    r.note = s.error().message;
    return r;
  }
  const auto matrix = [&](std::size_t c) {
    const auto* base = static_cast<const std::byte*>(pool->data()) + c * m.bytes.size();
    return dk::Matrix{format, rows, cols, base, base + m.scales_offset};
  };
  const float* px = static_cast<const float*>(dx->data());
  auto* py = static_cast<float*>(dy->data());
  if (int code = dk::matvec(nullptr, matrix(0), px, py, nullptr, false); code != 0) {
    r.note = "launch failed: " + std::string(cudaGetErrorName(static_cast<cudaError_t>(code)));
    return r;
  }
  std::vector<float> y(static_cast<std::size_t>(rows));
  if (Status s = dy->download(y.data(), y.size() * sizeof(float)); !s) {
    r.note = s.error().message;
    return r;
  }
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) largest = std::max(largest, std::fabs(static_cast<double>(m.reference[i])));
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - m.reference[i]));
  r.max_relative_error = largest > 0 ? worst / largest : worst;
  r.passed = std::isfinite(r.max_relative_error) && r.max_relative_error <= kTolerance;
  if (!r.passed) {
    r.note = "does not match the CPU reference (max error " + std::to_string(r.max_relative_error) + " of the largest |y|)";
    return r;
  }
  const std::size_t weight_bytes = m.scales_offset + (m.bytes.size() - m.scales_offset);
  std::vector<double> samples;
  const auto end = Clock::now() + std::chrono::duration<double>(options.seconds_per_case);
  while (samples.size() < 3 || (Clock::now() < end && samples.size() < 15)) {
    const auto start = Clock::now();
    for (std::size_t c = 0; c < copies; ++c) dk::matvec(nullptr, matrix(c), px, py, nullptr, false);
    if (Status s = cuda_status("cudaDeviceSynchronize", cudaDeviceSynchronize()); !s) {
      r.passed = false;
      r.note = s.error().message;
      return r;
    }
    const double seconds = coli::seconds_since(start);
    samples.push_back(static_cast<double>(copies * weight_bytes) / seconds / 1e9);
  }
  r.gb_per_s = probe::summarize(std::move(samples));
  r.note = "decoder matvec, one token, " + std::to_string(copies) + " copies round-robin (" +
           std::to_string(copies * m.bytes.size() >> 20) + " MiB)";
  return r;
}

}  // namespace

std::vector<GpuKernelResult> run_cuda_selftest(const CudaSelftestOptions& options) {
  std::vector<GpuKernelResult> out;
  const kernels::cuda::CudaDeviceCount count = kernels::cuda::cuda_device_count();
  if (count.devices == 0) {
    GpuKernelResult none = base_result("", -1, WeightFormat::q4_g64, 0, 0);
    none.variant.clear();
    none.note = "no CUDA self-test: " + count.reason;
    out.push_back(none);
    return out;
  }
  std::mt19937_64 rng(options.seed);
  for (int ordinal = 0; ordinal < count.devices; ++ordinal) {
    cudaDeviceProp props{};
    if (cudaSetDevice(ordinal) != cudaSuccess || cudaGetDeviceProperties(&props, ordinal) != cudaSuccess) {
      cudaGetLastError();
      GpuKernelResult unusable = base_result("", ordinal, WeightFormat::q4_g64, 0, 0);
      unusable.variant.clear();
      unusable.note = "CUDA device " + std::to_string(ordinal) + " cannot be used";
      out.push_back(unusable);
      continue;
    }
    for (WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
      for (const auto& [rows, cols] : options.shapes) {
        out.push_back(run_case(props.name, ordinal, format, rows, cols, options, rng));
      }
    }
  }
  return out;
}

}  // namespace coli::cuda
