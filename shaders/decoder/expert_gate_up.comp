#version 450
// The first half of every routed expert of a layer in one dispatch: for each
// (token, routing choice) the expert id is read from the router's output on
// the device, its VRAM slot from the layer's slot table (-1: not in VRAM, the
// CPU computes it), and act = silu(gate x) * up x. Workgroups: x = row blocks
// of the expert width, y = token * top_k + choice.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;
layout(constant_id = 1) const uint ROWS = 8;
layout(constant_id = 2) const uint FORMAT = 0;
const uint TOKENS = 1u;  // one activation vector per (token, choice)
const uint SUMS = 2u;    // gate and up, reduced together

layout(push_constant) uniform Push {
  uvec2 experts;    // the layer's records, `stride` bytes apart, one per slot
  uvec2 slots;      // int[n_experts]: VRAM slot of each expert, -1 when absent
  uvec2 route_ids;  // int[tokens][top_k]
  uvec2 x;          // float[tokens][hidden]
  uvec2 act;        // float[tokens][top_k][width] (written)
  uint stride, hidden, width, top_k;
  uint gate_w, gate_s, up_w, up_s;  // byte offsets of the parts in a record
} pc;

#include "weight_dot.glsl"
#include "reduce_rows.glsl"

void main() {
  uint choice = gl_WorkGroupID.y;  // token * top_k + i
  uint token = choice / pc.top_k;
  int slot = Ints(pc.slots).v[Ints(pc.route_ids).v[choice]];
  if (slot < 0) return;  // uniform across the workgroup: the CPU computes this one
  uvec2 record = addr_add_product(pc.experts, uint(slot), pc.stride);
  uint lanes = WORKGROUP_SIZE / ROWS;
  uint lane = gl_LocalInvocationIndex % lanes;
  uint row = gl_WorkGroupID.x * ROWS + gl_LocalInvocationIndex / lanes;
  float acc[SUMS];
  acc[0] = 0.0;
  acc[1] = 0.0;
  if (row < pc.width) {
    InFloats xs = InFloats(pc.x);
    uint base[1] = uint[1](token * pc.hidden);
    float gate[1] = float[1](0.0);
    float up[1] = float[1](0.0);
    row_partial(Words(addr_add(record, pc.gate_w)), Words(addr_add(record, pc.gate_s)), row, pc.hidden, xs, base, lane,
                lanes, gate);
    row_partial(Words(addr_add(record, pc.up_w)), Words(addr_add(record, pc.up_s)), row, pc.hidden, xs, base, lane,
                lanes, up);
    acc[0] = gate[0];
    acc[1] = up[0];
  }
  reduce_lanes(acc, lane, lanes);
  if (row >= pc.width || lane != 0u) return;
  float gate = row_scale(Words(addr_add(record, pc.gate_s)), row, acc[0]);
  float up = row_scale(Words(addr_add(record, pc.up_s)), row, acc[1]);
  Floats(pc.act).v[choice * pc.width + row] = silu(gate) * up;
}
