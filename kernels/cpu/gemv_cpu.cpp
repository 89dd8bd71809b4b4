// Entry points: argument checks, activation quantisation, and the split of
// rows across OpenMP threads.
#include "cpu/gemv_cpu.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <new>
#include <stdexcept>
#include <string>

#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu {
namespace {

using detail::VariantKernels;

const VariantKernels& kernels_for(CpuKernelVariant variant) {
  static const std::array<bool, 4> supported = {variant_supported(CpuKernelVariant::scalar),
                                                variant_supported(CpuKernelVariant::avx2),
                                                variant_supported(CpuKernelVariant::avx512),
                                                variant_supported(CpuKernelVariant::avx512_vnni)};
  if (!supported.at(static_cast<std::size_t>(variant)))
    throw std::invalid_argument("CPU kernel variant " + std::string(variant_name(variant)) + " is not supported by this CPU");
  switch (variant) {
    case CpuKernelVariant::scalar: return detail::scalar_kernels();
    case CpuKernelVariant::avx2: return detail::avx2_kernels();
    case CpuKernelVariant::avx512: return detail::avx512_kernels();
    case CpuKernelVariant::avx512_vnni: return detail::avx512_vnni_kernels();
  }
  throw std::invalid_argument("unknown CPU kernel variant");
}

void require(bool condition, const char* message) {
  if (!condition) throw std::invalid_argument(message);
}

// Each thread gets one contiguous block of whole 16-row units; with one
// thread the caller's thread does all rows and OpenMP is never entered.
void split_rows(int rows, int threads, const auto& run_rows) {
  const int units = detail::ceil_div(rows, detail::kRowAlignment);
  threads = std::clamp(threads, 1, std::max(units, 1));
  if (threads == 1) {
    run_rows(0, rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int team = omp_get_num_threads(), member = omp_get_thread_num();
    const int first_unit = static_cast<int>(static_cast<long long>(units) * member / team);
    const int end_unit = static_cast<int>(static_cast<long long>(units) * (member + 1) / team);
    run_rows(std::min(rows, first_unit * detail::kRowAlignment), std::min(rows, end_unit * detail::kRowAlignment));
  }
}

template <class View>
void check_quantized_call(const View& w, const QuantizedActivations& x, WeightFormat format, std::span<float> y) {
  require(x.format() == format, "gemv_quantized: activations were quantised for the other weight format");
  require(x.cols() == w.cols, "gemv_quantized: activation length differs from the matrix's column count");
  require(y.size() == static_cast<std::size_t>(x.count()) * static_cast<std::size_t>(w.rows),
          "gemv_quantized: y must hold count * rows floats");
}

thread_local QuantizedActivations call_scratch;  // reused: no allocation per call once it is large enough

}  // namespace

void QuantizedActivations::AlignedDelete::operator()(std::byte* bytes) const {
  ::operator delete[](bytes, std::align_val_t{64});
}

void QuantizedActivations::quantize(CpuKernelVariant variant, WeightFormat format, std::span<const float> x, int count,
                                    int cols) {
  require(count >= 0 && cols > 0, "quantize activations: count must be >= 0 and cols > 0");
  require(x.size() == static_cast<std::size_t>(count) * static_cast<std::size_t>(cols),
          "quantize activations: x must hold count * cols floats");
  require(format == WeightFormat::q8_row || cols % kQ4GroupSize == 0, "quantize activations: q4_g64 needs cols % 64 == 0");
  const VariantKernels& kernels = kernels_for(variant);
  const bool q8 = format == WeightFormat::q8_row;
  const std::size_t stride = detail::round_up(q8 ? kernels.q8_packed_bytes(cols) : kernels.q4_packed_bytes(cols), 64);
  const std::size_t needed = stride * static_cast<std::size_t>(std::max(count, 1));
  if (needed > capacity_) {
    bytes_.reset(static_cast<std::byte*>(::operator new[](needed, std::align_val_t{64})));
    capacity_ = needed;
  }
  variant_ = variant, format_ = format, count_ = count, cols_ = cols, stride_ = stride;
  for (int t = 0; t < count; ++t) {
    const float* vector = x.data() + static_cast<std::size_t>(t) * cols;
    (q8 ? kernels.q8_quantize : kernels.q4_quantize)(vector, cols, bytes_.get() + static_cast<std::size_t>(t) * stride);
  }
}

Q8RowView view_of(const Q8RowMatrix& matrix) {
  require(matrix.weights.size() == static_cast<std::size_t>(matrix.rows) * static_cast<std::size_t>(matrix.cols) &&
              matrix.scales.size() == static_cast<std::size_t>(matrix.rows),
          "view_of(Q8RowMatrix): weights or scales have the wrong size");
  return {matrix.weights.data(), matrix.scales.data(), matrix.rows, matrix.cols};
}

Q4G64View view_of(const Q4G64Matrix& matrix) {
  require(matrix.cols % kQ4GroupSize == 0, "view_of(Q4G64Matrix): cols must be a multiple of 64");
  require(matrix.nibbles.size() == static_cast<std::size_t>(matrix.rows) * static_cast<std::size_t>(matrix.cols) / 2 &&
              matrix.scales.size() == static_cast<std::size_t>(matrix.rows) * static_cast<std::size_t>(matrix.cols / kQ4GroupSize),
          "view_of(Q4G64Matrix): nibbles or scales have the wrong size");
  return {matrix.nibbles.data(), matrix.scales.data(), matrix.rows, matrix.cols};
}

void gemv_quantized(const Q8RowView& w, const QuantizedActivations& x, std::span<float> y, int threads) {
  check_quantized_call(w, x, WeightFormat::q8_row, y);
  if (x.count() == 0) return;
  const VariantKernels& kernels = kernels_for(x.variant());
  split_rows(w.rows, threads, [&](int begin, int end) {
    kernels.q8_rows(w, x.vector_bytes(0), x.stride(), x.count(), begin, end, y.data());
  });
}

void gemv_quantized(const Q4G64View& w, const QuantizedActivations& x, std::span<float> y, int threads) {
  check_quantized_call(w, x, WeightFormat::q4_g64, y);
  if (x.count() == 0) return;
  const VariantKernels& kernels = kernels_for(x.variant());
  split_rows(w.rows, threads, [&](int begin, int end) {
    kernels.q4_rows(w, x.vector_bytes(0), x.stride(), x.count(), begin, end, y.data());
  });
}

void gemv_batched(const Q8RowView& w, std::span<const float> x, int count, std::span<float> y, const GemvOptions& options) {
  call_scratch.quantize(options.variant, WeightFormat::q8_row, x, count, w.cols);
  gemv_quantized(w, call_scratch, y, options.threads);
}

void gemv_batched(const Q4G64View& w, std::span<const float> x, int count, std::span<float> y, const GemvOptions& options) {
  call_scratch.quantize(options.variant, WeightFormat::q4_g64, x, count, w.cols);
  gemv_quantized(w, call_scratch, y, options.threads);
}

void gemv(const Q8RowView& w, std::span<const float> x, std::span<float> y, const GemvOptions& options) {
  gemv_batched(w, x, 1, y, options);
}

void gemv(const Q4G64View& w, std::span<const float> x, std::span<float> y, const GemvOptions& options) {
  gemv_batched(w, x, 1, y, options);
}

}  // namespace coli::kernels::cpu
