// Pinning the OpenMP team the GEMV kernels run on: member i lands on PU i,
// stays there across regions, and release gives the old affinity back.
#include <gtest/gtest.h>

#include "cpu/thread_placement.h"

namespace coli::kernels::cpu {
namespace {

#if defined(__linux__)
TEST(ThreadPlacement, PinsEachMemberAndReleasesThem) {
  const CpuSet home = current_thread_affinity();
  ASSERT_FALSE(home.empty());
  // Every usable PU, in reverse order: member 0 gets the highest one.
  std::vector<int> pus(home.cpus().rbegin(), home.cpus().rend());
  if (pus.size() > 4) pus.resize(4);
  const int threads = static_cast<int>(pus.size());
  ASSERT_TRUE(pin_openmp_team(pus)) << "pinning to usable PUs";
  for (int round = 0; round < 3; ++round) {  // later regions find the pool where it was put
    const auto seen = openmp_team_affinity(threads);
    for (int i = 0; i < threads; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], CpuSet({pus[static_cast<std::size_t>(i)]})) << "member " << i;
  }
  EXPECT_EQ(current_thread_affinity(), CpuSet({pus[0]}));  // the caller is member 0
  ASSERT_TRUE(release_openmp_team());
  EXPECT_EQ(current_thread_affinity(), home);
  for (const CpuSet& member : openmp_team_affinity(threads)) EXPECT_EQ(member, home);
  EXPECT_TRUE(release_openmp_team());  // nothing pinned: a no-op
}

TEST(ThreadPlacement, RefusesBadSetsAndLeavesNothingPinned) {
  const CpuSet home = current_thread_affinity();
  EXPECT_FALSE(pin_openmp_team(CpuSet{}));
  EXPECT_FALSE(pin_openmp_team(std::vector<int>{0, 0}));
  EXPECT_FALSE(pin_openmp_team(std::vector<int>{-1}));
  // A PU the process may not use (outside its affinity) fails with a message naming it.
  int outside = 0;
  while (home.contains(outside)) ++outside;
  const auto result = pin_openmp_team(std::vector<int>{home.cpus().front(), outside});
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("PU " + std::to_string(outside)), std::string::npos) << result.error().message;
  EXPECT_EQ(current_thread_affinity(), home);
  for (const CpuSet& member : openmp_team_affinity(2)) EXPECT_EQ(member, home);
}
#endif

}  // namespace
}  // namespace coli::kernels::cpu
