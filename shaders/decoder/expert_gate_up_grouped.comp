#version 450
// expert_gate_up.comp for a prefill batch grouped by expert (route_group.comp):
// one workgroup per (row block, expert) walks the expert's choices TOKENS at a
// time, reading each weight word once for all of them.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;
layout(constant_id = 1) const uint ROWS = 8;
layout(constant_id = 2) const uint FORMAT = 0;
const uint TOKENS = COLI_TOKENS;  // compile-time (glslc -DCOLI_TOKENS): arrays stay in registers
const uint SUMS = 2u * TOKENS;  // gate and up of each token

layout(push_constant) uniform Push {
  uvec2 experts, slots, offsets, members, x, act;
  uint stride, hidden, width, top_k;
  uint gate_w, gate_s, up_w, up_s;
} pc;

#include "weight_dot.glsl"
#include "reduce_rows.glsl"

void main() {
  uint expert = gl_WorkGroupID.y;
  int slot = Ints(pc.slots).v[expert];
  Ints offsets = Ints(pc.offsets);
  uint begin = uint(offsets.v[expert]);
  uint end = uint(offsets.v[expert + 1u]);
  if (slot < 0 || begin == end) return;  // uniform across the workgroup
  uvec2 record = addr_add_product(pc.experts, uint(slot), pc.stride);
  Words gate_s = Words(addr_add(record, pc.gate_s));
  Words up_s = Words(addr_add(record, pc.up_s));
  Ints members = Ints(pc.members);
  uint lanes = WORKGROUP_SIZE / ROWS;
  uint lane = gl_LocalInvocationIndex % lanes;
  uint row = gl_WorkGroupID.x * ROWS + gl_LocalInvocationIndex / lanes;
  for (uint first = begin; first < end; first += TOKENS) {
    uint count = min(TOKENS, end - first);
    uint base[TOKENS];
    for (uint t = 0u; t < TOKENS; ++t) base[t] = (uint(members.v[first + min(t, count - 1u)]) / pc.top_k) * pc.hidden;
    float gate[TOKENS];
    float up[TOKENS];
    for (uint t = 0u; t < TOKENS; ++t) {
      gate[t] = 0.0;
      up[t] = 0.0;
    }
    if (row < pc.width) {
      row_partial(Words(addr_add(record, pc.gate_w)), gate_s, row, pc.hidden, InFloats(pc.x), base, lane, lanes, gate);
      row_partial(Words(addr_add(record, pc.up_w)), up_s, row, pc.hidden, InFloats(pc.x), base, lane, lanes, up);
    }
    float acc[SUMS];
    for (uint t = 0u; t < TOKENS; ++t) {
      acc[t] = gate[t];
      acc[TOKENS + t] = up[t];
    }
    reduce_lanes(acc, lane, lanes);
    if (row < pc.width && lane == 0u) {
      for (uint t = 0u; t < count; ++t) {
        float g = row_scale(gate_s, row, acc[t]);
        float u = row_scale(up_s, row, acc[TOKENS + t]);
        Floats(pc.act).v[uint(members.v[first + t]) * pc.width + row] = silu(g) * u;
      }
    }
    barrier();  // the next group reuses the shared partials
  }
}
