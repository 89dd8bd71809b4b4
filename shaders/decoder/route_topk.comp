#version 450
// The router's choice for each token (one workgroup per token): softmax over
// the experts' logits, the top_k highest (ties keep the lower expert id, as
// torch.topk on the CPU), optionally renormalised to sum to 1. Writes the
// expert ids and weights the expert kernels read on the device.
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x = 1) in;

layout(push_constant) uniform Push {
  uvec2 logits;   // float[tokens][experts]
  uvec2 ids;      // int[tokens][top_k] (written)
  uvec2 weights;  // float[tokens][top_k] (written)
  uint experts, top_k, renormalize;
} pc;

void main() {
  uint token = gl_WorkGroupID.x;
  Floats logits = Floats(pc.logits);
  Ints ids = Ints(pc.ids);
  Floats weights = Floats(pc.weights);
  uint base = token * pc.experts;
  float peak = logits.v[base];
  for (uint e = 1u; e < pc.experts; ++e) peak = max(peak, logits.v[base + e]);
  float sum = 0.0;
  for (uint e = 0u; e < pc.experts; ++e) sum += exp(logits.v[base + e] - peak);
  float chosen_sum = 0.0;
  int previous = -1;
  float previous_p = 3.402823e38;
  for (uint i = 0u; i < pc.top_k; ++i) {
    // The next in (probability desc, id asc) order after the previous choice.
    int best = -1;
    float best_p = -1.0;
    for (uint e = 0u; e < pc.experts; ++e) {
      float p = exp(logits.v[base + e] - peak) / sum;
      bool after_previous = p < previous_p || (p == previous_p && int(e) > previous);
      if (after_previous && p > best_p) {
        best = int(e);
        best_p = p;
      }
    }
    ids.v[token * pc.top_k + i] = best;
    weights.v[token * pc.top_k + i] = best_p;
    chosen_sum += best_p;
    previous = best;
    previous_p = best_p;
  }
  if (pc.renormalize != 0u) {
    for (uint i = 0u; i < pc.top_k; ++i) weights.v[token * pc.top_k + i] /= chosen_sum;
  }
}
