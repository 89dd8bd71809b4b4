// The CPU kernel names, spelled once: the parser (kernels/cpu), the plan
// reader, the sweep and every --kernel help text take them from here.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace coli {

// The GEMV variants, slowest first (kernels/cpu's CpuKernelVariant order).
inline constexpr std::array<std::string_view, 4> kCpuKernelVariants = {"scalar", "avx2", "avx512", "avx512vnni"};
// Not a variant: f32 activations on de-quantised weights (the reference path).
inline constexpr std::string_view kExactCpuKernel = "exact";

// Every name --kernel accepts: the variants, then "exact".
inline std::vector<std::string> cpu_kernel_names() {
  std::vector<std::string> names(kCpuKernelVariants.begin(), kCpuKernelVariants.end());
  names.emplace_back(kExactCpuKernel);
  return names;
}

// "scalar, avx2, avx512, avx512vnni or exact", for help texts and errors.
inline std::string cpu_kernel_names_text() {
  const std::vector<std::string> names = cpu_kernel_names();
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

}  // namespace coli
