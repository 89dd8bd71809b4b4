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

// A made-up expert decode point as the probe records it (expert_q4_decode
// and _narrow): one token on 8 experts of `width` x 2048 (24 matrices) on 8
// threads, each taking `row_s` a row (2 x width + 2048 rows) plus its bytes
// (`bytes_per_weight`: int4 0.53, int8 1.0) at `bytes_per_s`, and the call
// `forks_s` more for its region and barriers.
inline KernelThroughputPoint made_up_expert_decode_point(const char* kernel, int width, double row_s, double bytes_per_s,
                                                         double bytes_per_weight = 0.53, double forks_s = 0) {
  const double rows = 2.0 * width + 2048, bytes = 3.0 * width * 2048 * bytes_per_weight;
  const double call_s = 8 * (bytes / bytes_per_s + rows * row_s) + forks_s;
  const double gbs = 8 * bytes / call_s / 1e9;
  return point_on_8_threads(kernel, width, 1, 24, {3, gbs, gbs, gbs, 0}, {3, 1 / call_s, 1 / call_s, 1 / call_s, 0});
}

// A made-up float GEMV decode point (dense_bf16_decode and its narrow and
// cached kin): `matrices` of rows x cols bf16 on 8 threads, each row taking
// `row_s` plus its bytes at `bytes_per_s`, and the call `forks_s` more for
// its regions.
inline KernelThroughputPoint made_up_dense_bf16_point(const char* kernel, int rows, int cols, int matrices, double row_s,
                                                      double bytes_per_s, double forks_s = 0) {
  const double all_rows = static_cast<double>(rows) * matrices, bytes = all_rows * 2.0 * cols;
  const double call_s = bytes / bytes_per_s + all_rows * row_s + forks_s, gbs = bytes / call_s / 1e9;
  KernelThroughputPoint point = point_on_8_threads(kernel, rows, 1, matrices, {3, gbs, gbs, gbs, 0},
                                                   {3, 1 / call_s, 1 / call_s, 1 / call_s, 0});
  point.cols = cols;
  return point;
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
