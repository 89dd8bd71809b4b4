// Where a CUDA hybrid prefill batch computes the experts outside VRAM that
// its tokens chose (engine/cuda/host_expert_split.h): per expert, copied up
// unless its tokens take the CPU less time than the copy, from costs the
// run measured (and a layer's fixed cost of using the CPU at all); until
// both are measured, the fewest-token expert goes to the CPU to measure it
// and the others go up.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/host_expert_split.h"

namespace coli::cuda {
namespace {

using P = HostExpertPlace;
using gpu::HostExpertMode;

TEST(HostExpertSplit, MeasuredCostsDecidePerExpertByTokenCount) {
  const HostExpertCosts costs{/*upload_per_expert=*/100e-6, /*cpu_per_choice=*/20e-6};
  // 5 tokens x 20 us = 100 us is no faster than the copy: it goes up; 4 tokens (80 us) stay.
  const std::vector<int> tokens{0, 1, 4, 5, 64};
  EXPECT_EQ(place_host_experts(tokens, costs, HostExpertMode::measured),
            (std::vector<P>{P::unused, P::cpu, P::cpu, P::upload, P::upload}));
  // A slower copy (a PCIe x4 link, a disk read behind it) moves the line.
  const HostExpertCosts slow_copy{1e-3, 20e-6};
  EXPECT_EQ(place_host_experts(tokens, slow_copy, HostExpertMode::measured),
            (std::vector<P>{P::unused, P::cpu, P::cpu, P::cpu, P::upload}));
}

// A layer's CPU work starts with its input rows going down: the CPU takes
// experts only where the copies they save outweigh that.
TEST(HostExpertSplit, TheCpuTakesALayersExpertsOnlyWhereTheyOutweighItsFixedCost) {
  const std::vector<int> tokens{1, 64, 2};
  HostExpertCosts costs{100e-6, 20e-6, 0};
  EXPECT_EQ(place_host_experts(tokens, costs, HostExpertMode::measured), (std::vector<P>{P::cpu, P::upload, P::cpu}));
  costs.cpu_per_layer = 139e-6;  // saves 80 + 60 = 140 us: still worth it
  EXPECT_EQ(place_host_experts(tokens, costs, HostExpertMode::measured), (std::vector<P>{P::cpu, P::upload, P::cpu}));
  costs.cpu_per_layer = 141e-6;  // more than it saves
  EXPECT_EQ(place_host_experts(tokens, costs, HostExpertMode::measured),
            (std::vector<P>{P::upload, P::upload, P::upload}));
  EXPECT_EQ(place_host_experts(tokens, costs, HostExpertMode::cpu), (std::vector<P>{P::cpu, P::cpu, P::cpu}))
      << "a forced mode ignores it";
}

TEST(HostExpertSplit, UnmeasuredCostsSendTheFewestTokensToTheCpuFirst) {
  const std::vector<int> tokens{7, 0, 3, 9};
  EXPECT_EQ(place_host_experts(tokens, {}, HostExpertMode::measured), (std::vector<P>{P::upload, P::unused, P::cpu, P::upload}));
  // The copy measured, the CPU not yet: the same; the CPU measured, the copy not: everything goes up.
  EXPECT_EQ(place_host_experts(tokens, {50e-6, 0}, HostExpertMode::measured),
            (std::vector<P>{P::upload, P::unused, P::cpu, P::upload}));
  EXPECT_EQ(place_host_experts(tokens, {0, 1e-6}, HostExpertMode::measured),
            (std::vector<P>{P::upload, P::unused, P::upload, P::upload}));
  // One expert and nothing measured: it goes up (the copy is measured first).
  EXPECT_EQ(place_host_experts(std::vector<int>{0, 2}, {}, HostExpertMode::measured), (std::vector<P>{P::unused, P::upload}));
}

TEST(HostExpertSplit, ForcedModesIgnoreTheCosts) {
  const std::vector<int> tokens{0, 1, 100};
  const HostExpertCosts costs{100e-6, 20e-6};
  EXPECT_EQ(place_host_experts(tokens, costs, HostExpertMode::upload), (std::vector<P>{P::unused, P::upload, P::upload}));
  EXPECT_EQ(place_host_experts(tokens, costs, HostExpertMode::cpu), (std::vector<P>{P::unused, P::cpu, P::cpu}));
  EXPECT_EQ(place_host_experts(tokens, {}, HostExpertMode::cpu), (std::vector<P>{P::unused, P::cpu, P::cpu}));
}

TEST(HostExpertSplit, NewMeasurementsWeighAsMuchAsThePast) {
  EXPECT_EQ(HostExpertCosts::blend(0, 3.0), 3.0) << "the first measurement stands alone";
  EXPECT_EQ(HostExpertCosts::blend(1.0, 3.0), 2.0);
}

}  // namespace
}  // namespace coli::cuda
