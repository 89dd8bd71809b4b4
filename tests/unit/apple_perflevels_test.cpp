#include "cpu/apple_perflevels.h"

#include <gtest/gtest.h>

#include <string>

#include "coli/base/files.h"
#include "cpu/thread_rule.h"

namespace coli::probe {
namespace {

std::string fixture_text(const std::string& machine) {
  auto text = read_text_file(std::string(COLI_FIXTURES_DIR) + "/machines/" + machine + "/sysctl.txt");
  EXPECT_TRUE(text.ok()) << text.error().message;
  return text.ok() ? *text : std::string();
}

CpuFacts parse_fixture(const std::string& machine) {
  auto facts = cpu_facts_from_sysctl(fixture_text(machine), "sysctl:" + machine);
  EXPECT_TRUE(facts.ok()) << facts.error().message;
  return facts.ok() ? *facts : CpuFacts{};
}

const CacheInfo* find_cache(const CpuFacts& cpu, int level, const std::string& type, int rank) {
  for (const CacheInfo& cache : cpu.caches) {
    if (cache.level == level && cache.type == type && cache.kind_rank == rank) return &cache;
  }
  return nullptr;
}

TEST(ApplePerflevels, ThreeTierKindsAreRankedFromEfficiencyUp) {
  const CpuFacts cpu = parse_fixture("apple-m-3tier");
  EXPECT_EQ(cpu.arch, "arm64");
  EXPECT_EQ(cpu.vendor, "Apple");
  EXPECT_EQ(cpu.cores, 12);
  EXPECT_EQ(cpu.pus, 12);
  EXPECT_FALSE(cpu.smt());
  ASSERT_EQ(cpu.kinds.size(), 3u);
  // Rank 0 is the last perflevel; PUs are numbered from it upwards.
  EXPECT_EQ(cpu.kinds[0].core_type, "Efficiency");
  EXPECT_EQ(cpu.kinds[0].pus.to_list(), "0-5");
  EXPECT_EQ(cpu.kinds[0].cores, 6);
  EXPECT_EQ(cpu.kinds[1].core_type, "Performance");
  EXPECT_EQ(cpu.kinds[1].pus.to_list(), "6-9");
  EXPECT_EQ(cpu.kinds[2].core_type, "Super");
  EXPECT_EQ(cpu.kinds[2].pus.to_list(), "10-11");
  EXPECT_EQ(cpu.kinds[2].rank, 2);
  EXPECT_EQ(cpu.topology_source, "sysctl:apple-m-3tier");
}

TEST(ApplePerflevels, ThreeTierGetsSixThreadsNotPerflevelZeroCount) {
  // The field bug: 2 threads from hw.perflevel0.logicalcpu. The 2+4 faster cores are 6.
  const ThreadRecommendation threads = recommend_threads(parse_fixture("apple-m-3tier"));
  EXPECT_EQ(threads.decode_threads, 6);
  EXPECT_EQ(threads.decode_pus.to_list(), "6-11");
  EXPECT_EQ(threads.rule, "all-but-efficiency-kind");
}

TEST(ApplePerflevels, M4ProFactsCachesIsaAndMemory) {
  const std::string text = fixture_text("apple-m4-pro");
  auto parsed = cpu_facts_from_sysctl(text, "sysctl:m4pro");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const CpuFacts& cpu = *parsed;
  EXPECT_EQ(cpu.model, "Apple M4 Pro");
  EXPECT_EQ(cpu.packages, 1);
  ASSERT_EQ(cpu.kinds.size(), 2u);
  EXPECT_EQ(cpu.kinds[0].pus.to_list(), "0-3");
  EXPECT_EQ(cpu.kinds[1].pus.to_list(), "4-13");
  EXPECT_EQ(cpu.kinds[1].cores, 10);

  const CacheInfo* p_l2 = find_cache(cpu, 2, "unified", 1);
  ASSERT_NE(p_l2, nullptr);
  EXPECT_EQ(p_l2->size_bytes, 16u << 20);
  EXPECT_EQ(p_l2->cores_sharing, 5);
  EXPECT_EQ(p_l2->instances, 2);
  EXPECT_EQ(p_l2->line_bytes, 128);
  const CacheInfo* e_l2 = find_cache(cpu, 2, "unified", 0);
  ASSERT_NE(e_l2, nullptr);
  EXPECT_EQ(e_l2->size_bytes, 4u << 20);
  EXPECT_EQ(e_l2->instances, 1);
  const CacheInfo* p_l1d = find_cache(cpu, 1, "data", 1);
  ASSERT_NE(p_l1d, nullptr);
  EXPECT_EQ(p_l1d->size_bytes, 128u << 10);
  EXPECT_EQ(p_l1d->instances, 10);

  EXPECT_EQ(cpu.isa, (std::vector<std::string>{"bf16", "dotprod", "fp16", "i8mm", "neon"}));
  EXPECT_EQ(memsize_from_sysctl(text), std::optional<std::uint64_t>(24ull << 30));
  ASSERT_EQ(cpu.numa_nodes.size(), 1u);
  EXPECT_EQ(cpu.numa_nodes[0].memory_bytes, 24ull << 30);
  EXPECT_EQ(cpu.usable.pus.to_list(), "0-13");
  EXPECT_EQ(cpu.usable.affinity, cpu.usable.pus);
  EXPECT_FALSE(cpu.usable.quota_cpus.has_value());

  EXPECT_EQ(recommend_threads(cpu).decode_threads, 10);
}

TEST(ApplePerflevels, WithoutPerflevelsTheMachineIsOneKind) {
  // Older macOS / Intel Mac: no hw.nperflevels; SMT visible in the counts.
  const std::string text =
      "hw.physicalcpu: 8\nhw.logicalcpu: 16\nhw.optional.x86_64: 1\nhw.optional.avx2_0: 1\n"
      "hw.optional.supplementalsse3: 1\nmachdep.cpu.vendor: GenuineIntel\n";
  auto parsed = cpu_facts_from_sysctl(text, "sysctl:intel");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->arch, "x86_64");
  EXPECT_EQ(parsed->vendor, "GenuineIntel");
  ASSERT_EQ(parsed->kinds.size(), 1u);
  EXPECT_EQ(parsed->kinds[0].cores, 8);
  EXPECT_EQ(parsed->kinds[0].pus.size(), 16);
  EXPECT_TRUE(parsed->smt());
  EXPECT_EQ(parsed->isa, (std::vector<std::string>{"avx2", "ssse3"}));
}

TEST(ApplePerflevels, ToleratesBlankLinesUnknownKeysAndSpacing) {
  const std::string text =
      "\n  hw.nperflevels :  1\nkern.version: Darwin Kernel: Version 24\nnot a key value line\n\n"
      "hw.perflevel0.logicalcpu:4\nhw.perflevel0.physicalcpu: 4\nhw.logicalcpu: 4\nhw.physicalcpu: 4\n";
  auto parsed = cpu_facts_from_sysctl(text, "sysctl:spacing");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->pus, 4);
  EXPECT_FALSE(memsize_from_sysctl(text).has_value());
}

// Each bad input must fail with a message naming the source and the key.
struct BadInput {
  const char* text;
  const char* key_named;
};

TEST(ApplePerflevels, BadInputsGiveNamedErrors) {
  const std::string good_tail = "hw.logicalcpu: 4\nhw.physicalcpu: 4\n";
  const BadInput cases[] = {
      {"hw.nperflevels: 2\nhw.perflevel0.logicalcpu: 2\nhw.perflevel0.physicalcpu: 2\n"
       "hw.perflevel1.physicalcpu: 2\nhw.logicalcpu: 4\nhw.physicalcpu: 4\n",
       "hw.perflevel1.logicalcpu is missing"},
      {"hw.nperflevels: two\n", "hw.nperflevels is not a number"},
      {"hw.nperflevels: 17\n", "hw.nperflevels = 17 is out of range"},
      {"hw.nperflevels: 0\n", "hw.nperflevels = 0 is out of range"},
      {"hw.nperflevels: 1\nhw.perflevel0.logicalcpu: 4\nhw.perflevel0.physicalcpu: 4\n"
       "hw.logicalcpu: 6\nhw.physicalcpu: 4\n",
       "hw.logicalcpu is 6"},
      {"hw.nperflevels: 1\nhw.perflevel0.logicalcpu: 2\nhw.perflevel0.physicalcpu: 4\n",
       "hw.perflevel0.physicalcpu (4) exceeds"},
      {"hw.nperflevels: 1\nhw.perflevel0.logicalcpu: 4\nhw.perflevel0.physicalcpu: 4\nhw.logicalcpu: 4\n",
       "hw.physicalcpu is missing"},
      {"hw.logicalcpu: 4\n", "hw.physicalcpu is missing"},
      {"hw.memsize: lots\nhw.logicalcpu: 4\nhw.physicalcpu: 4\n", "hw.memsize is not a number"},
      {"hw.optional.arm.FEAT_I8MM: yes\nhw.logicalcpu: 4\nhw.physicalcpu: 4\n",
       "hw.optional.arm.FEAT_I8MM is not a number"},
      {"hw.nperflevels: 1\nhw.perflevel0.logicalcpu: 4\nhw.perflevel0.physicalcpu: 4\n"
       "hw.perflevel0.l2cachesize: -1\n",
       "hw.perflevel0.l2cachesize is not a number"},
  };
  for (const BadInput& bad : cases) {
    auto parsed = cpu_facts_from_sysctl(bad.text, "sysctl:bad.txt");
    ASSERT_FALSE(parsed.ok()) << bad.text;
    EXPECT_NE(parsed.error().message.find("sysctl:bad.txt"), std::string::npos) << parsed.error().message;
    EXPECT_NE(parsed.error().message.find(bad.key_named), std::string::npos) << parsed.error().message;
  }
  // The good tail alone is valid: the errors above come from what was added.
  EXPECT_TRUE(cpu_facts_from_sysctl(good_tail, "sysctl:good").ok());
}

}  // namespace
}  // namespace coli::probe
