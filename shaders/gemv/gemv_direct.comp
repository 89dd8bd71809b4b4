#version 450
// direct: no shared memory. Each subgroup computes whole rows, reading x
// straight from the buffer, and reduces with subgroupAdd.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "coli/shaders/gemv_constants.h"
#include "gemv_io.glsl"
#define X_AT(i) x[i]
#include "gemv_format.glsl"

void main() {
  // Dense lane numbering of the invocations actually present, so a partial
  // subgroup still covers every word of its row.
  uint lane = subgroupExclusiveAdd(1u);
  uint lanes = subgroupAdd(1u);
  uint first_row = gl_WorkGroupID.x * ROWS_PER_WORKGROUP;
  for (uint r = gl_SubgroupID; r < ROWS_PER_WORKGROUP; r += gl_NumSubgroups) {
    uint row = first_row + r;
    if (row >= pc.rows) {
      break;  // uniform in the subgroup
    }
    float total = subgroupAdd(row_partial(row, 0u, pc.cols, lane, lanes, 0u));
    if (subgroupElect()) {
      y[row] = row_finish(row, total);
    }
  }
}
