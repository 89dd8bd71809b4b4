#include "cpu/isa_flags.h"

#include <algorithm>

#include "coli/base/text.h"

namespace coli::probe {
namespace {

// Kernel flag name -> our name. x86 names come from the "flags" line,
// ARM names from the "Features" line; the two sets do not overlap.
struct FlagName {
  std::string_view kernel;
  std::string_view isa;
};
constexpr FlagName kFlagNames[] = {
    // x86 (arch/x86/include/asm/cpufeatures.h spellings)
    {"sse", "sse"}, {"sse2", "sse2"}, {"pni", "sse3"}, {"ssse3", "ssse3"}, {"sse4_1", "sse4_1"},
    {"sse4_2", "sse4_2"}, {"avx", "avx"}, {"avx2", "avx2"}, {"fma", "fma"}, {"f16c", "f16c"},
    {"avx512f", "avx512f"}, {"avx512bw", "avx512bw"}, {"avx512vl", "avx512vl"}, {"avx512dq", "avx512dq"},
    {"avx512_vnni", "avx512_vnni"}, {"avx512_bf16", "avx512_bf16"}, {"avx512_fp16", "avx512_fp16"},
    {"avx_vnni", "avx_vnni"}, {"amx_tile", "amx_tile"}, {"amx_int8", "amx_int8"}, {"amx_bf16", "amx_bf16"},
    // ARM (arch/arm64 hwcap names; "neon" is how 32-bit ARM kernels spell it)
    {"asimd", "neon"}, {"neon", "neon"}, {"asimddp", "dotprod"}, {"i8mm", "i8mm"}, {"sve", "sve"},
    {"sve2", "sve2"}, {"fphp", "fp16"}, {"asimdhp", "fp16"}, {"bf16", "bf16"},
};

// The value of the first "flags" (x86) or "Features" (ARM) line: the first
// processor's. Keys are matched whole, so "vmx flags" does not count.
std::string_view first_feature_line(std::string_view cpuinfo) {
  for (std::string_view line : split_lines(cpuinfo)) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = trim(line.substr(0, colon));
    if (key == "flags" || key == "Features") return line.substr(colon + 1);
  }
  return {};
}

}  // namespace

std::vector<std::string> isa_from_cpuinfo(std::string_view cpuinfo) {
  std::vector<std::string> isa;
  for (std::string_view word : split(first_feature_line(cpuinfo), ' ')) {
    word = trim(word);
    const auto* found = std::find_if(std::begin(kFlagNames), std::end(kFlagNames),
                                     [&](const FlagName& name) { return name.kernel == word; });
    if (found != std::end(kFlagNames)) isa.emplace_back(found->isa);
  }
  std::sort(isa.begin(), isa.end());
  isa.erase(std::unique(isa.begin(), isa.end()), isa.end());
  return isa;
}

}  // namespace coli::probe
