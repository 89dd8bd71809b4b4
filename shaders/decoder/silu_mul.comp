#version 450
// a = silu(a) * b elementwise (the dense MLP's and shared expert's SwiGLU).
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;

layout(push_constant) uniform Push {
  uvec2 a, b;
  uint n;
} pc;

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= pc.n) return;
  Floats a = Floats(pc.a);
  a.v[i] = silu(a.v[i]) * Floats(pc.b).v[i];
}
