#version 450
// expert_down.comp for a prefill batch grouped by expert (route_group.comp).
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;
layout(constant_id = 1) const uint ROWS = 8;
layout(constant_id = 2) const uint FORMAT = 0;
const uint TOKENS = COLI_TOKENS;  // compile-time (glslc -DCOLI_TOKENS): arrays stay in registers
const uint SUMS = TOKENS;

layout(push_constant) uniform Push {
  uvec2 experts, slots, offsets, members, act, y;
  uint stride, hidden, width, down_w, down_s;
} pc;

#include "weight_dot.glsl"
#include "reduce_rows.glsl"

void main() {
  uint expert = gl_WorkGroupID.y;
  int slot = Ints(pc.slots).v[expert];
  Ints offsets = Ints(pc.offsets);
  uint begin = uint(offsets.v[expert]);
  uint end = uint(offsets.v[expert + 1u]);
  if (slot < 0 || begin == end) return;
  uvec2 record = addr_add_product(pc.experts, uint(slot), pc.stride);
  Words s = Words(addr_add(record, pc.down_s));
  Ints members = Ints(pc.members);
  uint lanes = WORKGROUP_SIZE / ROWS;
  uint lane = gl_LocalInvocationIndex % lanes;
  uint row = gl_WorkGroupID.x * ROWS + gl_LocalInvocationIndex / lanes;
  for (uint first = begin; first < end; first += TOKENS) {
    uint count = min(TOKENS, end - first);
    uint base[TOKENS];
    for (uint t = 0u; t < TOKENS; ++t) base[t] = uint(members.v[first + min(t, count - 1u)]) * pc.width;
    float acc[SUMS];
    for (uint t = 0u; t < TOKENS; ++t) acc[t] = 0.0;
    if (row < pc.hidden) {
      row_partial(Words(addr_add(record, pc.down_w)), s, row, pc.width, InFloats(pc.act), base, lane, lanes, acc);
    }
    reduce_lanes(acc, lane, lanes);
    if (row < pc.hidden && lane == 0u) {
      for (uint t = 0u; t < count; ++t) {
        Floats(pc.y).v[uint(members.v[first + t]) * pc.hidden + row] = row_scale(s, row, acc[t]);
      }
    }
    barrier();
  }
}
