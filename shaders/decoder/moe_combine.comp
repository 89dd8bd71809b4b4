#version 450
// x[t] += sum_i weight[t][i] * y[t][i] (+ sigmoid(g[t]) * shared[t]), in
// routing order as the CPU engine sums them. y of a choice comes from the
// GPU's rows, or from the CPU's rows when its expert has no VRAM slot.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;

layout(push_constant) uniform Push {
  uvec2 x, y_gpu, y_cpu, slots, ids, weights, shared_out, shared_gate;
  uint hidden, top_k;
} pc;

void main() {
  uint token = gl_WorkGroupID.x;
  Floats x = Floats(pc.x);
  for (uint i = gl_LocalInvocationIndex; i < pc.hidden; i += WORKGROUP_SIZE) {
    float sum = 0.0;
    for (uint j = 0u; j < pc.top_k; ++j) {
      uint choice = token * pc.top_k + j;
      bool on_gpu = Ints(pc.slots).v[Ints(pc.ids).v[choice]] >= 0;
      float y = on_gpu ? Floats(pc.y_gpu).v[choice * pc.hidden + i] : Floats(pc.y_cpu).v[choice * pc.hidden + i];
      sum += Floats(pc.weights).v[choice] * y;
    }
    if (!addr_null(pc.shared_out)) {
      float gate = 1.0 / (1.0 + exp(-Floats(pc.shared_gate).v[token]));
      sum += gate * Floats(pc.shared_out).v[token * pc.hidden + i];
    }
    x.v[token * pc.hidden + i] += sum;
  }
}
