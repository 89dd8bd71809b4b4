#version 450
// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, one workgroup per token.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;

layout(push_constant) uniform Push {
  uvec2 x, out_, weight;
  uint n, x_stride, out_stride;
  float eps;
} pc;

#include "block_reduce.glsl"

void main() {
  Floats x = Floats(pc.x);
  Floats o = Floats(pc.out_);
  Floats w = Floats(pc.weight);
  uint xb = gl_WorkGroupID.x * pc.x_stride;
  uint ob = gl_WorkGroupID.x * pc.out_stride;
  float sum = 0.0;
  for (uint i = gl_LocalInvocationIndex; i < pc.n; i += WORKGROUP_SIZE) sum += x.v[xb + i] * x.v[xb + i];
  float scale = inversesqrt(block_sum(sum) / float(pc.n) + pc.eps);
  for (uint i = gl_LocalInvocationIndex; i < pc.n; i += WORKGROUP_SIZE) o.v[ob + i] = (x.v[xb + i] * scale) * w.v[i];
}
