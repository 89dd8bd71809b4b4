// CPU GEMV for the quantised expert layouts of reference/gemv_reference.h
// (q8_row, q4_g64): y = W x for decode and Y[t] = W X[t] for prefill, with the
// instruction set chosen at run time (portable binaries, no -march=native).
//
// Activation quantisation (identical values in every variant):
//   x is cut into blocks of 64 consecutive elements (q4_g64: exactly the weight
//   groups; q8_row: columns 64b..64b+63, the last block zero-padded). Per block
//     m = max |x_i|,  d = m / 127,  q_i = round_half_even(x_i * (127 / m))
//   (m == 0: d = 0, q_i = 0), so |q_i| <= 127. The kernels then compute
//     q8_row: y[r] = scale[r] * sum_b d_b * sum_{i in b} w[r][i] * q_i
//     q4_g64: y[r] = sum_g (d_g * scale[r][g]) * sum_{i in g} (nibble[r][i] - 8) * q_i
//   with exact int32 inner sums and float outer sums (the order of the float
//   sums differs between variants, so variants agree to float rounding only).
//   avx512vnni fixes that order as the "exact block sum" definition: S_b, the
//   int32 sum of block b, is exact; 16 float lanes take
//     lane[b % 16] = fma(float(S_b), c_b, lane[b % 16])  in block order,
//   c_b = d_b (q8) or the float product d_g * scale[r][g] (q4), and the lanes
//   add as a tree (j + j+8, then j + j+4, j + j+2, j + j+1), times scale[r]
//   for q8. Its decode kernel (one row at a time) and its prefill GEMM (from
//   4 tokens: 16 rows per vector, weights repacked once per call, tiles of 8
//   tokens) compute that same expression, so they agree bit for bit.
//   Since |x_i - d_b q_i| <= d_b / 2 (up to float rounding of 127/m), the
//   deviation from the reference on exact x is bounded per row by
//     sum_b (d_b / 2) * sum_{i in b} |w_eff[r][i]| + float summation error,
//   where w_eff is the dequantised weight. x must be finite.
//
// Threading: rows are split into contiguous blocks, one per OpenMP thread
// (static, a multiple of 16 rows each so no two threads write one cache line
// of y). Every row is computed by one thread in a fixed order, so results do
// not depend on the thread count. threads == 1 runs on the calling thread
// without entering OpenMP. Use one thread count for every call: libgomp
// rebuilds its team when consecutive regions differ in size (10x slower
// calls seen on 16 cores), so the team is never shrunk to fit small matrices.
// Matrices with few rows per thread waste most of a call on the fork/join
// (about 2-3 us at 16 threads): batch them with gemv_quantized_many.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"
#include "reference/gemv_reference.h"

namespace coli::kernels::cpu {

// Ordered slowest to fastest.
enum class CpuKernelVariant { scalar, avx2, avx512, avx512_vnni, amx };

// "scalar", "avx2" (AVX2+FMA+F16C), "avx512" (F/BW/VL), "avx512vnni" (+VNNI),
// "amx" (+AMX-TILE/AMX-INT8, and the OS's permission for tile state, asked
// for by variant_supported: Linux 5.16+). amx computes what avx512vnni does,
// bit for bit: decode runs the same kernels, 4+ tokens the GEMM on tiles.
std::string_view variant_name(CpuKernelVariant variant);
bool variant_supported(CpuKernelVariant variant);  // by the CPU this runs on
std::vector<CpuKernelVariant> supported_variants();  // slowest first; always holds scalar
CpuKernelVariant best_supported_variant();
// Name -> variant; an unknown name or one this CPU cannot run is an error.
Result<CpuKernelVariant> parse_variant(std::string_view name);
// The value of COLI_CPU_KERNEL -> variant: null or empty means the best
// supported, otherwise parse_variant (errors name the variable).
Result<CpuKernelVariant> variant_from_override(const char* value);
// The variant to use: COLI_CPU_KERNEL=scalar|avx2|avx512|avx512vnni|amx when set
// (read here and nowhere else), else the best supported. Evaluated once per
// process; later calls return the same answer.
Result<CpuKernelVariant> selected_variant();

// Non-owning views, so weights can live in mapped files.
struct Q8RowView {
  const std::int8_t* weights = nullptr;  // rows * cols
  const float* scales = nullptr;         // rows
  int rows = 0;
  int cols = 0;
};
struct Q4G64View {
  const std::uint8_t* nibbles = nullptr;  // rows * cols / 2
  const std::uint16_t* scales = nullptr;  // rows * cols / 64, binary16
  int rows = 0;
  int cols = 0;  // multiple of 64
};
Q8RowView view_of(const Q8RowMatrix& matrix);
Q4G64View view_of(const Q4G64Matrix& matrix);

// Activations quantised (and laid out) for one variant and weight format
// (q8_row or q4_g64: the formats whose traits say cpu_int8_kernels).
// Quantise once and reuse for every matrix that multiplies the same x (gate
// and up of all active experts); the buffer is kept between calls.
class QuantizedActivations {
 public:
  // x: count vectors of cols floats, one after another; threads > 1 splits
  // the vectors across OpenMP threads once there are enough of them for the
  // fork/join to pay (prefill, not decode).
  void quantize(CpuKernelVariant variant, WeightFormat format, std::span<const float> x, int count, int cols,
                int threads = 1);
  // quantize() in two steps: the shape (storage, and what count() and cols()
  // say), then the values of x (count * cols floats). For jobs made and
  // checked before a team starts (GemvTeamWork) whose activations one of its
  // steps quantises; the bytes are quantize()'s.
  void shape(CpuKernelVariant variant, WeightFormat format, int count, int cols);
  void fill(std::span<const float> x, int threads = 1);
  // One vector's values (cols floats) at `index` < count(): the bytes fill()
  // gives it, for rows quantised where they lie instead of gathered first.
  void fill_vector(int index, std::span<const float> x);

  CpuKernelVariant variant() const { return variant_; }
  WeightFormat format() const { return format_; }
  int count() const { return count_; }
  int cols() const { return cols_; }
  const std::byte* vector_bytes(int index) const { return bytes_.get() + static_cast<std::size_t>(index) * stride_; }
  std::size_t stride() const { return stride_; }

 private:
  struct AlignedDelete { void operator()(std::byte* bytes) const; };
  std::unique_ptr<std::byte[], AlignedDelete> bytes_;
  std::size_t capacity_ = 0;
  std::size_t stride_ = 0;
  CpuKernelVariant variant_ = CpuKernelVariant::scalar;
  WeightFormat format_ = WeightFormat::q8_row;
  int count_ = 0;
  int cols_ = 0;
};

struct GemvOptions {
  CpuKernelVariant variant = CpuKernelVariant::scalar;
  int threads = 1;
};

// y = W x (x: cols, y: rows). Mismatched sizes or a variant this CPU cannot
// run throw std::invalid_argument (a programming error, not a runtime one).
void gemv(const Q8RowView& w, std::span<const float> x, std::span<float> y, const GemvOptions& options);
void gemv(const Q4G64View& w, std::span<const float> x, std::span<float> y, const GemvOptions& options);

// Y[t] = W X[t] for t < count (x: count * cols, y: count * rows). Each weight
// block is loaded once per few tokens (avx512vnni: once per call, for all
// tokens); every Y[t] equals gemv() of X[t] bit for bit, whatever count and
// the thread count.
void gemv_batched(const Q8RowView& w, std::span<const float> x, int count, std::span<float> y,
                  const GemvOptions& options);
void gemv_batched(const Q4G64View& w, std::span<const float> x, int count, std::span<float> y,
                  const GemvOptions& options);

// The same with activations quantised beforehand (their variant is used).
void gemv_quantized(const Q8RowView& w, const QuantizedActivations& x, std::span<float> y, int threads);
void gemv_quantized(const Q4G64View& w, const QuantizedActivations& x, std::span<float> y, int threads);

// Several independent products in one parallel region (gate and up of every
// active expert, then all downs): the rows of all jobs are split evenly
// across the threads, so the fork/join is paid once, not per matrix (at 16
// threads it costs about as much as streaming 0.3 MB). Every y equals
// gemv_quantized's bit for bit.
struct Q8GemvJob {
  Q8RowView w;
  const QuantizedActivations* x = nullptr;
  std::span<float> y;  // x->count() * w.rows
};
struct Q4GemvJob {
  Q4G64View w;
  const QuantizedActivations* x = nullptr;
  std::span<float> y;  // x->count() * w.rows
};
void gemv_quantized_many(std::span<const Q8GemvJob> jobs, int threads);
void gemv_quantized_many(std::span<const Q4GemvJob> jobs, int threads);

// gemv_quantized_many's work as one step of a team that runs several steps
// in one parallel region (team_steps in cpu/parallel_for.h). Made before
// the region, so bad jobs throw here and never inside it (their activations
// may be only shaped yet: QuantizedActivations::shape); then every member
// of the team calls share(), which returns, without a barrier, when no piece
// is left. The same pieces as gemv_quantized_many, so the same bits. One
// share() outside a region does all the work on the calling thread.
class GemvTeamWork {
 public:
  explicit GemvTeamWork(std::vector<Q8GemvJob> jobs);
  explicit GemvTeamWork(std::vector<Q4GemvJob> jobs);
  void share();

 private:
  std::vector<Q8GemvJob> q8_;
  std::vector<Q4GemvJob> q4_;
  std::atomic<long long> next_piece_{0};
};

}  // namespace coli::kernels::cpu
