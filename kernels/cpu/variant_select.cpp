// Which variants this CPU can run, their names, and COLI_CPU_KERNEL.
#include <cstdlib>
#include <span>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "coli/base/cpu_kernels.h"
#include "cpu/gemv_cpu.h"
#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu {
namespace {

constexpr CpuKernelVariant kAllVariants[] = {CpuKernelVariant::scalar, CpuKernelVariant::avx2, CpuKernelVariant::avx512,
                                             CpuKernelVariant::avx512_vnni, CpuKernelVariant::amx};
static_assert(std::size(kAllVariants) == kCpuKernelVariants.size(), "one name per variant, in the enum's order");

std::string names_of(std::span<const CpuKernelVariant> variants) {
  std::string names;
  for (CpuKernelVariant variant : variants) names += (names.empty() ? "" : ", ") + std::string(variant_name(variant));
  return names;
}

// AMX-TILE and AMX-INT8 in CPUID, and Linux's permission to use tile data
// (a process must ask before its first tile instruction, or it is killed
// with SIGILL; kernels before 5.16 have no such request and no AMX support).
// Asked once; the permission holds for every thread of the process.
bool amx_usable() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
    constexpr long kArchRequestXcompPerm = 0x1023, kXfeatureTileData = 18;  // asm/prctl.h, fpu/xstate.h
    return tile && int8 && syscall(SYS_arch_prctl, kArchRequestXcompPerm, kXfeatureTileData) == 0;
  }();
  return usable;
#else
  return false;
#endif
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
    case CpuKernelVariant::amx: return avx512 && __builtin_cpu_supports("avx512vnni") && amx_usable();
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
      return make_error("CPU kernel variant '" + std::string(name) + "' needs instructions this CPU lacks" +
                        (variant == CpuKernelVariant::amx ? " (AMX-TILE and AMX-INT8, and Linux 5.16+ granting tile state)" : "") +
                        "; this CPU supports: " + names_of(supported_variants()));
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
