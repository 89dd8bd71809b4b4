// What every decoder kernel shares: buffers reached by device address
// (Vulkan 1.2 bufferDeviceAddress), so a kernel's whole interface is its push
// constants and one recorded command buffer can serve every layer. Addresses
// travel as uvec2 (low, high words), which needs no 64-bit integer support.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

// Weights and scales, and activations a kernel only reads: readonly and
// restrict, so the compiler may keep and reorder their loads (the
// non-coherent load path), which plain references forbid.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly restrict buffer Words { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly restrict buffer InFloats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int v[]; };
// For data one invocation writes and another of the same workgroup reads
// back (after sync_workgroup()).
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer SharedFloats { float v[]; };

// Execution and buffer-memory barrier across the workgroup.
void sync_workgroup() {
  memoryBarrierBuffer();
  barrier();
}

// a + bytes, carrying into the high word.
uvec2 addr_add(uvec2 a, uint bytes) {
  uint lo = a.x + bytes;
  return uvec2(lo, a.y + (lo < a.x ? 1u : 0u));
}

// a + count * size bytes with a 64-bit product (an expert slot far into a
// layer's buffer can lie past 4 GiB).
uvec2 addr_add_product(uvec2 a, uint count, uint size) {
  uint hi;
  uint lo;
  umulExtended(count, size, hi, lo);
  uint sum = a.x + lo;
  return uvec2(sum, a.y + hi + (sum < a.x ? 1u : 0u));
}

bool addr_null(uvec2 a) { return a.x == 0u && a.y == 0u; }

float silu(float v) { return v / (1.0 + exp(-v)); }
