// Which variants this CPU can run, their names, and COLI_CPU_KERNEL.
#include <cstdlib>
#include <span>
#include <string>

#include "coli/base/cpu_kernels.h"
#include "cpu/gemv_cpu.h"

namespace coli::kernels::cpu {
namespace {

constexpr CpuKernelVariant kAllVariants[] = {CpuKernelVariant::scalar, CpuKernelVariant::avx2, CpuKernelVariant::avx512,
                                             CpuKernelVariant::avx512_vnni};
static_assert(std::size(kAllVariants) == kCpuKernelVariants.size(), "one name per variant, in the enum's order");

std::string names_of(std::span<const CpuKernelVariant> variants) {
  std::string names;
  for (CpuKernelVariant variant : variants) names += (names.empty() ? "" : ", ") + std::string(variant_name(variant));
  return names;
}

}  // namespace

std::string_view variant_name(CpuKernelVariant variant) {
  const auto index = static_cast<std::size_t>(variant);  // the enum follows kCpuKernelVariants' order
  return index < kCpuKernelVariants.size() ? kCpuKernelVariants[index] : "unknown";
}

// __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0).
bool variant_supported(CpuKernelVariant variant) {
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  switch (variant) {
    case CpuKernelVariant::scalar: return true;
    case CpuKernelVariant::avx2: return avx2;
    case CpuKernelVariant::avx512: return avx512;
    case CpuKernelVariant::avx512_vnni: return avx512 && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return variant == CpuKernelVariant::scalar;
#endif
}

std::vector<CpuKernelVariant> supported_variants() {
  std::vector<CpuKernelVariant> variants;
  for (CpuKernelVariant variant : kAllVariants)
    if (variant_supported(variant)) variants.push_back(variant);
  return variants;
}

CpuKernelVariant best_supported_variant() { return supported_variants().back(); }

Result<CpuKernelVariant> parse_variant(std::string_view name) {
  for (CpuKernelVariant variant : kAllVariants) {
    if (name != variant_name(variant)) continue;
    if (!variant_supported(variant))
      return make_error("CPU kernel variant '" + std::string(name) +
                        "' needs instructions this CPU lacks; this CPU supports: " + names_of(supported_variants()));
    return variant;
  }
  return make_error("unknown CPU kernel variant '" + std::string(name) + "'; expected one of: " + names_of(kAllVariants));
}

Result<CpuKernelVariant> variant_from_override(const char* value) {
  if (value == nullptr || *value == '\0') return best_supported_variant();
  auto parsed = parse_variant(value);
  if (!parsed) return make_error("COLI_CPU_KERNEL: " + parsed.error().message);
  return parsed;
}

Result<CpuKernelVariant> selected_variant() {
  static const Result<CpuKernelVariant> selected = variant_from_override(std::getenv("COLI_CPU_KERNEL"));
  return selected;
}

}  // namespace coli::kernels::cpu
