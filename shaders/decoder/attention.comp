#version 450
// Causal attention of one query (head, token) per workgroup over the KV
// cache up to the token's own position (grouped-query: heads / kv_heads
// queries share a KV head). Scores live in a scratch buffer, so any context
// length fits; softmax, then out = sum_p p_p * v_p.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 128;

layout(push_constant) uniform Push {
  uvec2 q, k_cache, v_cache, out_, scores, step;
  uint heads, kv_heads, head_dim, ctx;
  float scale;
} pc;

#include "block_reduce.glsl"

void main() {
  uint head = gl_WorkGroupID.x;
  uint token = gl_WorkGroupID.y;
  uint positions = Ints(pc.step).v[0] + token + 1u;
  uint kv_width = pc.kv_heads * pc.head_dim;
  uint kv_offset = (head / (pc.heads / pc.kv_heads)) * pc.head_dim;
  uint qb = (token * pc.heads + head) * pc.head_dim;
  uint sb = (token * pc.heads + head) * pc.ctx;
  Floats q = Floats(pc.q);
  Floats kc = Floats(pc.k_cache);
  Floats vc = Floats(pc.v_cache);
  SharedFloats scores = SharedFloats(pc.scores);
  float peak = -3.402823e38;
  for (uint p = gl_LocalInvocationIndex; p < positions; p += WORKGROUP_SIZE) {
    float dot = 0.0;
    for (uint d = 0u; d < pc.head_dim; ++d) dot += q.v[qb + d] * kc.v[p * kv_width + kv_offset + d];
    float score = dot * pc.scale;
    scores.v[sb + p] = score;
    peak = max(peak, score);
  }
  peak = block_max(peak);
  float sum = 0.0;
  for (uint p = gl_LocalInvocationIndex; p < positions; p += WORKGROUP_SIZE) {
    float e = exp(scores.v[sb + p] - peak);
    scores.v[sb + p] = e;
    sum += e;
  }
  memoryBarrierBuffer();  // block_sum's barrier then publishes the scores
  float inv = 1.0 / block_sum(sum);
  Floats o = Floats(pc.out_);
  for (uint d = gl_LocalInvocationIndex; d < pc.head_dim; d += WORKGROUP_SIZE) {
    float acc = 0.0;
    for (uint p = 0u; p < positions; ++p) acc += scores.v[sb + p] * vc.v[p * kv_width + kv_offset + d];
    o.v[qb + d] = acc * inv;
  }
}
