// e^x where it is taken per element of a vector on the CPU (SiLU and
// SwiGLU, attention's softmax weights), the same values on every CPU. The
// loops are cloned per instruction set (target_clones: the loader picks the widest this
// CPU runs), and this file is compiled with -fno-trapping-math and
// -ffp-contract=off (engine/forward/CMakeLists.txt):
// - without -fno-trapping-math GCC keeps exp_poly's clamps as branches and
//   does not vectorise the loop; the flag changes no value, it only lets the
//   compiler assume that no floating-point exception traps;
// - without -ffp-contract=off the AVX-512 clone would fuse multiply-adds that
//   the others round twice: each clone would give other bits.
// Per element on the 2-core VM (a Zen 5 host, 1024 values): libm's expf 3.1 ns, the
// SSE2 build of this loop 4.9 ns (slower than scalar), its AVX-512 clone 1.25 ns.
#include <bit>
#include <cstdint>
#include <stdexcept>

#include "coli/forward/ops.h"

namespace coli::forward {

namespace {

// e^x in float without libm, every step one the vectoriser takes: x = n ln2
// + r with |r| <= ln2/2 (ln2 in two parts, so n ln2 is exact), e^r by
// Cephes' minimax polynomial (expf, within 1 ulp there), 2^n by building the
// float's exponent. The clamp keeps n a normal float's exponent
// (e^88.3 < FLT_MAX, e^-87.3 > FLT_MIN); NaN passes through.
inline float exp_poly(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23: adding it rounds to an integer in the low bits
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * r * r + r + 1.0f;
  const std::int32_t exponent = std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kRound) + 127;
  return e_r * std::bit_cast<float>(exponent << 23);
}

inline float silu_of(float x) { return x / (1.0f + exp_poly(-x)); }

}  // namespace

float silu(float x) { return silu_of(x); }

#if defined(__x86_64__)
#define COLI_PER_ISA __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COLI_PER_ISA  // one build: the compiler's own vector width
#endif

COLI_PER_ISA void swiglu(std::span<float> gate, std::span<const float> up) {
  if (up.size() != gate.size()) throw std::invalid_argument("swiglu: gate and up differ in length");
  float* g = gate.data();
  const float* u = up.data();
  for (std::size_t i = 0; i < gate.size(); ++i) g[i] = silu_of(g[i]) * u[i];
}

COLI_PER_ISA void exp_shifted(std::span<float> x, float shift) {
  float* v = x.data();
  for (std::size_t i = 0; i < x.size(); ++i) v[i] = exp_poly(v[i] - shift);
}

}  // namespace coli::forward
