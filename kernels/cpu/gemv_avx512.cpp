// AVX-512 F/BW/VL variant without VNNI (Skylake-SP, Cascade Lake is VNNI).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/variant_kernels.h"

#pragma GCC push_options
// GCC 12's own _mm512_undefined_* (`__m512 __Y = __Y;`) trips
// -W(maybe-)uninitialized once inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#include "cpu/gemv_avx512_impl.h"
#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace coli::kernels::cpu::detail {

const VariantKernels& avx512_kernels() {
  static constexpr VariantKernels kernels{q8_packed_bytes, q8_quantize, q8_rows, q4_packed_bytes, q4_quantize, q4_rows};
  return kernels;
}

}  // namespace coli::kernels::cpu::detail
