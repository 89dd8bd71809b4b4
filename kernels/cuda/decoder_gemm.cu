// The prefill's matrix kernels (decoder_batch.h): one block computes a tile
// of kGemmTileTokens rows (tokens, or a slot's choices) x 64 weight rows.
// Tensor-core blocks (bf16, f16, q8_row, q4_g64 weights) de-quantise each
// 64 x 64 weight tile to f16 in shared memory once for the tile's 64 rows;
// f32 weights take a CUDA-core block with f32 tiles (exact f32 arithmetic).
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdlib>
#include <cstring>

#include "cuda/decoder_batch.h"
#include "cuda/decoder_common.cuh"

namespace coli::kernels::cuda::decoder {
namespace {

constexpr int kTileM = kGemmTileTokens;
constexpr int kTileN = 64;
constexpr int kGemmThreads = 128;
static_assert(kTileM == 64 && kTileN == 64, "the loaders below assume 64 x 64 tiles");

// The rows of this block's tile: x row and y row of each, and the slot's
// matrices. `valid` = 0: nothing to do (past a slot's count, or the batch's).
struct TileRows {
  int x_row[kTileM];
  int y_row[kTileM];
  int valid;
};

__device__ void find_tile_rows(const GemmRows& r, TileRows& t) {
  const int first = static_cast<int>(blockIdx.y) * kTileM;
  if (threadIdx.x == 0) {
    int begin = 0, end = r.tokens;
    if (r.order != nullptr) {
      begin = r.offsets[blockIdx.z];
      end = r.offsets[blockIdx.z + 1];
    }
    t.valid = max(0, min(kTileM, end - begin - first));
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < t.valid; i += kGemmThreads) {
    if (r.order != nullptr) {
      const int choice = r.order[r.offsets[blockIdx.z] + first + i];
      t.x_row[i] = choice / r.x_divisor;
      t.y_row[i] = choice;
    } else {
      t.x_row[i] = t.y_row[i] = first + i;
    }
  }
  __syncthreads();
}

// The slot's matrix (grouped blocks: slot blockIdx.z's record).
__device__ __forceinline__ Matrix slot_matrix(const Matrix& m, const GemmRows& r) {
  Matrix out = m;
  const std::size_t offset = static_cast<std::size_t>(blockIdx.z) * r.slot_stride;
  out.weights = static_cast<const std::uint8_t*>(m.weights) + offset;
  if (m.scales != nullptr) out.scales = static_cast<const std::uint8_t*>(m.scales) + offset;
  return out;
}

// x[row][k] or 0 beyond the row's end.
__device__ __forceinline__ float x_at(const float* row, int k, int cols) { return k < cols ? row[k] : 0.0f; }


// ---- tensor-core blocks ---------------------------------------------------

constexpr int kTileK = 64;
constexpr int kHalfPitch = kTileK + 8;   // halves per shared row (bank spread; a multiple of 8 for wmma)
constexpr int kFloatPitch = kTileN + 4;  // floats per row of the result tile

template <bool kSwiglu>
struct TensorShared {
  union {
    struct {
      __half a[kTileM][kHalfPitch];
      __half b[kSwiglu ? 2 : 1][kTileN][kHalfPitch];
    } tiles;
    float c[kSwiglu ? 2 : 1][kTileM][kFloatPitch];  // the products of gate (and up)
  };
};

// A k-step's tile of x (f16 rows) in registers: rows t.x_row[.], columns
// k0..k0+63, 4 x 8 halves per thread (fetched a step ahead, stored as they are).
constexpr int kXLoads = kTileM * (kTileK / 8) / kGemmThreads;
struct XFetch {
  uint4 v[kXLoads];
};

__device__ void fetch_x_tile(const GemmRows& r, const TileRows& t, int cols, int k0, XFetch& f) {
  const auto* x = reinterpret_cast<const unsigned short*>(r.x_half);
  const bool vector = cols % 8 == 0 && detail::aligned16(x);
#pragma unroll
  for (int j = 0; j < kXLoads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kGemmThreads;
    const int m = i / (kTileK / 8), k = k0 + (i % (kTileK / 8)) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (m < t.valid) {
      const unsigned short* row = x + static_cast<std::size_t>(t.x_row[m]) * cols;
      if (vector) {
        if (k < cols) v = *reinterpret_cast<const uint4*>(row + k);  // cols % 8 == 0: all 8 inside or none
      } else {
        unsigned short e[8];
#pragma unroll
        for (int n = 0; n < 8; ++n) e[n] = k + n < cols ? row[k + n] : 0;
        v = make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
      }
    }
    f.v[j] = v;
  }
}

__device__ void store_x_tile(const XFetch& f, __half (*a)[kHalfPitch]) {
#pragma unroll
  for (int j = 0; j < kXLoads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kGemmThreads;
    *reinterpret_cast<uint4*>(&a[i / (kTileK / 8)][(i % (kTileK / 8)) * 8]) = f.v[j];
  }
}

// A k-step's tile of a q4_g64 or q8_row matrix in registers (16-byte
// loads: q4_g64 one per thread, q8_row two), de-quantised when stored.
// Other formats (and q8_row rows that are not 16-byte aligned) take
// load_weight_tile below, unfetched.
struct WeightFetch {
  uint4 words[2];
  __half2 scale;
};

// q8_row rows fetched 16 bytes at a time: cols a multiple of 16, the matrix 16-byte aligned.
__device__ __forceinline__ bool fetchable(const Matrix& w) { return w.cols % 16 == 0 && detail::aligned16(w.weights); }

// q4_g64: thread i reads row i / 2, columns (i % 2) * 32 .. +32 (16 bytes, one
// group scale); q8_row: thread i reads rows i / 4 and 32 + i / 4, columns
// (i % 4) * 16 .. +16 (16 bytes each; the row scales apply to the products).
template <WeightFormat kFormat>
__device__ void fetch_weight_tile(const Matrix& w, int n0, int k0, WeightFetch& f) {
  const std::size_t cols = static_cast<std::size_t>(w.cols);
  const int i = static_cast<int>(threadIdx.x);
  if constexpr (kFormat == WeightFormat::q4_g64) {
    const int row = n0 + i / 2, half = i % 2;
    f.words[0] = make_uint4(0, 0, 0, 0);
    f.scale = __float2half2_rn(0.0f);
    if (row < w.rows) {
      const auto* bytes = static_cast<const std::uint8_t*>(w.weights) + row * (cols / 2) + k0 / 2 + half * 16;
      f.words[0] = __ldg(reinterpret_cast<const uint4*>(bytes));
      f.scale = __half2half2(__ushort_as_half(__ldg(static_cast<const unsigned short*>(w.scales) + row * (cols / 64) + k0 / 64)));
    }
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = n0 + i / 4 + 32 * j, k = k0 + (i % 4) * 16;
      f.words[j] = make_uint4(0, 0, 0, 0);
      if (row < w.rows && k < w.cols) {  // cols % 16 == 0: the 16 bytes are inside the row
        f.words[j] = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint8_t*>(w.weights) + row * cols + k));
      }
    }
  }
}

__device__ __forceinline__ unsigned half2_bits(__half2 h) { return *reinterpret_cast<unsigned*>(&h); }
__device__ __forceinline__ __half2 bits_half2(unsigned u) { return *reinterpret_cast<__half2*>(&u); }

// Eight q4 values (one word, nibble n = column n, low nibble first) as f16
// (q - 8) * scale, exact but for the one rounding of the product: a nibble
// or'ed under f16 1024's exponent is 1024 + q, and 1024 + q - 1032 = q - 8.
__device__ __forceinline__ uint4 q4_word_to_half(unsigned w, __half2 scale) {
  constexpr unsigned kMagic = 0x64006400u, kNibbles = 0x000f000fu;
  const unsigned t0 = (w & kNibbles) | kMagic, t1 = ((w >> 4) & kNibbles) | kMagic;    // (q0, q4), (q1, q5)
  const unsigned t2 = ((w >> 8) & kNibbles) | kMagic, t3 = ((w >> 12) & kNibbles) | kMagic;  // (q2, q6), (q3, q7)
  const unsigned pairs[4] = {__byte_perm(t0, t1, 0x5410), __byte_perm(t2, t3, 0x5410), __byte_perm(t0, t1, 0x7632),
                             __byte_perm(t2, t3, 0x7632)};
  const __half2 offset = __float2half2_rn(1032.0f);
  unsigned out[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) out[j] = half2_bits(__hmul2(__hsub2(bits_half2(pairs[j]), offset), scale));
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Four int8 values (one word, byte n = column n) as exact f16: a byte
// flipped to unsigned (b + 128) under f16 1024's exponent, minus 1152.
__device__ __forceinline__ uint2 q8_word_to_half(unsigned w) {
  const unsigned u = w ^ 0x80808080u;
  const __half2 offset = __float2half2_rn(1152.0f);
  return make_uint2(half2_bits(__hsub2(bits_half2(__byte_perm(u, 0x64646464u, 0x4140)), offset)),
                    half2_bits(__hsub2(bits_half2(__byte_perm(u, 0x64646464u, 0x4342)), offset)));
}

template <WeightFormat kFormat>
__device__ void store_weight_tile(const WeightFetch& f, __half (*b)[kHalfPitch]) {
  const int i = static_cast<int>(threadIdx.x);
  if constexpr (kFormat == WeightFormat::q4_g64) {
    const unsigned packed[4] = {f.words[0].x, f.words[0].y, f.words[0].z, f.words[0].w};
#pragma unroll
    for (int word = 0; word < 4; ++word) {
      *reinterpret_cast<uint4*>(&b[i / 2][(i % 2) * 32 + word * 8]) = q4_word_to_half(packed[word], f.scale);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const unsigned packed[4] = {f.words[j].x, f.words[j].y, f.words[j].z, f.words[j].w};
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        const uint2 lo = q8_word_to_half(packed[2 * pair]), hi = q8_word_to_half(packed[2 * pair + 1]);
        *reinterpret_cast<uint4*>(&b[i / 4 + 32 * j][(i % 4) * 16 + pair * 8]) = make_uint4(lo.x, lo.y, hi.x, hi.y);
      }
    }
  }
}

// Weight rows n0..n0+63, columns k0..k0+63, as f16 into b (q8_row without
// its row scales), one element per thread and step: the formats
// fetch_weight_tile does not take (f16, bf16, unaligned q8_row).
template <WeightFormat kFormat>
__device__ void load_weight_tile(const Matrix& w, int n0, int k0, __half (*b)[kHalfPitch]) {
  const std::size_t cols = static_cast<std::size_t>(w.cols);
  for (int i = static_cast<int>(threadIdx.x); i < kTileN * kTileK; i += kGemmThreads) {
    const int n = i / kTileK, k = i % kTileK, row = n0 + n;
    float v = 0;
    if (row < w.rows && k0 + k < w.cols) {
      if constexpr (kFormat == WeightFormat::q8_row) {
        v = static_cast<float>(static_cast<const signed char*>(w.weights)[row * cols + k0 + k]);
      } else {
        v = float_weight<kFormat>(static_cast<const std::uint8_t*>(w.weights) + row * cols * 2, k0 + k);
      }
    }
    b[n][k] = to_half(v);
  }
}

// Column n's factor on the products: q8_row's row scale (its tiles are the
// bare int8 values), 1 for the formats de-quantised in full.
template <WeightFormat kFormat>
__device__ __forceinline__ float column_scale(const Matrix& w, int row) {
  if constexpr (kFormat == WeightFormat::q8_row) return __ldg(static_cast<const float*>(w.scales) + row);
  return 1.0f;
}

// Writes the block's products: y = silu(gate) * up (y_half when given), or
// y = (accumulate ? y : 0) + product + bias.
template <WeightFormat kFormat, bool kSwiglu>
__device__ void store_products(const GemmRows& r, const TileRows& t, const TensorShared<kSwiglu>& s, const Matrix& gate,
                               const Matrix& up, int n0, const float* bias, bool accumulate) {
  for (int i = static_cast<int>(threadIdx.x); i < kTileM * kTileN; i += kGemmThreads) {
    const int m = i / kTileN, n = i % kTileN, row = n0 + n;
    if (m >= t.valid || row >= gate.rows) continue;
    const std::size_t at = static_cast<std::size_t>(t.y_row[m]) * gate.rows + row;
    const float g = s.c[0][m][n] * column_scale<kFormat>(gate, row);
    if constexpr (kSwiglu) {
      const float v = silu(g) * (s.c[kSwiglu ? 1 : 0][m][n] * column_scale<kFormat>(up, row));
      if (r.y_half != nullptr) {
        reinterpret_cast<__half*>(r.y_half)[at] = to_half(v);
      } else {
        r.y[at] = v;
      }
    } else {
      const float v = g + (bias != nullptr ? bias[row] : 0.0f);
      r.y[at] = accumulate ? r.y[at] + v : v;
    }
  }
}

using namespace nvcuda;
// At least 3 blocks per SM (<= 170 registers): the prefetched tiles cost
// registers, and the blocks of an SM hide each other's loads.
constexpr int kTensorBlocksPerSm = 3;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// 4 warps, each a 32 x 32 quarter of the tile (2 x 2 fragments); with
// kSwiglu the second weight (up) gets its own accumulators and the result is
// silu(gate) * up, element by element.
template <WeightFormat kFormat, bool kSwiglu, bool kPrefetch>
__global__ void __launch_bounds__(kGemmThreads, kTensorBlocksPerSm)
    tensor_gemm_kernel(Matrix w0, Matrix w1, GemmRows r, const float* bias, bool accumulate) {
  __shared__ TileRows t;
  __shared__ __align__(32) TensorShared<kSwiglu> s;
  find_tile_rows(r, t);
  if (t.valid == 0) return;  // the whole block
  const Matrix gate = slot_matrix(w0, r);
  const Matrix up = kSwiglu ? slot_matrix(w1, r) : gate;
  const int n0 = static_cast<int>(blockIdx.x) * kTileN;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, wm = warp / 2, wn = warp % 2;
  FragC acc[2][2], acc_up[kSwiglu ? 2 : 1][2];
  for (auto& row : acc) for (auto& f : row) wmma::fill_fragment(f, 0.0f);
  for (auto& row : acc_up) for (auto& f : row) wmma::fill_fragment(f, 0.0f);
  // kPrefetch: the next k-step's tiles are fetched into registers before
  // this step's products, so their global loads are in flight while the
  // tensor cores work (more registers: fewer blocks per SM).
  const bool fetched = kFormat == WeightFormat::q4_g64 || (kFormat == WeightFormat::q8_row && fetchable(gate));
  XFetch x;
  WeightFetch wg, wu;
  const auto fetch = [&](int k0) {
    fetch_x_tile(r, t, gate.cols, k0, x);
    if (fetched) {
      fetch_weight_tile<kFormat>(gate, n0, k0, wg);
      if constexpr (kSwiglu) fetch_weight_tile<kFormat>(up, n0, k0, wu);
    }
  };
  if constexpr (kPrefetch) fetch(0);
  for (int k0 = 0; k0 < gate.cols; k0 += kTileK) {
    if constexpr (!kPrefetch) fetch(k0);
    store_x_tile(x, s.tiles.a);
    if (fetched) {
      store_weight_tile<kFormat>(wg, s.tiles.b[0]);
      if constexpr (kSwiglu) store_weight_tile<kFormat>(wu, s.tiles.b[kSwiglu ? 1 : 0]);
    } else if constexpr (kFormat != WeightFormat::q4_g64) {
      load_weight_tile<kFormat>(gate, n0, k0, s.tiles.b[0]);
      if constexpr (kSwiglu) load_weight_tile<kFormat>(up, n0, k0, s.tiles.b[kSwiglu ? 1 : 0]);
    }
    __syncthreads();
    if (kPrefetch && k0 + kTileK < gate.cols) fetch(k0 + kTileK);
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      FragA a[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &s.tiles.a[32 * wm + 16 * i][kk], kHalfPitch);
      for (int j = 0; j < 2; ++j) {
        FragB b;
        wmma::load_matrix_sync(b, &s.tiles.b[0][32 * wn + 16 * j][kk], kHalfPitch);
        for (int i = 0; i < 2; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
        if constexpr (kSwiglu) {
          wmma::load_matrix_sync(b, &s.tiles.b[kSwiglu ? 1 : 0][32 * wn + 16 * j][kk], kHalfPitch);
          for (int i = 0; i < 2; ++i) wmma::mma_sync(acc_up[i][j], a[i], b, acc_up[i][j]);
        }
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      float* at = &s.c[0][32 * wm + 16 * i][32 * wn + 16 * j];
      wmma::store_matrix_sync(at, acc[i][j], kFloatPitch, wmma::mem_row_major);
      if constexpr (kSwiglu) {
        wmma::store_matrix_sync(&s.c[kSwiglu ? 1 : 0][32 * wm + 16 * i][32 * wn + 16 * j], acc_up[i][j], kFloatPitch,
                                wmma::mem_row_major);
      }
    }
  }
  __syncthreads();
  store_products<kFormat, kSwiglu>(r, t, s, gate, up, n0, bias, accumulate);
}

// ---- f32 blocks (CUDA cores) ----------------------------------------------

constexpr int kSimtTileK = 32;

template <bool kSwiglu>
struct SimtShared {
  float a[kSimtTileK][kTileM + 1];                     // [k][m], padded: the loads' stores spread over banks
  float b[kSwiglu ? 2 : 1][kSimtTileK][kTileN + 1];    // [k][n]
};

// Thread (tx, ty) computes rows ty + 16 i (i < 4) and columns tx + 8 j (j < 8).
template <bool kSwiglu>
__global__ void __launch_bounds__(kGemmThreads)
    simt_gemm_kernel(Matrix w0, Matrix w1, GemmRows r, const float* bias, bool accumulate) {
  __shared__ TileRows t;
  __shared__ SimtShared<kSwiglu> s;
  find_tile_rows(r, t);
  if (t.valid == 0) return;
  const Matrix gate = slot_matrix(w0, r);
  const Matrix up = kSwiglu ? slot_matrix(w1, r) : gate;
  const int n0 = static_cast<int>(blockIdx.x) * kTileN, cols = gate.cols;
  const int tx = static_cast<int>(threadIdx.x) % 8, ty = static_cast<int>(threadIdx.x) / 8;
  float acc[4][8] = {}, acc_up[kSwiglu ? 4 : 1][8] = {};
  for (int k0 = 0; k0 < cols; k0 += kSimtTileK) {
    for (int i = static_cast<int>(threadIdx.x); i < kTileM * kSimtTileK; i += kGemmThreads) {
      const int m = i / kSimtTileK, k = i % kSimtTileK;
      s.a[k][m] = m < t.valid ? x_at(r.x + static_cast<std::size_t>(t.x_row[m]) * cols, k0 + k, cols) : 0.0f;
    }
    for (int i = static_cast<int>(threadIdx.x); i < kTileN * kSimtTileK; i += kGemmThreads) {
      const int n = i / kSimtTileK, k = i % kSimtTileK, row = n0 + n;
      const bool inside = row < gate.rows && k0 + k < cols;
      const std::size_t at = static_cast<std::size_t>(row) * cols + k0 + k;
      s.b[0][k][n] = inside ? __ldg(static_cast<const float*>(gate.weights) + at) : 0.0f;
      if constexpr (kSwiglu) s.b[kSwiglu ? 1 : 0][k][n] = inside ? __ldg(static_cast<const float*>(up.weights) + at) : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < kSimtTileK; ++k) {
      float a[4];
      for (int i = 0; i < 4; ++i) a[i] = s.a[k][ty + 16 * i];
      for (int j = 0; j < 8; ++j) {
        const float b = s.b[0][k][tx + 8 * j];
        for (int i = 0; i < 4; ++i) acc[i][j] = fmaf(a[i], b, acc[i][j]);
        if constexpr (kSwiglu) {
          const float u = s.b[kSwiglu ? 1 : 0][k][tx + 8 * j];
          for (int i = 0; i < 4; ++i) acc_up[kSwiglu ? i : 0][j] = fmaf(a[i], u, acc_up[kSwiglu ? i : 0][j]);
        }
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int m = ty + 16 * i;
    if (m >= t.valid) continue;
    for (int j = 0; j < 8; ++j) {
      const int n = n0 + tx + 8 * j;
      if (n >= gate.rows) continue;
      float* y = r.y + static_cast<std::size_t>(t.y_row[m]) * gate.rows + n;
      if constexpr (kSwiglu) {
        *y = silu(acc[i][j]) * acc_up[kSwiglu ? i : 0][j];
      } else {
        const float v = acc[i][j] + (bias != nullptr ? bias[n] : 0.0f);
        *y = accumulate ? *y + v : v;
      }
    }
  }
}

// COLI_CUDA_GEMM=simple: the tensor-core blocks load each k-step's tiles
// when they need them (no register prefetch); the default prefetches.
bool prefetch_tiles() {
  static const bool prefetch = [] {
    const char* choice = std::getenv("COLI_CUDA_GEMM");
    return choice == nullptr || std::strcmp(choice, "simple") != 0;
  }();
  return prefetch;
}

dim3 gemm_grid(int rows, const GemmRows& r) {
  return dim3((rows + kTileN - 1) / kTileN, (r.tokens + kTileM - 1) / kTileM, r.order != nullptr ? r.slots : 1);
}

template <bool kSwiglu>
struct GemmLaunch {
  template <WeightFormat kFormat>
  struct For {
    static void run(cudaStream_t s, const Matrix& w0, const Matrix& w1, const GemmRows& r, const float* bias, bool acc) {
      if constexpr (kFormat == WeightFormat::f32) {
        simt_gemm_kernel<kSwiglu><<<gemm_grid(w0.rows, r), kGemmThreads, 0, s>>>(w0, w1, r, bias, acc);
      } else {
        if (prefetch_tiles()) {
          tensor_gemm_kernel<kFormat, kSwiglu, true><<<gemm_grid(w0.rows, r), kGemmThreads, 0, s>>>(w0, w1, r, bias, acc);
        } else {
          tensor_gemm_kernel<kFormat, kSwiglu, false><<<gemm_grid(w0.rows, r), kGemmThreads, 0, s>>>(w0, w1, r, bias, acc);
        }
      }
    }
  };
};

// The activations the format's kernel reads and writes are given (see GemmRows).
bool rows_fit(const GemmRows& r, WeightFormat format, bool swiglu) {
  const bool f32 = format == WeightFormat::f32;
  const bool input = f32 ? r.x != nullptr : r.x_half != nullptr;
  const bool output = r.y != nullptr || (swiglu && !f32 && r.y_half != nullptr);
  return r.tokens > 0 && input && output && r.x_divisor > 0 &&
         (r.order == nullptr || (r.offsets != nullptr && r.slots > 0));
}

bool matrix_fits(const Matrix& m) {
  return m.rows > 0 && m.cols > 0 && (m.format != WeightFormat::q4_g64 || m.cols % 64 == 0);
}

}  // namespace

int gemm(Stream stream, const Matrix& w, const GemmRows& rows, const float* bias, bool accumulate) {
  if (!rows_fit(rows, w.format, false) || !matrix_fits(w)) return static_cast<int>(cudaErrorInvalidValue);
  for_format<GemmLaunch<false>::For>(w.format, static_cast<cudaStream_t>(stream), w, w, rows, bias, accumulate);
  return static_cast<int>(cudaGetLastError());
}

int gemm_swiglu(Stream stream, const Matrix& gate, const Matrix& up, const GemmRows& rows) {
  if (!rows_fit(rows, gate.format, true) || !matrix_fits(gate) || gate.format != up.format || gate.rows != up.rows || gate.cols != up.cols) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  for_format<GemmLaunch<true>::For>(gate.format, static_cast<cudaStream_t>(stream), gate, up, rows, nullptr, false);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::decoder
