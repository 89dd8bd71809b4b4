#version 450
// tile64k: x staged in one fixed tile of 16384 floats (65536 bytes of shared
// memory, so only for devices allowing 64 KiB); each subgroup computes whole
// rows from the tile and reduces with subgroupAdd. Wider rows are done in
// tiles, reloading x for each pass over the workgroup's rows.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "coli/shaders/gemv_constants.h"
#include "gemv_io.glsl"

const uint X_TILE = COLI_GEMV_TILE64K_X_TILE;
shared float x_tile[X_TILE];

#define X_AT(i) x_tile[i]
#include "gemv_format.glsl"

void load_tile(uint tile_begin, uint tile_end) {
  for (uint i = gl_LocalInvocationIndex; i < tile_end - tile_begin; i += WORKGROUP_SIZE) {
    x_tile[i] = x[tile_begin + i];
  }
}

void main() {
  uint lane = subgroupExclusiveAdd(1u);
  uint lanes = subgroupAdd(1u);
  uint first_row = gl_WorkGroupID.x * ROWS_PER_WORKGROUP;
  bool one_tile = pc.cols <= X_TILE;  // uniform: load x once
  if (one_tile) {
    load_tile(0u, pc.cols);
    barrier();
  }
  // The pass count is the same for every subgroup, so the barriers below
  // are reached in uniform control flow.
  uint passes = (ROWS_PER_WORKGROUP + gl_NumSubgroups - 1u) / gl_NumSubgroups;
  for (uint pass = 0u; pass < passes; ++pass) {
    uint r = pass * gl_NumSubgroups + gl_SubgroupID;
    uint row = first_row + r;
    bool owns_row = r < ROWS_PER_WORKGROUP && row < pc.rows;
    float acc = 0.0;
    for (uint tile_begin = 0u; tile_begin < pc.cols; tile_begin += X_TILE) {
      uint tile_end = min(tile_begin + X_TILE, pc.cols);
      if (!one_tile) {
        barrier();
        load_tile(tile_begin, tile_end);
        barrier();
      }
      if (owns_row) {
        acc += row_partial(row, tile_begin, tile_end, lane, lanes, tile_begin);
      }
    }
    float total = subgroupAdd(acc);
    if (owns_row && subgroupElect()) {
      y[row] = row_finish(row, total);
    }
  }
}
