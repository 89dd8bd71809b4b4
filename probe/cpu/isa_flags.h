// Instruction-set features the kernels care about, normalised to one
// vocabulary across x86 (/proc/cpuinfo "flags") and ARM ("Features").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace coli::probe {

// Vocabulary (sorted output, only these names):
//   x86: sse, sse2, sse3, ssse3, sse4_1, sse4_2, avx, avx2, fma, f16c,
//        avx512f, avx512bw, avx512vl, avx512dq, avx512_vnni, avx512_bf16,
//        avx512_fp16, avx_vnni, amx_tile, amx_int8, amx_bf16
//   arm: neon, dotprod, i8mm, sve, sve2, fp16, bf16
// `cpuinfo` is the text of /proc/cpuinfo (flags of the first processor are used).
std::vector<std::string> isa_from_cpuinfo(std::string_view cpuinfo);

}  // namespace coli::probe
