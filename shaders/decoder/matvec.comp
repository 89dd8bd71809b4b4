#version 450
// y[t] = W x[t] (+ bias) (+ y[t] when accumulating: the residual add), for a
// dense weight in any stored format, TOKENS tokens per workgroup so each
// weight word is read once for all of them. Workgroups: x = row blocks of
// ROWS rows, y = token blocks.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;
layout(constant_id = 1) const uint ROWS = 8;       // rows per workgroup; a power of two dividing WORKGROUP_SIZE
layout(constant_id = 2) const uint FORMAT = 0;
const uint TOKENS = COLI_TOKENS;  // compile-time (glslc -DCOLI_TOKENS): arrays stay in registers
const uint SUMS = TOKENS;

layout(push_constant) uniform Push {
  uvec2 w, s, x, y, bias;
  uint rows, cols, x_stride, y_stride, tokens, accumulate;
} pc;

#include "weight_dot.glsl"
#include "reduce_rows.glsl"

void main() {
  uint lanes = WORKGROUP_SIZE / ROWS;
  uint lane = gl_LocalInvocationIndex % lanes;
  uint row = gl_WorkGroupID.x * ROWS + gl_LocalInvocationIndex / lanes;
  uint first_token = gl_WorkGroupID.y * TOKENS;
  uint count = min(TOKENS, pc.tokens - first_token);
  float acc[TOKENS];
  for (uint t = 0u; t < TOKENS; ++t) acc[t] = 0.0;
  if (row < pc.rows) {
    uint base[TOKENS];  // tokens past the last repeat it (computed, never stored)
    for (uint t = 0u; t < TOKENS; ++t) base[t] = (first_token + min(t, count - 1u)) * pc.x_stride;
    row_partial(Words(pc.w), Words(pc.s), row, pc.cols, InFloats(pc.x), base, lane, lanes, acc);
  }
  reduce_lanes(acc, lane, lanes);
  if (row >= pc.rows || lane != 0u) return;
  Floats y = Floats(pc.y);
  for (uint t = 0u; t < count; ++t) {
    float value = row_scale(Words(pc.s), row, acc[t]);
    if (!addr_null(pc.bias)) value += Floats(pc.bias).v[row];
    uint at = (first_token + t) * pc.y_stride + row;
    y.v[at] = pc.accumulate != 0u ? y.v[at] + value : value;
  }
}
