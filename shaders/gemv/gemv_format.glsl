// Picks the weight layout: glslc -DCOLI_FORMAT_Q4_G64 or -DCOLI_FORMAT_Q8_ROW.
#if defined(COLI_FORMAT_Q4_G64)
#include "gemv_q4_g64.glsl"
#elif defined(COLI_FORMAT_Q8_ROW)
#include "gemv_q8_row.glsl"
#else
#error "define COLI_FORMAT_Q8_ROW or COLI_FORMAT_Q4_G64"
#endif
