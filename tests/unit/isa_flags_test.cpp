#include "cpu/isa_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace coli::probe {
namespace {

using Isa = std::vector<std::string>;

// Sapphire Rapids-style flags line (abridged), as /proc/cpuinfo prints it.
constexpr const char* kSapphireRapids =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 "
    "x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch avx2 bmi2 erms "
    "avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt "
    "avx_vnni avx512_bf16 wbnoinvd avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq "
    "avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid movdiri movdir64b serialize tsxldtrk amx_bf16 "
    "avx512_fp16 amx_tile amx_int8 arch_capabilities\n"
    "vmx flags\t: vnmi preemption_timer posted_intr invvpid ept_x_only\n"
    "bugs\t\t: spectre_v1 spectre_v2\n";

TEST(IsaFlags, MapsX86KernelNamesToVocabulary) {
  EXPECT_EQ(isa_from_cpuinfo(kSapphireRapids),
            (Isa{"amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512_bf16", "avx512_fp16", "avx512_vnni",
                 "avx512bw", "avx512dq", "avx512f", "avx512vl", "avx_vnni", "f16c", "fma", "sse", "sse2", "sse3",
                 "sse4_1", "sse4_2", "ssse3"}));
}

TEST(IsaFlags, UsesOnlyTheFirstProcessorsLine) {
  const std::string two_processors =
      "processor\t: 0\nflags\t\t: sse sse2 avx2\n\nprocessor\t: 1\nflags\t\t: sse sse2 avx2 avx512f\n";
  EXPECT_EQ(isa_from_cpuinfo(two_processors), (Isa{"avx2", "sse", "sse2"}));
}

TEST(IsaFlags, MapsArm64Features) {
  // Neoverse V2 (Grace)-style Features line.
  const std::string grace =
      "processor\t: 0\nBogoMIPS\t: 2000.00\n"
      "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
      "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp "
      "sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti\n"
      "CPU implementer\t: 0x41\n";
  EXPECT_EQ(isa_from_cpuinfo(grace), (Isa{"bf16", "dotprod", "fp16", "i8mm", "neon", "sve", "sve2"}));
}

TEST(IsaFlags, OlderArmCoresGetOnlyWhatTheyHave) {
  // Cortex-A55/A76 (RK3588-like): dot product and fp16, no i8mm, no SVE.
  const std::string rk3588 =
      "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
      "asimdrdm lrcpc dcpop asimddp\n";
  EXPECT_EQ(isa_from_cpuinfo(rk3588), (Isa{"dotprod", "fp16", "neon"}));
  // 32-bit ARM kernels spell Advanced SIMD "neon".
  EXPECT_EQ(isa_from_cpuinfo("Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4\n"), (Isa{"neon"}));
}

TEST(IsaFlags, NoFeatureLineGivesNothing) {
  EXPECT_TRUE(isa_from_cpuinfo("").empty());
  EXPECT_TRUE(isa_from_cpuinfo("processor\t: 0\nvmx flags\t: ept vpid\n").empty());
}

}  // namespace
}  // namespace coli::probe
