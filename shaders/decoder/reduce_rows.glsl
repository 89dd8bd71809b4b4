// Sums each row's lane partials across the workgroup through shared memory
// (no subgroup operations, so every device and any subgroup size runs it):
// WORKGROUP_SIZE invocations, LANES per row, SUMS sums each. Shared memory:
// 4 * SUMS * WORKGROUP_SIZE bytes (the decoder catalogue's formula).
shared float partials[SUMS * WORKGROUP_SIZE];

// After the call, invocations with lane == 0 hold their row's totals in acc.
void reduce_lanes(inout float acc[SUMS], uint lane, uint lanes) {
  for (uint t = 0u; t < SUMS; ++t) partials[t * WORKGROUP_SIZE + gl_LocalInvocationIndex] = acc[t];
  barrier();
  for (uint stride = lanes >> 1; stride > 0u; stride >>= 1) {
    if (lane < stride) {
      for (uint t = 0u; t < SUMS; ++t) {
        uint at = t * WORKGROUP_SIZE + gl_LocalInvocationIndex;
        partials[at] += partials[at + stride];
      }
    }
    barrier();
  }
  for (uint t = 0u; t < SUMS; ++t) acc[t] = partials[t * WORKGROUP_SIZE + gl_LocalInvocationIndex];
}
