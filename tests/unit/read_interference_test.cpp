// The probe's reads beside compute (measure/read_interference.h): the
// background reads really read and stop, leave no file, and refuse what
// they cannot do; the measurement gives a point per set it could pin.
// Figures are the machine's own: nothing here judges a speed.
#include <sched.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "measure/read_interference.h"
#include "test_support.h"

namespace coli::probe {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;


int first_usable_pu() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return 0;
  for (int pu = 0; pu < CPU_SETSIZE; ++pu)
    if (CPU_ISSET(pu, &mask)) return pu;
  return 0;
}

// Waits (bounded) until `reads` has landed more than `after` reads.
bool landed_more_than(const BackgroundReads& reads, std::uint64_t after) {
  for (int i = 0; i < 10000 && reads.reads_done() <= after; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return reads.reads_done() > after;
}

TEST(BackgroundReads, ReadWhileStartedStopAndLeaveNoFile) {
  testing_support::TempDir scratch("coli-read-interference");
  ASSERT_FALSE(scratch.path().empty());
  auto reads = BackgroundReads::open(scratch.path(), 32 * kMiB, 2.0, 1 * kMiB, 2);
  ASSERT_TRUE(reads.ok()) << reads.error().message;
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path())) << "the test file is unlinked at once";
  EXPECT_EQ((*reads)->block_bytes(), 1 * kMiB);
  EXPECT_EQ((*reads)->io_threads(), 2);
  (*reads)->start();
  ASSERT_TRUE(landed_more_than(**reads, 2));
  ASSERT_TRUE((*reads)->stop().ok());
  const std::uint64_t stopped_at = (*reads)->reads_done();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ((*reads)->reads_done(), stopped_at) << "no read after stop()";
  (*reads)->start();  // and again
  ASSERT_TRUE(landed_more_than(**reads, stopped_at));
  EXPECT_TRUE((*reads)->stop().ok());
}

TEST(BackgroundReads, ABlockTheDiskCannotReadOrAMissingDirectoryIsAnError) {
  testing_support::TempDir scratch("coli-read-interference");
  auto odd = BackgroundReads::open(scratch.path(), 32 * kMiB, 1.0, 1000, 1);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("multiple of 4096"), std::string::npos) << odd.error().message;
  const std::string missing = "/tmp/coli-no-such-directory/for-sure";
  auto nowhere = BackgroundReads::open(missing, 32 * kMiB, 1.0, 1 * kMiB, 1);
  ASSERT_FALSE(nowhere.ok());
  EXPECT_NE(nowhere.error().message.find(missing), std::string::npos) << nowhere.error().message;
  EXPECT_NE(nowhere.error().message.find("--disk-dir"), std::string::npos) << nowhere.error().message;
  EXPECT_EQ(nowhere.error().message.rfind("background reads: ", 0), 0u) << nowhere.error().message;
}

// One set on a usable PU gets a point of positive rates; a set on a PU the
// process may not use is left out and the note says why.
TEST(ReadInterference, TimesEverySetItCanPinAndNamesTheOthers) {
  testing_support::TempDir scratch("coli-read-interference");
  auto reads = BackgroundReads::open(scratch.path(), 32 * kMiB, 2.0, 1 * kMiB, 1);
  ASSERT_TRUE(reads.ok()) << reads.error().message;
  const ThreadCandidate usable{"kind0:1c", CpuSet({first_usable_pu()}), 1, false, 0};
  const ThreadCandidate elsewhere{"kind0:far", CpuSet({CPU_SETSIZE - 1}), 1, false, 0};
  const ReadInterferenceOptions options{.pairs = 2, .slice_seconds = 0.01, .pool_bytes = 32 * kMiB};
  auto measured = measure_read_interference(CpuFacts{}, MemoryFacts{}, {usable, elsewhere}, **reads, options, {});
  ASSERT_TRUE(measured.ok()) << measured.error().message;
  EXPECT_EQ(measured->kernel, "expert_q4_decode");
  EXPECT_EQ(measured->block_bytes, 1 * kMiB);
  ASSERT_EQ(measured->points.size(), 1u);
  const ReadInterferencePoint& point = measured->points[0];
  EXPECT_EQ(point.thread_set, "kind0:1c");
  EXPECT_EQ(point.pus, usable.pus);
  EXPECT_EQ(point.pairs, 2);
  EXPECT_GT(point.alone_gb_per_s, 0.0);
  EXPECT_GT(point.with_reads_gb_per_s, 0.0);
  EXPECT_GT(point.slowdown, -1.0);
  EXPECT_NE(measured->note.find("kind0:far skipped"), std::string::npos) << measured->note;
  EXPECT_GT((*reads)->reads_done(), 0u) << "the slices beside reads really had reads beside them";
}

// A tenth of the probe's budget over the slices, each 10-50 ms; a
// twentieth, at most 2 s, for the test weights.
TEST(ReadInterference, OptionsShareTheProbesBudget) {
  const ReadInterferenceOptions small = read_interference_options(4, 2);  // 2 sets x 4 pairs x 3 slices
  EXPECT_NEAR(small.slice_seconds, 0.4 / 24, 1e-12);
  EXPECT_NEAR(small.fill_seconds, 0.2, 1e-12);
  const ReadInterferenceOptions usual = read_interference_options(25, 2);
  EXPECT_DOUBLE_EQ(usual.slice_seconds, 0.05);
  EXPECT_DOUBLE_EQ(usual.fill_seconds, 1.25);
  const ReadInterferenceOptions many = read_interference_options(1, 40);
  EXPECT_DOUBLE_EQ(many.slice_seconds, 0.01);
  EXPECT_DOUBLE_EQ(read_interference_options(1000, 8).fill_seconds, 2.0);
}

}  // namespace
}  // namespace coli::probe
