// Resources every GEMV variant shares (the interface in catalogue.h).
// Buffers are uint words so no 8/16-bit storage feature is needed.
layout(std430, set = 0, binding = 0) readonly buffer Weights { uint weights[]; };
layout(std430, set = 0, binding = 1) readonly buffer Scales { uint scales[]; };
layout(std430, set = 0, binding = 2) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform PushConstants {
  uint rows;
  uint cols;
} pc;

// WORKGROUP_SIZE shares its id with local_size_x_id, so specialising it also
// sets the workgroup size; both default to the same value (checked by the
// catalogue test).
layout(local_size_x = COLI_GEMV_DEFAULT_WORKGROUP_SIZE, local_size_x_id = COLI_GEMV_SPEC_ID_WORKGROUP_SIZE) in;
layout(constant_id = COLI_GEMV_SPEC_ID_WORKGROUP_SIZE) const uint WORKGROUP_SIZE = COLI_GEMV_DEFAULT_WORKGROUP_SIZE;
layout(constant_id = COLI_GEMV_SPEC_ID_ROWS_PER_WORKGROUP) const uint ROWS_PER_WORKGROUP = COLI_GEMV_DEFAULT_ROWS_PER_WORKGROUP;
