#version 450
// Causal attention of one query (head, token) per workgroup over the KV
// cache up to the token's own position (grouped-query: heads / kv_heads
// queries share a KV head). The query sits in shared memory; invocation i
// scores positions i, i + WORKGROUP_SIZE, ... (into a scratch buffer it alone
// reads back, so any context length fits), then the weighted sum of V runs
// over tiles of WORKGROUP_SIZE probabilities staged in shared memory.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 128;
const uint MAX_HEAD_DIM = 512;   // the decoder refuses wider heads
const uint DIMS_PER_LANE = 4;    // head_dim <= DIMS_PER_LANE * WORKGROUP_SIZE

layout(push_constant) uniform Push {
  uvec2 q, k_cache, v_cache, out_, scores, step;
  uint heads, kv_heads, head_dim, ctx;
  float scale;
} pc;

#include "block_reduce.glsl"
shared float q_shared[MAX_HEAD_DIM];
shared float tile[WORKGROUP_SIZE];

void main() {
  uint head = gl_WorkGroupID.x;
  uint token = gl_WorkGroupID.y;
  uint lane = gl_LocalInvocationIndex;
  uint positions = Ints(pc.step).v[0] + token + 1u;
  uint kv_width = pc.kv_heads * pc.head_dim;
  uint kv_offset = (head / (pc.heads / pc.kv_heads)) * pc.head_dim;
  uint qb = (token * pc.heads + head) * pc.head_dim;
  uint sb = (token * pc.heads + head) * pc.ctx;
  Floats kc = Floats(pc.k_cache);
  Floats vc = Floats(pc.v_cache);
  Floats scores = Floats(pc.scores);
  for (uint d = lane; d < pc.head_dim; d += WORKGROUP_SIZE) q_shared[d] = Floats(pc.q).v[qb + d];
  barrier();
  float peak = -3.402823e38;
  for (uint p = lane; p < positions; p += WORKGROUP_SIZE) {
    uint row = p * kv_width + kv_offset;
    float dot = 0.0;
    for (uint d = 0u; d < pc.head_dim; ++d) dot += q_shared[d] * kc.v[row + d];
    float score = dot * pc.scale;
    scores.v[sb + p] = score;
    peak = max(peak, score);
  }
  peak = block_max(peak);
  float sum = 0.0;
  for (uint p = lane; p < positions; p += WORKGROUP_SIZE) sum += exp(scores.v[sb + p] - peak);
  float inv = 1.0 / block_sum(sum);
  float acc[DIMS_PER_LANE];
  for (uint i = 0u; i < DIMS_PER_LANE; ++i) acc[i] = 0.0;
  for (uint first = 0u; first < positions; first += WORKGROUP_SIZE) {
    uint p = first + lane;  // this invocation scored p itself
    tile[lane] = p < positions ? exp(scores.v[sb + p] - peak) : 0.0;
    barrier();
    uint count = min(WORKGROUP_SIZE, positions - first);
    for (uint i = 0u; i < DIMS_PER_LANE; ++i) {
      uint d = lane + i * WORKGROUP_SIZE;
      if (d >= pc.head_dim) break;
      float a = acc[i];
      for (uint j = 0u; j < count; ++j) a += tile[j] * vc.v[(first + j) * kv_width + kv_offset + d];
      acc[i] = a;
    }
    barrier();
  }
  Floats o = Floats(pc.out_);
  for (uint i = 0u; i < DIMS_PER_LANE; ++i) {
    uint d = lane + i * WORKGROUP_SIZE;
    if (d < pc.head_dim) o.v[qb + d] = acc[i] * inv;
  }
}
