#version 450
// The router's choice for each token (one workgroup per token): softmax over
// the experts' logits, the top_k highest (ties keep the lower expert id, as
// torch.topk on the CPU), optionally renormalised to sum to 1. Writes the
// expert ids and weights the expert kernels read on the device. The
// workgroup shares the work: each invocation holds a strided set of
// experts, and each of the top_k rounds is one argmax across the workgroup.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 64;

layout(push_constant) uniform Push {
  uvec2 logits;   // float[tokens][experts]
  uvec2 ids;      // int[tokens][top_k] (written)
  uvec2 weights;  // float[tokens][top_k] (written)
  uint experts, top_k, renormalize;
} pc;

#include "block_reduce.glsl"
shared int best_ids[WORKGROUP_SIZE];

// True when (p, e) comes after (previous_p, previous) in (probability desc, id asc) order.
bool after(float p, int e, float previous_p, int previous) {
  return p < previous_p || (p == previous_p && e > previous);
}

void main() {
  uint token = gl_WorkGroupID.x;
  uint lane = gl_LocalInvocationIndex;
  Floats logits = Floats(pc.logits);
  uint base = token * pc.experts;
  float peak = -3.402823e38;
  for (uint e = lane; e < pc.experts; e += WORKGROUP_SIZE) peak = max(peak, logits.v[base + e]);
  peak = block_max(peak);
  float sum = 0.0;
  for (uint e = lane; e < pc.experts; e += WORKGROUP_SIZE) sum += exp(logits.v[base + e] - peak);
  sum = block_sum(sum);
  int previous = -1;
  float previous_p = 3.402823e38;
  float chosen_sum = 0.0;
  for (uint i = 0u; i < pc.top_k; ++i) {
    // This invocation's best among its experts after the previous choice.
    int mine = -1;
    float mine_p = -1.0;
    for (uint e = lane; e < pc.experts; e += WORKGROUP_SIZE) {
      float p = exp(logits.v[base + e] - peak) / sum;
      if (after(p, int(e), previous_p, previous) && (p > mine_p || (p == mine_p && int(e) < mine))) {
        mine = int(e);
        mine_p = p;
      }
    }
    reduce_scratch[lane] = mine_p;
    best_ids[lane] = mine;
    barrier();
    for (uint stride = WORKGROUP_SIZE >> 1; stride > 0u; stride >>= 1) {
      if (lane < stride) {
        float other_p = reduce_scratch[lane + stride];
        int other = best_ids[lane + stride];
        if (other >= 0 && (other_p > reduce_scratch[lane] || (other_p == reduce_scratch[lane] && other < best_ids[lane]) ||
                           best_ids[lane] < 0)) {
          reduce_scratch[lane] = other_p;
          best_ids[lane] = other;
        }
      }
      barrier();
    }
    previous = best_ids[0];
    previous_p = reduce_scratch[0];
    barrier();
    chosen_sum += previous_p;
    if (lane == 0u) {
      Ints(pc.ids).v[token * pc.top_k + i] = previous;
      Floats(pc.weights).v[token * pc.top_k + i] = previous_p;
    }
  }
  if (pc.renormalize != 0u && lane == 0u) {
    Floats w = Floats(pc.weights);
    for (uint i = 0u; i < pc.top_k; ++i) w.v[token * pc.top_k + i] /= chosen_sum;
  }
}
