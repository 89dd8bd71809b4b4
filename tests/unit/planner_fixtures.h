// The recorded inputs the planner tests share: Qwen3-30B-A3B's config at int4
// experts with source-format dense weights, and the H200 machine's profile
// (profiles/h200-xeon-16c.toml, recorded there).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "coli/planner/footprint.h"
#include "coli/planner/speed.h"
#include "coli/probe/profile_io.h"

namespace coli::planner {

inline ModelFootprint qwen3() {
  auto fp = read_footprint(std::filesystem::path(COLI_FIXTURES_DIR) / "model-configs" / "Qwen3-30B-A3B.json",
                           WeightFormat::q4_g64, DenseFormat::source);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  return *fp;
}

inline DeviceProfile h200() {
  auto profile = load_profile(std::filesystem::path(COLI_FIXTURES_DIR) / ".." / ".." / "profiles" / "h200-xeon-16c.toml");
  EXPECT_TRUE(profile.ok()) << (profile.ok() ? "" : profile.error().message);
  return *profile;
}

inline DiskBandwidthPoint disk(std::uint64_t block, int qd, double gbs) {
  return {"random", block, qd, {1, gbs, gbs, gbs, 0}};
}

// RAM read 1 GB/s at 1 thread and `gbs` at 8; random reads of 1 MiB (best
// queue depth 2.0 GB/s) and 16 MiB (9 GB/s, but far from Qwen3's 2.4 MiB record).
inline DeviceProfile measured_profile(double gbs) {
  DeviceProfile p = h200();
  p.measurements.memory = MemoryBandwidth{1 << 30, {{"read", -1, 1, {}, {1, 1, 1, 1, 0}},
                                                    {"triad", -1, 8, {}, {1, 99, 99, 99, 0}},
                                                    {"read", -1, 8, {}, {1, gbs, gbs, gbs, 0}}}};
  p.measurements.disk = DiskBandwidth{"/d", "ext4", true, "", 1 << 30,
                                      {disk(1 << 20, 1, 0.5), disk(1 << 20, 4, 2.0), disk(16 << 20, 8, 9.0)}};
  return p;
}

// One tuning-phase point of `kernel` on 8 threads (PUs 0-7), as the probe records it.
inline KernelThroughputPoint point_on_8_threads(const char* kernel, int rows, int batch, int matrices, SampleStats gb_per_s,
                                                SampleStats tokens_per_s) {
  return {kernel, rows, 2048, batch, matrices, "kind0:8c", 8, CpuSet({0, 1, 2, 3, 4, 5, 6, 7}), false, gb_per_s, tokens_per_s};
}

// A tuning phase of that one point.
inline KernelTuning tuned_on_8_threads(const char* kernel, int rows, int batch, int matrices, SampleStats gb_per_s,
                                       SampleStats tokens_per_s) {
  KernelTuning tuning{"avx512vnni", 1ull << 30, 1, "", {}};
  tuning.points.push_back(point_on_8_threads(kernel, rows, batch, matrices, gb_per_s, tokens_per_s));
  return tuning;
}

// A prediction's term of that name, in seconds (-1 when it has none).
inline double term_seconds(const std::vector<SpeedTerm>& terms, const std::string& name) {
  for (const SpeedTerm& t : terms)
    if (t.name == name) return t.seconds;
  return -1;
}

}  // namespace coli::planner
