// Workgroup-wide sum and max through shared memory (WORKGROUP_SIZE floats;
// a power of two). Call from uniform control flow; every invocation gets the result.
shared float reduce_scratch[WORKGROUP_SIZE];

float block_sum(float value) {
  reduce_scratch[gl_LocalInvocationIndex] = value;
  barrier();
  for (uint stride = WORKGROUP_SIZE >> 1; stride > 0u; stride >>= 1) {
    if (gl_LocalInvocationIndex < stride) {
      reduce_scratch[gl_LocalInvocationIndex] += reduce_scratch[gl_LocalInvocationIndex + stride];
    }
    barrier();
  }
  float total = reduce_scratch[0];
  barrier();  // the scratch may be reused right away
  return total;
}

float block_max(float value) {
  reduce_scratch[gl_LocalInvocationIndex] = value;
  barrier();
  for (uint stride = WORKGROUP_SIZE >> 1; stride > 0u; stride >>= 1) {
    if (gl_LocalInvocationIndex < stride) {
      reduce_scratch[gl_LocalInvocationIndex] =
          max(reduce_scratch[gl_LocalInvocationIndex], reduce_scratch[gl_LocalInvocationIndex + stride]);
    }
    barrier();
  }
  float peak = reduce_scratch[0];
  barrier();
  return peak;
}
