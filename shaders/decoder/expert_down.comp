#version 450
// The second half of every routed expert of a layer in one dispatch:
// y[choice] = down act[choice], for the choices whose expert has a VRAM slot
// (see expert_gate_up.comp). Workgroups: x = row blocks of hidden, y = choice.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;
layout(constant_id = 1) const uint ROWS = 8;
layout(constant_id = 2) const uint FORMAT = 0;
const uint TOKENS = 1u;
const uint SUMS = 1u;

layout(push_constant) uniform Push {
  uvec2 experts, slots, route_ids;
  uvec2 act;  // float[choices][width]
  uvec2 y;    // float[choices][hidden] (written)
  uint stride, hidden, width, down_w, down_s;
} pc;

#include "weight_dot.glsl"
#include "reduce_rows.glsl"

void main() {
  uint choice = gl_WorkGroupID.y;
  int slot = Ints(pc.slots).v[Ints(pc.route_ids).v[choice]];
  if (slot < 0) return;
  uvec2 record = addr_add_product(pc.experts, uint(slot), pc.stride);
  uint lanes = WORKGROUP_SIZE / ROWS;
  uint lane = gl_LocalInvocationIndex % lanes;
  uint row = gl_WorkGroupID.x * ROWS + gl_LocalInvocationIndex / lanes;
  float acc[SUMS] = float[SUMS](0.0);
  Words s = Words(addr_add(record, pc.down_s));
  if (row < pc.hidden) {
    uint base[1] = uint[1](choice * pc.width);
    row_partial(Words(addr_add(record, pc.down_w)), s, row, pc.width, InFloats(pc.act), base, lane, lanes, acc);
  }
  reduce_lanes(acc, lane, lanes);
  if (row >= pc.hidden || lane != 0u) return;
  Floats(pc.y).v[choice * pc.hidden + row] = row_scale(s, row, acc[0]);
}
