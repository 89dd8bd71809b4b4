// Entry points: argument checks, activation quantisation, and the split of
// rows across OpenMP threads.
#include "cpu/gemv_cpu.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <stdexcept>
#include <string>

#include "cpu/amx_tiles.h"
#include "cpu/parallel_for.h"
#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu {
namespace {

using detail::VariantKernels;

const VariantKernels& kernels_for(CpuKernelVariant variant) {
  static const std::vector<CpuKernelVariant> supported = supported_variants();  // evaluated once
  if (std::find(supported.begin(), supported.end(), variant) == supported.end())
    throw std::invalid_argument("CPU kernel variant " + std::string(variant_name(variant)) + " is not supported by this CPU");
  switch (variant) {
    case CpuKernelVariant::scalar: return detail::scalar_kernels();
    case CpuKernelVariant::avx2: return detail::avx2_kernels();
    case CpuKernelVariant::avx512: return detail::avx512_kernels();
    case CpuKernelVariant::avx512_vnni: return detail::avx512_vnni_kernels();
    case CpuKernelVariant::amx: return detail::amx_kernels();
  }
  throw std::invalid_argument("unknown CPU kernel variant");
}

void require(bool condition, const char* message) {
  if (!condition) throw std::invalid_argument(message);
}

// The rows of all jobs, in whole 16-row units, are split into contiguous
// pieces of equal cost: a unit of a job with `count` tokens costs count +
// kRowStreamCost (its products, plus reading its weights, about as much as
// a few tokens' products), so prefill's experts with many tokens get fewer
// rows per piece than those with few (decode: every job has one token, and
// the split is by rows). A unit goes to the piece whose cost range holds its
// start. There are kPiecesPerThread pieces per thread, taken in turn from a
// shared counter, so a thread that streams slower (a busy core, a farther
// memory controller) takes fewer of them instead of holding the region up.
// run(job, row_begin, row_end) does each piece. With one thread the
// caller's thread does everything and OpenMP is never entered.
constexpr long long kRowStreamCost = 4;
constexpr long long kPiecesPerThread = 4;

// The cost split of a set of jobs (see above): pieces of equal cost, each a
// range of whole 16-row units, run(job, row_begin, row_end) per job it touches.
template <class Job>
long long units_of(const Job& job) {
  return detail::ceil_div(job.w.rows, detail::kRowAlignment);
}
template <class Job>
long long unit_cost(const Job& job) {
  return job.x->count() + kRowStreamCost;
}

template <class Job>
long long total_cost(std::span<const Job> jobs) {
  long long total = 0;
  for (const Job& job : jobs) total += units_of(job) * unit_cost(job);
  return total;
}

template <class Job, class Run>
void run_cost_range(std::span<const Job> jobs, long long begin, long long end, const Run& run) {
  long long job_first = 0;  // the cost where job j starts
  for (std::size_t j = 0; j < jobs.size() && job_first < end; ++j) {
    const long long units = units_of(jobs[j]), cost = unit_cost(jobs[j]);
    auto first_unit_from = [&](long long at) { return std::clamp((at - job_first + cost - 1) / cost, 0LL, units); };
    const long long from = first_unit_from(begin), to = first_unit_from(end);
    if (from < to)
      run(jobs[j], static_cast<int>(from * detail::kRowAlignment),
          static_cast<int>(std::min<long long>(jobs[j].w.rows, to * detail::kRowAlignment)));
    job_first += units * cost;
  }
}

// Called by every member of the running team (or by a lone thread): takes
// pieces from `next_piece` until none is left. kPiecesPerThread pieces per
// member of the team, so a slower member takes fewer.
template <class Job, class Run>
void take_pieces(std::span<const Job> jobs, std::atomic<long long>& next_piece, const Run& run) {
  const long long total = total_cost(jobs), pieces = omp_get_num_threads() * kPiecesPerThread;
  for (long long piece = next_piece++; piece < pieces; piece = next_piece++) {
    run_cost_range(jobs, total * piece / pieces, total * (piece + 1) / pieces, run);
  }
}

template <class Job, class Run>
void split_jobs(std::span<const Job> jobs, int threads, const Run& run) {
  // The team size stays what the caller asked even when some threads get no
  // rows: libgomp re-docks its pool when consecutive regions differ in size,
  // which costs far more than idle threads (seen: 10x on 16 cores).
  if (threads <= 1) {
    run_cost_range(jobs, 0, total_cost(jobs), run);
    return;
  }
  std::atomic<long long> next_piece{0};
#pragma omp parallel num_threads(threads)
  take_pieces(jobs, next_piece, run);
}

void run_q8_rows(const Q8GemvJob& job, int begin, int end) {
  const QuantizedActivations& x = *job.x;
  kernels_for(x.variant()).q8_rows(job.w, x.vector_bytes(0), x.stride(), x.count(), begin, end, job.y.data());
}

void run_q4_rows(const Q4GemvJob& job, int begin, int end) {
  const QuantizedActivations& x = *job.x;
  kernels_for(x.variant()).q4_rows(job.w, x.vector_bytes(0), x.stride(), x.count(), begin, end, job.y.data());
}

template <class Job>
void check_job(const Job& job, WeightFormat format) {
  require(job.x != nullptr, "gemv_quantized: a job has no activations");
  const QuantizedActivations& x = *job.x;
  require(x.format() == format, "gemv_quantized: activations were quantised for the other weight format");
  require(x.cols() == job.w.cols, "gemv_quantized: activation length differs from the matrix's column count");
  require(job.y.size() == static_cast<std::size_t>(x.count()) * static_cast<std::size_t>(job.w.rows),
          "gemv_quantized: y must hold count * rows floats");
  kernels_for(x.variant());  // throws for a variant this CPU cannot run
}

// From this many vectors on, quantising them in parallel pays for a fork/join.
constexpr int kParallelQuantizeCount = 8;

thread_local QuantizedActivations call_scratch;  // reused: no allocation per call once it is large enough

}  // namespace

void QuantizedActivations::AlignedDelete::operator()(std::byte* bytes) const {
  ::operator delete[](bytes, std::align_val_t{64});
}

void QuantizedActivations::quantize(CpuKernelVariant variant, WeightFormat format, std::span<const float> x, int count,
                                    int cols, int threads) {
  shape(variant, format, count, cols);
  fill(x, threads);
}

void QuantizedActivations::shape(CpuKernelVariant variant, WeightFormat format, int count, int cols) {
  require(count >= 0 && cols > 0, "quantize activations: count must be >= 0 and cols > 0");
  require(traits(format).cpu_int8_kernels, "quantize activations: no int8 kernels for this weight format");
  require(traits(format).valid_cols(static_cast<std::uint64_t>(cols)), "quantize activations: q4_g64 needs cols % 64 == 0");
  const VariantKernels& kernels = kernels_for(variant);
  const bool q8 = format == WeightFormat::q8_row;
  const std::size_t stride = detail::round_up(q8 ? kernels.q8_packed_bytes(cols) : kernels.q4_packed_bytes(cols), 64);
  // amx: room for whole 16-token groups (its GEMM loads 16 tokens per tile
  // and drops the sums of those past the count).
  const std::size_t vectors = detail::round_up(static_cast<std::size_t>(std::max(count, 1)),
                                               variant == CpuKernelVariant::amx ? static_cast<std::size_t>(kAmxTileTokens) : 1);
  const std::size_t needed = stride * vectors;
  if (needed > capacity_) {
    bytes_.reset(static_cast<std::byte*>(::operator new[](needed, std::align_val_t{64})));
    capacity_ = needed;
  }
  variant_ = variant, format_ = format, count_ = count, cols_ = cols, stride_ = stride;
}

void QuantizedActivations::fill(std::span<const float> x, int threads) {
  require(x.size() == static_cast<std::size_t>(count_) * static_cast<std::size_t>(cols_),
          "quantize activations: x must hold count * cols floats");
  const VariantKernels& kernels = kernels_for(variant_);
  auto quantize_one = format_ == WeightFormat::q8_row ? kernels.q8_quantize : kernels.q4_quantize;
  std::byte* out = bytes_.get();
  const float* in = x.data();
  const std::size_t cols = static_cast<std::size_t>(cols_), stride = stride_;
  parallel_for(static_cast<std::size_t>(count_), threads, count_ >= kParallelQuantizeCount,
               [&](std::size_t t) { quantize_one(in + t * cols, static_cast<int>(cols), out + t * stride); });
}

void QuantizedActivations::fill_vector(int index, std::span<const float> x) {
  require(index >= 0 && index < count_ && x.size() == static_cast<std::size_t>(cols_),
          "quantize activations: fill_vector needs an index below count and cols floats");
  const VariantKernels& kernels = kernels_for(variant_);
  auto quantize_one = format_ == WeightFormat::q8_row ? kernels.q8_quantize : kernels.q4_quantize;
  quantize_one(x.data(), cols_, bytes_.get() + static_cast<std::size_t>(index) * stride_);
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

void gemv_quantized_many(std::span<const Q8GemvJob> jobs, int threads) {
  for (const Q8GemvJob& job : jobs) check_job(job, WeightFormat::q8_row);
  split_jobs(jobs, threads, run_q8_rows);
}

void gemv_quantized_many(std::span<const Q4GemvJob> jobs, int threads) {
  for (const Q4GemvJob& job : jobs) check_job(job, WeightFormat::q4_g64);
  split_jobs(jobs, threads, run_q4_rows);
}

GemvTeamWork::GemvTeamWork(std::vector<Q8GemvJob> jobs) : q8_(std::move(jobs)) {
  for (const Q8GemvJob& job : q8_) check_job(job, WeightFormat::q8_row);
}

GemvTeamWork::GemvTeamWork(std::vector<Q4GemvJob> jobs) : q4_(std::move(jobs)) {
  for (const Q4GemvJob& job : q4_) check_job(job, WeightFormat::q4_g64);
}

void GemvTeamWork::share() {
  // One of the two is empty (one format per work): it must not take the pieces.
  if (!q8_.empty()) take_pieces(std::span<const Q8GemvJob>(q8_), next_piece_, run_q8_rows);
  if (!q4_.empty()) take_pieces(std::span<const Q4GemvJob>(q4_), next_piece_, run_q4_rows);
}

void gemv_quantized(const Q8RowView& w, const QuantizedActivations& x, std::span<float> y, int threads) {
  const Q8GemvJob job{w, &x, y};
  gemv_quantized_many(std::span(&job, 1), threads);
}

void gemv_quantized(const Q4G64View& w, const QuantizedActivations& x, std::span<float> y, int threads) {
  const Q4GemvJob job{w, &x, y};
  gemv_quantized_many(std::span(&job, 1), threads);
}

void gemv_batched(const Q8RowView& w, std::span<const float> x, int count, std::span<float> y, const GemvOptions& options) {
  call_scratch.quantize(options.variant, WeightFormat::q8_row, x, count, w.cols, options.threads);
  gemv_quantized(w, call_scratch, y, options.threads);
}

void gemv_batched(const Q4G64View& w, std::span<const float> x, int count, std::span<float> y, const GemvOptions& options) {
  call_scratch.quantize(options.variant, WeightFormat::q4_g64, x, count, w.cols, options.threads);
  gemv_quantized(w, call_scratch, y, options.threads);
}

void gemv(const Q8RowView& w, std::span<const float> x, std::span<float> y, const GemvOptions& options) {
  gemv_batched(w, x, 1, y, options);
}

void gemv(const Q4G64View& w, std::span<const float> x, std::span<float> y, const GemvOptions& options) {
  gemv_batched(w, x, 1, y, options);
}

}  // namespace coli::kernels::cpu
