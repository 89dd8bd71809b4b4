#include "cpu/thread_rule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace coli::probe {
namespace {

CpuSet range(int first, int count) {
  std::vector<int> cpus;
  for (int i = 0; i < count; ++i) cpus.push_back(first + i);
  return CpuSet(std::move(cpus));
}

// Made-up machines: kinds given as {first PU, PU count, cores}, lowest rank first.
struct KindSpec {
  int first_pu;
  int pus;
  int cores;
};

CpuFacts machine(const std::vector<KindSpec>& specs) {
  CpuFacts cpu;
  for (const KindSpec& spec : specs) {
    CpuKind kind;
    kind.rank = static_cast<int>(cpu.kinds.size());
    kind.pus = range(spec.first_pu, spec.pus);
    kind.cores = spec.cores;
    cpu.kinds.push_back(kind);
    cpu.cores += spec.cores;
    cpu.pus += spec.pus;
    cpu.usable.pus = cpu.usable.pus.unite(kind.pus);
  }
  cpu.usable.affinity = cpu.usable.pus;
  return cpu;
}

void expect_same_for_prefill(const ThreadRecommendation& threads) {
  EXPECT_EQ(threads.prefill_threads, threads.decode_threads);
  EXPECT_EQ(threads.prefill_pus, threads.decode_pus);
  EXPECT_EQ(threads.decode_pus.size(), threads.decode_threads);
}

TEST(ThreadRule, SingleKindWithoutSmtUsesEveryCore) {
  const auto threads = recommend_threads(machine({{0, 8, 8}}));
  EXPECT_EQ(threads.decode_threads, 8);
  EXPECT_EQ(threads.decode_pus.to_list(), "0-7");
  EXPECT_EQ(threads.rule, "single-kind-physical-cores");
  EXPECT_EQ(threads.reason, "1 CPU kind; one thread on each of the 8 usable physical cores (of 8).");
  expect_same_for_prefill(threads);
}

TEST(ThreadRule, ServerSiblingsNumberedApartUseEveryCoreOnce) {
  // EPYC-style numbering: core c holds PUs c and c+8; the core map decides, not adjacency.
  CpuFacts cpu = machine({{0, 16, 8}});
  for (int core = 0; core < 8; ++core) cpu.kinds[0].core_pus.push_back(CpuSet({core, core + 8}));
  const auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 8);
  EXPECT_EQ(threads.decode_pus.to_list(), "0-7");
  // With the first siblings forbidden, the other sibling of each core is used.
  cpu.usable.pus = CpuSet::parse("0-3,12-15").value();
  EXPECT_EQ(recommend_threads(cpu).decode_pus.to_list(), "0-3,12-15");
}

TEST(ThreadRule, SingleKindWithSmtLeavesSiblingsOut) {
  const auto threads = recommend_threads(machine({{0, 16, 8}}));
  EXPECT_EQ(threads.decode_threads, 8);
  EXPECT_EQ(threads.decode_pus.to_list(), "0,2,4,6,8,10,12,14");
  EXPECT_EQ(threads.rule, "single-kind-physical-cores");
  EXPECT_NE(threads.reason.find("SMT siblings not counted"), std::string::npos) << threads.reason;
  expect_same_for_prefill(threads);
}

TEST(ThreadRule, SingleKindAffinityRestrictedCountsCoresWithAUsablePu) {
  CpuFacts cpu = machine({{0, 16, 8}});
  cpu.usable.pus = CpuSet({1, 2, 3, 4, 8});  // cores 0 (PU 1), 1 (2,3), 2 (4), 4 (8)
  const auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 4);
  EXPECT_EQ(threads.decode_pus.to_list(), "1-2,4,8");
}

TEST(ThreadRule, AppleThreeTierUsesSuperAndPerformanceCores) {
  // 6 efficiency (rank 0), 4 performance (rank 1), 2 super (rank 2).
  const auto threads = recommend_threads(machine({{0, 6, 6}, {6, 4, 4}, {10, 2, 2}}));
  EXPECT_EQ(threads.decode_threads, 6);
  EXPECT_EQ(threads.decode_pus.to_list(), "6-11");
  EXPECT_EQ(threads.rule, "all-but-efficiency-kind");
  EXPECT_EQ(threads.reason,
            "3 CPU kinds; using the 2+4 cores of kinds 2 and 1, leaving out the 6 efficiency cores (kind 0).");
  expect_same_for_prefill(threads);
}

TEST(ThreadRule, AppleM4ProUsesThePerformanceCores) {
  const auto threads = recommend_threads(machine({{0, 4, 4}, {4, 10, 10}}));
  EXPECT_EQ(threads.decode_threads, 10);
  EXPECT_EQ(threads.decode_pus.to_list(), "4-13");
  EXPECT_EQ(threads.reason, "2 CPU kinds; using the 10 cores of kind 1, leaving out the 4 efficiency cores (kind 0).");
}

TEST(ThreadRule, HybridIntelWithSmtPCores) {
  // i9-13900K-like: 8 P-cores with SMT on PUs 0-15, 16 E-cores on 16-31.
  const auto threads = recommend_threads(machine({{16, 16, 16}, {0, 16, 8}}));
  EXPECT_EQ(threads.decode_threads, 8);
  EXPECT_EQ(threads.decode_pus.to_list(), "0,2,4,6,8,10,12,14");
  EXPECT_EQ(threads.rule, "all-but-efficiency-kind");
  EXPECT_NE(threads.reason.find("16 efficiency cores"), std::string::npos) << threads.reason;
  expect_same_for_prefill(threads);
}

TEST(ThreadRule, HybridIntelWithoutSmt) {
  // Core Ultra 265K-like: 8 P + 12 E, no SMT.
  const auto threads = recommend_threads(machine({{8, 12, 12}, {0, 8, 8}}));
  EXPECT_EQ(threads.decode_threads, 8);
  EXPECT_EQ(threads.decode_pus.to_list(), "0-7");
  EXPECT_EQ(threads.reason.find("SMT"), std::string::npos) << threads.reason;
}

TEST(ThreadRule, BigLittleArm) {
  // RK3588-like: 4 Cortex-A55 on PUs 0-3, 4 Cortex-A76 on PUs 4-7.
  const auto threads = recommend_threads(machine({{0, 4, 4}, {4, 4, 4}}));
  EXPECT_EQ(threads.decode_threads, 4);
  EXPECT_EQ(threads.decode_pus.to_list(), "4-7");
}

TEST(ThreadRule, TwoSocketServerWithSmt) {
  const auto threads = recommend_threads(machine({{0, 256, 128}}));
  EXPECT_EQ(threads.decode_threads, 128);
  EXPECT_EQ(threads.rule, "single-kind-physical-cores");
  expect_same_for_prefill(threads);
}

TEST(ThreadRule, OnlyEfficiencyCoresUsableFallsBackToThem) {
  CpuFacts cpu = machine({{16, 16, 16}, {0, 16, 8}});
  cpu.usable.pus = range(16, 4);  // taskset to four E-cores
  cpu.usable.affinity = cpu.usable.pus;
  const auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 4);
  EXPECT_EQ(threads.decode_pus.to_list(), "16-19");
  EXPECT_EQ(threads.rule, "efficiency-kind-only");
  EXPECT_NE(threads.reason.find("no usable core of a faster kind"), std::string::npos) << threads.reason;
}

TEST(ThreadRule, QuotaCapsRoundingDown) {
  CpuFacts cpu = machine({{0, 8, 8}});
  cpu.usable.quota_cpus = 2.5;
  const auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 2);
  EXPECT_EQ(threads.decode_pus.size(), 2);
  EXPECT_EQ(threads.rule, "single-kind-physical-cores+quota");
  EXPECT_NE(threads.reason.find("capped at 2 by the cgroup CPU quota of 2.5 CPUs"), std::string::npos)
      << threads.reason;
  expect_same_for_prefill(threads);
}

TEST(ThreadRule, QuotaKeepsTheFastestKindAndNeverGoesBelowOne) {
  CpuFacts cpu = machine({{0, 6, 6}, {6, 4, 4}, {10, 2, 2}});
  cpu.usable.quota_cpus = 3.0;
  auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 3);
  EXPECT_TRUE(threads.decode_pus.contains(10) && threads.decode_pus.contains(11)) << threads.decode_pus.to_list();
  EXPECT_EQ(threads.rule, "all-but-efficiency-kind+quota");

  cpu.usable.quota_cpus = 0.5;
  threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 1);
}

TEST(ThreadRule, QuotaLargerThanCoresChangesNothing) {
  CpuFacts cpu = machine({{0, 8, 8}});
  cpu.usable.quota_cpus = 12.0;
  const auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 8);
  EXPECT_EQ(threads.rule, "single-kind-physical-cores");
}

TEST(ThreadRule, NoKindInformationTreatsTheMachineAsOneKind) {
  CpuFacts cpu;
  cpu.cores = 4;
  cpu.pus = 8;
  cpu.usable.pus = range(0, 8);
  const auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 4);
  EXPECT_EQ(threads.rule, "single-kind-physical-cores");
}

TEST(ThreadRule, NothingUsableStillRunsOneThread) {
  CpuFacts cpu = machine({{0, 8, 8}});
  cpu.usable.pus = CpuSet();
  const auto threads = recommend_threads(cpu);
  EXPECT_EQ(threads.decode_threads, 1);
  EXPECT_TRUE(threads.decode_pus.empty());
  EXPECT_EQ(threads.rule, "no-usable-cpus");
}

}  // namespace
}  // namespace coli::probe
