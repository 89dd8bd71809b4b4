#version 450
// shmem_x: the workgroup stages x in shared tiles of X_TILE floats; each row
// gets WORKGROUP_SIZE / ROWS_PER_WORKGROUP consecutive invocations, whose
// partial sums are added through shared memory. No subgroup operations.
// Shared memory: 4 * X_TILE + 4 * WORKGROUP_SIZE bytes (catalogue.h).
#extension GL_GOOGLE_include_directive : require

#include "coli/shaders/gemv_constants.h"
#include "gemv_io.glsl"
layout(constant_id = COLI_GEMV_SPEC_ID_X_TILE) const uint X_TILE = COLI_GEMV_DEFAULT_X_TILE;

shared float x_tile[X_TILE];
shared float partial_sums[WORKGROUP_SIZE];

#define X_AT(i) x_tile[i]
#include "gemv_format.glsl"

void main() {
  uint lanes_per_row = max(WORKGROUP_SIZE / ROWS_PER_WORKGROUP, 1u);
  uint local_row = gl_LocalInvocationIndex / lanes_per_row;
  uint lane = gl_LocalInvocationIndex % lanes_per_row;
  uint row = gl_WorkGroupID.x * ROWS_PER_WORKGROUP + local_row;
  bool owns_row = local_row < ROWS_PER_WORKGROUP && row < pc.rows;

  float acc = 0.0;
  for (uint tile_begin = 0u; tile_begin < pc.cols; tile_begin += X_TILE) {
    uint tile_end = min(tile_begin + X_TILE, pc.cols);  // the last tile may be short
    barrier();  // everyone is done with the previous tile
    for (uint i = gl_LocalInvocationIndex; i < tile_end - tile_begin; i += WORKGROUP_SIZE) {
      x_tile[i] = x[tile_begin + i];
    }
    barrier();
    if (owns_row) {
      acc += row_partial(row, tile_begin, tile_end, lane, lanes_per_row, tile_begin);
    }
  }

  partial_sums[gl_LocalInvocationIndex] = acc;
  barrier();
  if (owns_row && lane == 0u) {
    float total = 0.0;
    for (uint i = 0u; i < lanes_per_row; ++i) {
      total += partial_sums[gl_LocalInvocationIndex + i];
    }
    y[row] = row_finish(row, total);
  }
}
