#version 450
// Everything between the q/k/v projections and attention, for one token per
// workgroup: clip (OLMoE's clip_qkv), q/k RMSNorm per head (Qwen3) or over the
// whole projection (OLMoE), rotary embedding ("rotate half", cos/sin from a
// table the host computed in double), and k/v appended to the KV cache at
// the token's position (the step buffer's base position + token index).
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;

layout(push_constant) uniform Push {
  uvec2 q, k, v;             // float[tokens][width]
  uvec2 k_cache, v_cache;    // this layer's float[ctx][kv_width]
  uvec2 q_norm, k_norm;      // norm weights (head_dim or whole width)
  uvec2 rope;                // float[ctx][head_dim/2][2]: cos, sin
  uvec2 step;                // uint[]: [0] = position of token 0
  uint heads, kv_heads, head_dim, norm_mode;  // norm_mode 0 none, 1 per head, 2 whole projection
  float clip, eps;           // clip <= 0: none
} pc;

#include "block_reduce.glsl"

// RMSNorm of `groups` slices of `size` floats at row `base` of `buf`.
void norm_groups(SharedFloats buf, uint base, uint groups, uint size, Floats weight) {
  for (uint g = 0u; g < groups; ++g) {
    uint at = base + g * size;
    float sum = 0.0;
    for (uint i = gl_LocalInvocationIndex; i < size; i += WORKGROUP_SIZE) sum += buf.v[at + i] * buf.v[at + i];
    float scale = inversesqrt(block_sum(sum) / float(size) + pc.eps);
    for (uint i = gl_LocalInvocationIndex; i < size; i += WORKGROUP_SIZE) {
      buf.v[at + i] = (buf.v[at + i] * scale) * weight.v[i];
    }
    sync_workgroup();
  }
}

void rotate(SharedFloats buf, uint base, uint heads, uint position) {
  uint half_dim = pc.head_dim >> 1;
  Floats table = Floats(pc.rope);
  for (uint i = gl_LocalInvocationIndex; i < heads * half_dim; i += WORKGROUP_SIZE) {
    uint head = i / half_dim;
    uint pair = i % half_dim;
    uint at = base + head * pc.head_dim + pair;
    float c = table.v[(position * half_dim + pair) * 2u];
    float s = table.v[(position * half_dim + pair) * 2u + 1u];
    float a = buf.v[at];
    float b = buf.v[at + half_dim];
    buf.v[at] = a * c - b * s;
    buf.v[at + half_dim] = b * c + a * s;
  }
}

void main() {
  uint token = gl_WorkGroupID.x;
  uint q_width = pc.heads * pc.head_dim;
  uint kv_width = pc.kv_heads * pc.head_dim;
  SharedFloats q = SharedFloats(pc.q);
  SharedFloats k = SharedFloats(pc.k);
  SharedFloats v = SharedFloats(pc.v);
  uint qb = token * q_width;
  uint kb = token * kv_width;
  if (pc.clip > 0.0) {
    for (uint i = gl_LocalInvocationIndex; i < q_width; i += WORKGROUP_SIZE) q.v[qb + i] = clamp(q.v[qb + i], -pc.clip, pc.clip);
    for (uint i = gl_LocalInvocationIndex; i < kv_width; i += WORKGROUP_SIZE) {
      k.v[kb + i] = clamp(k.v[kb + i], -pc.clip, pc.clip);
      v.v[kb + i] = clamp(v.v[kb + i], -pc.clip, pc.clip);
    }
    sync_workgroup();
  }
  if (pc.norm_mode == 1u) {
    norm_groups(q, qb, pc.heads, pc.head_dim, Floats(pc.q_norm));
    norm_groups(k, kb, pc.kv_heads, pc.head_dim, Floats(pc.k_norm));
  } else if (pc.norm_mode == 2u) {
    norm_groups(q, qb, 1u, q_width, Floats(pc.q_norm));
    norm_groups(k, kb, 1u, kv_width, Floats(pc.k_norm));
  }
  uint position = Ints(pc.step).v[0] + token;
  rotate(q, qb, pc.heads, position);
  rotate(k, kb, pc.kv_heads, position);
  sync_workgroup();
  Floats kc = Floats(pc.k_cache);
  Floats vc = Floats(pc.v_cache);
  for (uint i = gl_LocalInvocationIndex; i < kv_width; i += WORKGROUP_SIZE) {
    kc.v[position * kv_width + i] = k.v[kb + i];
    vc.v[position * kv_width + i] = v.v[kb + i];
  }
}
