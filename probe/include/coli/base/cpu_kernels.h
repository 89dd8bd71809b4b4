// The CPU kernel names, spelled once: the parser (kernels/cpu), the plan
// reader, the sweep and every --kernel help text take them from here.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace coli {

// The GEMV variants, slowest first (kernels/cpu's CpuKernelVariant order).
inline constexpr std::array<std::string_view, 5> kCpuKernelVariants = {"scalar", "avx2", "avx512", "avx512vnni", "amx"};
// The profile's ISA flags (probe/cpu/isa_flags.h spelling) each variant
// needs, in kCpuKernelVariants' order; every variant needs all of its own.
// amx also needs the OS to grant tile state, which only the engine can ask
// (kernels/cpu/variant_select.cpp): a profile cannot record it.
inline constexpr std::array<std::string_view, 5> kCpuKernelNeeds = {
    "", "avx2 fma f16c", "avx2 fma f16c avx512f avx512bw avx512vl",
    "avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni",
    "avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni amx_tile amx_int8"};

// The flags of kCpuKernelNeeds[index] one by one.
inline std::vector<std::string> cpu_kernel_needs(std::size_t index) {
  std::vector<std::string> flags;
  std::string_view needs = kCpuKernelNeeds.at(index);
  while (!needs.empty()) {
    const std::size_t end = std::min(needs.find(' '), needs.size());
    flags.emplace_back(needs.substr(0, end));
    needs.remove_prefix(std::min(end + 1, needs.size()));
  }
  return flags;
}

// Whether a profile's ISA flags hold everything variant `index` needs.
inline bool cpu_kernel_runs_on(std::size_t index, const std::vector<std::string>& isa) {
  const std::vector<std::string> needs = cpu_kernel_needs(index);
  return std::all_of(needs.begin(), needs.end(),
                     [&](const std::string& flag) { return std::find(isa.begin(), isa.end(), flag) != isa.end(); });
}

// Not a variant: f32 activations on de-quantised weights (the reference path).
inline constexpr std::string_view kExactCpuKernel = "exact";

// Every name --kernel accepts: the variants, then "exact".
inline std::vector<std::string> cpu_kernel_names() {
  std::vector<std::string> names(kCpuKernelVariants.begin(), kCpuKernelVariants.end());
  names.emplace_back(kExactCpuKernel);
  return names;
}

// "scalar, avx2, avx512, avx512vnni, amx or exact", for help texts and errors.
inline std::string cpu_kernel_names_text() {
  const std::vector<std::string> names = cpu_kernel_names();
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

}  // namespace coli
