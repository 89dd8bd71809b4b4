#version 450
// Groups a batch's routing choices by expert, so the grouped expert kernels
// read each expert's weights once for several tokens (prefill): offsets[e] ..
// offsets[e + 1] index members[], the choices (token * top_k + i) routed to
// expert e. One workgroup; the order inside a group does not matter (every
// choice's row is computed the same way wherever it sits).
#extension GL_GOOGLE_include_directive : require
#include "decoder_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WORKGROUP_SIZE = 256;
const uint MAX_EXPERTS = 1024;  // the decoder groups only models with at most this many

layout(push_constant) uniform Push {
  uvec2 ids;      // int[choices]
  uvec2 offsets;  // int[experts + 1] (written)
  uvec2 members;  // int[choices] (written)
  uint choices, experts;
} pc;

shared uint counts[MAX_EXPERTS];

void main() {
  uint lane = gl_LocalInvocationIndex;
  Ints ids = Ints(pc.ids);
  for (uint e = lane; e < pc.experts; e += WORKGROUP_SIZE) counts[e] = 0u;
  barrier();
  for (uint c = lane; c < pc.choices; c += WORKGROUP_SIZE) atomicAdd(counts[uint(ids.v[c])], 1u);
  barrier();
  if (lane == 0u) {
    Ints offsets = Ints(pc.offsets);
    uint running = 0u;
    for (uint e = 0u; e < pc.experts; ++e) {
      uint count = counts[e];
      offsets.v[e] = int(running);
      counts[e] = running;  // now the next free place of the group
      running += count;
    }
    offsets.v[pc.experts] = int(running);
  }
  barrier();
  Ints members = Ints(pc.members);
  for (uint c = lane; c < pc.choices; c += WORKGROUP_SIZE) {
    members.v[atomicAdd(counts[uint(ids.v[c])], 1u)] = int(c);
  }
}
