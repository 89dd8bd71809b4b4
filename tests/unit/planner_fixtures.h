// The recorded inputs the planner tests share: Qwen3-30B-A3B's config at int4
// experts with source-format dense weights, and the H200 machine's profile
// (profiles/h200-xeon-16c.toml, recorded there).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

#include "coli/planner/footprint.h"
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

}  // namespace coli::planner
