// GEMV for 1..16 tokens: one warp per output row, tokens in tiles of 1
// (decode) or 8 (grid.y = token tiles; a tile past 8 tokens reads the rows
// again, from L2 mostly).
#include <cuda_runtime.h>

#include "cuda/quantized_rows.cuh"

namespace coli::kernels::cuda::detail {
namespace {

template <WeightFormat kFormat, int kTile>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    gemv_kernel(MatrixPointers m, const float* x, float* y, int count) {
  const int row = warp_row();
  if (row >= m.rows) return;  // the whole warp
  const int first = static_cast<int>(blockIdx.y) * kTile;
  const int valid = min(kTile, count - first);
  float dots[kTile];
  row_dots<kFormat, kTile>(m, row, x + static_cast<std::size_t>(first) * m.cols, valid, dots);
  if (!lane_zero()) return;
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    if (t < valid) y[static_cast<std::size_t>(first + t) * m.rows + row] = dots[t];
  }
}

template <int kTile>
void launch_tile(WeightFormat format, const MatrixPointers& m, const float* x, float* y, int count) {
  const dim3 grid((m.rows + kWarpsPerBlock - 1) / kWarpsPerBlock, (count + kTile - 1) / kTile);
  const dim3 block(kWarpsPerBlock * kWarpSize);
  if (format == WeightFormat::q8_row) {
    gemv_kernel<WeightFormat::q8_row, kTile><<<grid, block>>>(m, x, y, count);
  } else {
    gemv_kernel<WeightFormat::q4_g64, kTile><<<grid, block>>>(m, x, y, count);
  }
}

}  // namespace

int launch_gemv(WeightFormat format, const MatrixPointers& matrix, const float* x, float* y, int count) {
  if (count == 1) {
    launch_tile<1>(format, matrix, x, y, count);
  } else {
    launch_tile<8>(format, matrix, x, y, count);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::detail
