// Fleet profiles (docs/fleet.md): machines replayed from tests/fixtures/machines
// share a profile only within one class; live memory always wins; exported
// files are verified; merging flags a slow machine by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>

#include "coli/base/files.h"
#include "coli/planner/plan.h"
#include "coli/probe/fleet_machine.h"
#include "coli/probe/profile_io.h"
#include "test_support.h"

namespace coli::fleet {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = COLI_FIXTURES_DIR;
const fs::path kMachines = kFixtures / "machines";
const fs::path kH200Gpus = kFixtures / "gpus/nvidia-h200/gpus.toml";
constexpr std::uint64_t kGiB = 1ull << 30;

// This process's scratch directory, removed when it exits (ctest runs each
// test in a process of its own: nothing is left in the temporary directory).
const fs::path& scratch_root() {
  static const testing_support::TempDir root("coli_fleet_test");
  return root.path();
}

fs::path scratch(const std::string& name) {
  const fs::path dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

DeviceProfile replay(const fs::path& machine, std::optional<fs::path> gpus = std::nullopt,
                     std::optional<fs::path> root = std::nullopt) {
  ProbeOptions options;
  options.hwloc_xml = machine / "topology.xml";
  options.root = SystemRoot(root ? *root : machine / "root");
  options.gpu_record = gpus;
  auto profile = probe_live(options);
  EXPECT_TRUE(profile.ok()) << (profile.ok() ? "" : profile.error().message);
  return *profile;
}

// The H200 box with the real measurements captured on it (profiles/).
DeviceProfile tuned_h200() {
  DeviceProfile shared = replay(kMachines / "h200-xeon-16c", kH200Gpus);
  auto captured = load_profile(kFixtures / "../../profiles/h200-xeon-16c.toml");
  EXPECT_TRUE(captured.ok()) << (captured.ok() ? "" : captured.error().message);
  shared.measurements = captured->measurements;
  shared.provenance.mode = "full";
  return shared;
}

// A copy of the H200 fixture's /proc and /sys whose binding cgroup allows `limit` bytes.
fs::path h200_root_with_cgroup_limit(std::uint64_t limit) {
  const fs::path root = scratch("h200-cgroup") / "root";
  fs::copy(kMachines / "h200-xeon-16c/root", root, fs::copy_options::recursive);
  EXPECT_TRUE(write_file_atomically(root / "sys/fs/cgroup/process_api/memory.max", std::to_string(limit) + "\n").ok());
  return root;
}

const FieldDifference* find(const std::vector<FieldDifference>& list, const std::string& field) {
  for (const FieldDifference& d : list) {
    if (d.field == field) return &d;
  }
  return nullptr;
}

// Re-computes the checksum of an edited export, so only the field checks can refuse it.
std::string reseal(std::string text) {
  const std::size_t at = text.find("content_sha256 = ");
  const std::size_t end = text.find('\n', at) + 1;
  std::string body = text.substr(0, at) + text.substr(end);
  return text.substr(0, at) + "content_sha256 = 'sha256:" + sha256_hex(body) + "'\n" + text.substr(end);
}

std::string replace_line(std::string text, const std::string& key, const std::string& value) {
  const std::size_t at = text.find("\n" + key + " = ");
  EXPECT_NE(at, std::string::npos) << key;
  const std::size_t end = text.find('\n', at + 1);
  return text.substr(0, at + 1) + key + " = " + value + text.substr(end);
}

TEST(Fleet, Sha256KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string(1000, 'a')), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST(Fleet, TwoIdenticalMachinesShareAProfile) {
  const DeviceProfile shared = tuned_h200();
  const DeviceProfile other = replay(kMachines / "h200-xeon-16c", kH200Gpus);
  EXPECT_TRUE(shared.identity.equivalence_class.starts_with("class-v1:"));
  EXPECT_EQ(shared.identity.equivalence_class, other.identity.equivalence_class);
  const Revalidation r = revalidate(shared, other);
  EXPECT_TRUE(r.class_match);
  EXPECT_TRUE(r.class_mismatches.empty());
  EXPECT_TRUE(r.tuned_values_used);
  EXPECT_TRUE(r.tuned_threads_used);
  EXPECT_EQ(r.effective.measurements, shared.measurements);
  EXPECT_EQ(r.effective.memory, other.memory);
}

TEST(Fleet, AnotherGpuDriverMajorIsNamedAndLiveValuesUsed) {
  const DeviceProfile shared = tuned_h200();
  auto text = read_text_file(kH200Gpus);
  ASSERT_TRUE(text.ok());
  const fs::path gpus = scratch("driver") / "gpus.toml";
  ASSERT_TRUE(write_file_atomically(gpus, replace_line(*text, "driver_version", "12040")).ok());  // CUDA 12.4
  const DeviceProfile live = replay(kMachines / "h200-xeon-16c", gpus);
  const Revalidation r = revalidate(shared, live);
  EXPECT_FALSE(r.class_match);
  EXPECT_FALSE(r.tuned_values_used);
  const FieldDifference* d = find(r.class_mismatches, "gpus.cuda[0].driver_version");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->line(), "gpus.cuda[0].driver_version: profile 13.0, this machine 12.4");
  EXPECT_EQ(r.effective.measurements, Measurements{});
  EXPECT_EQ(r.effective.memory, live.memory);
  EXPECT_EQ(r.effective.gpus, live.gpus);
  const auto report = r.report("h200.toml");
  EXPECT_NE(report.back().find("re-probe"), std::string::npos);
}

// Two identical recorded GPUs: an exported profile (UUIDs dropped) is matched
// to this machine's GPUs by index and model, so each GPU's live budget is
// compared with its own record; a GPU this machine lacks is named.
TEST(Fleet, IdenticalGpusOfAnExportAreMatchedByIndexAndModel) {
  DeviceProfile machine = tuned_h200();
  VulkanDevice second = machine.gpus.vulkan.at(0);
  second.uuid = "00000000000000000000000000000002";
  machine.gpus.vulkan.push_back(second);
  assign_identity(machine, machine.identity.kernel_catalogue);
  assign_fingerprint(machine);
  auto shared = verify_shared_profile(export_profile(machine, {}), "shared.toml");
  ASSERT_TRUE(shared.ok()) << shared.error().message;
  ASSERT_TRUE(shared->gpus.vulkan[1].uuid.empty());  // export keeps dropping UUIDs

  DeviceProfile live = machine;
  auto& heap = live.gpus.vulkan[1].heaps.at(0);
  heap.budget_bytes = heap.size_bytes / 4;  // only the second GPU is busy here
  const std::string field = "gpus.vulkan[1].heaps[0].budget_bytes";
  const Revalidation r = revalidate(*shared, live);
  ASSERT_NE(find(r.live_differences, field), nullptr);
  EXPECT_EQ(find(r.live_differences, "gpus.vulkan[0].heaps[0].budget_bytes"), nullptr);

  live.gpus.vulkan.pop_back();
  const Revalidation missing = revalidate(*shared, live);
  const FieldDifference* d = find(missing.live_differences, "gpus.vulkan[1]");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->line().find("no such GPU here"), std::string::npos) << d->line();
}

TEST(Fleet, FewerCoresIsNamedAndTheLiveThreadRuleUsed) {
  const DeviceProfile shared = replay(kMachines / "container-cgroup-8g");  // 8 cores of the same Xeon
  const DeviceProfile live = replay(kMachines / "dev-vm-2core");
  ASSERT_EQ(shared.cpu.model, live.cpu.model);
  const Revalidation r = revalidate(shared, live);
  EXPECT_FALSE(r.class_match);
  const FieldDifference* d = find(r.class_mismatches, "cpu.kinds[0].cores");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->line(), "cpu.kinds[0].cores: profile 8, this machine 2");
  EXPECT_EQ(r.effective.threads, live.threads);
  EXPECT_EQ(r.effective.threads.decode_threads, 2);
}

TEST(Fleet, SmallerCgroupLimitIsNamedAndTheLiveHeadroomUsed) {
  const DeviceProfile shared = tuned_h200();
  const DeviceProfile live = replay(kMachines / "h200-xeon-16c", kH200Gpus, h200_root_with_cgroup_limit(8 * kGiB));
  const Revalidation r = revalidate(shared, live);
  EXPECT_TRUE(r.class_match);  // same hardware: tuned values may be used ...
  EXPECT_TRUE(r.tuned_values_used);
  const FieldDifference* d = find(r.live_differences, "memory.cgroup_limit_bytes");  // ... memory never
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->live_value.find("8.0 GiB"), std::string::npos) << d->line();
  ASSERT_NE(find(r.live_differences, "memory.headroom_bytes"), nullptr);
  EXPECT_EQ(r.effective.memory, live.memory);
  EXPECT_LE(r.effective.memory.headroom_bytes, 8 * kGiB);
}

// The must-show scenario: a profile recorded on a 128 GiB box cannot make the
// engine plan more than the live 8 GiB cgroup headroom of another box.
TEST(Fleet, SharedProfileNeverPlansMoreThanTheLiveHeadroom) {
  const DeviceProfile shared = tuned_h200();
  ASSERT_GT(shared.memory.headroom_bytes, 100 * kGiB);
  auto fp = planner::read_footprint(kFixtures / "model-configs/Qwen3-30B-A3B.json", WeightFormat::q4_g64,
                                    DenseFormat::source);
  ASSERT_TRUE(fp.ok()) << fp.error().message;
  // Trusting the file would plan far past 8 GiB: the test can fail.
  planner::PlanRequest cpu_plan;
  cpu_plan.gpu = "none";  // RAM is the tier under test
  auto trusting = planner::make_plan(shared, *fp, cpu_plan);
  ASSERT_TRUE(trusting.ok()) << trusting.error().message;
  ASSERT_GT(trusting->planned_ram_bytes(), 8 * kGiB);

  for (const std::uint64_t limit : {8 * kGiB, 12 * kGiB}) {
    const DeviceProfile live = replay(kMachines / "h200-xeon-16c", kH200Gpus, h200_root_with_cgroup_limit(limit));
    const Revalidation r = revalidate(shared, live);
    auto plan = planner::make_plan(r.effective, *fp, cpu_plan);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_LE(plan->planned_ram_bytes() + plan->margin.bytes, live.memory.headroom_bytes);
    EXPECT_EQ(plan->headroom_bytes, live.memory.headroom_bytes);
    planner::PlanRequest greedy;
    greedy.ram = shared.memory.headroom_bytes;  // asking for the recorded headroom is refused
    EXPECT_FALSE(planner::make_plan(r.effective, *fp, greedy).ok());
  }
}

TEST(Fleet, ExportDropsPrivateDataAndImportVerifiesIt) {
  DeviceProfile p = tuned_h200();
  p.provenance.host = "gpu-node-17";
  p.gpus.cuda[0].uuid = "4ac7dd5744b898fa4241db96731db453";
  const std::string text = export_profile(p, {});
  EXPECT_EQ(text.find("gpu-node-17"), std::string::npos);
  EXPECT_EQ(text.find("4ac7dd5744b898fa4241db96731db453"), std::string::npos);
  auto verified = verify_shared_profile(text, "fleet.toml");
  ASSERT_TRUE(verified.ok()) << verified.error().message;
  EXPECT_TRUE(verified->export_info->private_data_removed);
  EXPECT_EQ(verified->identity, p.identity);
  EXPECT_EQ(verified->measurements.memory, p.measurements.memory);
  EXPECT_EQ(verified->measurements.gpu_kernels, p.measurements.gpu_kernels);
  EXPECT_EQ(verified->measurements.disk->points, p.measurements.disk->points);
  EXPECT_EQ(verified->measurements.disk->directory, "");  // host-private path dropped
  const std::string kept = export_profile(p, {.keep_private = true});
  EXPECT_NE(kept.find("gpu-node-17"), std::string::npos);
  EXPECT_TRUE(verify_shared_profile(kept, "kept.toml").ok());
}

TEST(Fleet, TamperedFileRefused) {
  const std::string text = export_profile(tuned_h200(), {});
  // A plausible edit: a larger headroom, still within every bound.
  const std::string tampered = replace_line(text, "headroom_bytes", std::to_string(120 * kGiB));
  auto result = verify_shared_profile(tampered, "tampered.toml");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find("tampered.toml"), std::string::npos);
  EXPECT_NE(result.error().message.find("'export.content_sha256'"), std::string::npos);
  EXPECT_NE(result.error().message.find("changed after export"), std::string::npos);
  EXPECT_TRUE(verify_shared_profile(reseal(tampered), "resealed.toml").ok());  // the check is the checksum
}

TEST(Fleet, OutOfBoundsAndFutureSchemaRefusedWithTheFieldNamed) {
  const std::string text = export_profile(tuned_h200(), {});
  auto bounds = verify_shared_profile(reseal(replace_line(text, "swap_total_bytes", "9007199254740993")), "oob.toml");
  ASSERT_FALSE(bounds.ok());
  EXPECT_NE(bounds.error().message.find("'memory.swap_total_bytes'"), std::string::npos) << bounds.error().message;
  EXPECT_NE(bounds.error().message.find("out of range"), std::string::npos);
  auto future = verify_shared_profile(reseal(replace_line(text, "schema_version", "99")), "future.toml");
  ASSERT_FALSE(future.ok());
  EXPECT_NE(future.error().message.find("'schema_version'"), std::string::npos);
  EXPECT_NE(future.error().message.find("newer than this build"), std::string::npos);
  // An identity that does not describe the file's facts is refused too.
  auto forged = verify_shared_profile(reseal(replace_line(text, "model", "'Intel(R) Xeon(R) Platinum 8480+'")), "f.toml");
  ASSERT_FALSE(forged.ok());
  EXPECT_NE(forged.error().message.find("'identity.equivalence_class'"), std::string::npos) << forged.error().message;
}

// Machines m1, m2, ... of one class: copies of `base`, each scaled by its factor.
struct ScaledFleet {
  std::vector<DeviceProfile> profiles;
  std::vector<std::string> names;
};
ScaledFleet scaled_fleet(const DeviceProfile& base, std::initializer_list<double> factors,
                         const std::function<void(DeviceProfile&, double)>& scale) {
  ScaledFleet fleet;
  for (double factor : factors) {
    fleet.profiles.push_back(base);
    scale(fleet.profiles.back(), factor);
    fleet.names.push_back("m" + std::to_string(fleet.names.size() + 1));
  }
  return fleet;
}

TEST(Fleet, MergeOfFiveFlagsTheOutlierByName) {
  const DeviceProfile base = tuned_h200();
  ASSERT_TRUE(base.measurements.memory.has_value());
  // m3 is 30% slower; m5 (10%) is within the rule
  auto [profiles, names] = scaled_fleet(base, {1.0, 1.04, 0.7, 0.97, 0.9}, [](DeviceProfile& p, double factor) {
    for (auto& point : p.measurements.memory->points) {
      point.gb_per_s.median *= factor, point.gb_per_s.best *= factor, point.gb_per_s.worst *= factor;
    }
  });
  auto merged = merge_profiles(profiles, names);
  ASSERT_TRUE(merged.ok()) << merged.error().message;
  ASSERT_EQ(merged->findings.size(), 1u);
  EXPECT_TRUE(merged->findings[0].starts_with("m3 is 29% slower than its peers in memory_bandwidth")) << merged->findings[0];
  EXPECT_TRUE(merged->machines[2].outlier);
  EXPECT_FALSE(merged->machines[4].outlier);
  const auto& first = base.measurements.memory->points.front().gb_per_s;
  const auto& out = merged->merged.measurements.memory->points.front().gb_per_s;
  EXPECT_EQ(out.samples, 4 * first.samples);                  // the outlier is not averaged in
  EXPECT_DOUBLE_EQ(out.median, first.median * (1.0 + 0.97) / 2);  // median of 1.0, 1.04, 0.97, 0.9
  EXPECT_DOUBLE_EQ(out.worst, first.worst * 0.9);
  // Its text survives a round trip through the exporter and the verifier.
  EXPECT_TRUE(verify_shared_profile(export_profile(merged->merged, {}), "merged.toml").ok());
  // Another class is refused with the field named.
  profiles[1] = replay(kMachines / "dev-vm-2core");
  auto refused = merge_profiles(profiles, names);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("m2: class"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("cpu.kinds[0].cores"), std::string::npos);
}

// A made-up tuning phase: two kernel points, OpenMP step costs at 16
// threads and reads beside compute, each figure scaled by `factor`
// (costs divided: a slower machine's steps take longer).
void set_tuning(DeviceProfile& p, double factor) {
  const CpuSet pus = *CpuSet::parse("0-15");
  KernelTuning tuning;
  for (const char* kernel : {"expert_q4_decode", "expert_q4_prefill"}) {
    KernelThroughputPoint point;
    point.kernel = kernel, point.thread_set = "kind0:16c", point.threads = 16, point.pus = pus;
    point.rows = 1024, point.cols = 2048;
    point.tokens_per_s = {5, 1000 * factor, 1100 * factor, 900 * factor, 0.2};
    point.gb_per_s = {5, 30 * factor, 33 * factor, 27 * factor, 0.2};
    tuning.points.push_back(point);
  }
  p.measurements.kernel_tuning = tuning;
  p.measurements.parallel_overhead = ParallelOverhead{9, {{16, 2.0 / factor, 1.0 / factor, 0.5 / factor, 0.25 / factor}}};
  ReadInterference reads;
  reads.points.push_back({.thread_set = "kind0:16c", .threads = 16, .pus = pus, .pairs = 4, .slowdown = 0.1 / factor, .read_progress = factor});
  p.measurements.read_interference = reads;
  if (p.measurements.memory) p.measurements.memory->fresh_page_us = 0.3 / factor;
}

TEST(Fleet, MergeScoresAndCombinesTheTuningPhase) {
  // m2's cores run 25% slow (its memory and disk as its peers'): the
  // kernel points name it; the others' figures are their medians.
  const auto [profiles, names] = scaled_fleet(tuned_h200(), {1.0, 0.75, 1.1, 0.96}, set_tuning);
  auto merged = merge_profiles(profiles, names);
  ASSERT_TRUE(merged.ok()) << merged.error().message;
  ASSERT_EQ(merged->findings.size(), 1u);
  EXPECT_TRUE(merged->findings[0].starts_with("m2 is 25% slower than its peers in cpu_kernels")) << merged->findings[0];
  EXPECT_EQ(merged->machines[1].points, 2);
  const Measurements& m = merged->merged.measurements;
  ASSERT_TRUE(m.kernel_tuning && m.parallel_overhead && m.read_interference);
  for (const KernelThroughputPoint& point : m.kernel_tuning->points) {
    EXPECT_DOUBLE_EQ(point.tokens_per_s.median, 1000);  // median of 1.0, 1.1, 0.96: m2 left out
    EXPECT_DOUBLE_EQ(point.gb_per_s.median, 30);
    EXPECT_DOUBLE_EQ(point.tokens_per_s.best, 1100 * 1.1);
    EXPECT_DOUBLE_EQ(point.gb_per_s.worst, 27 * 0.96);
    EXPECT_EQ(point.tokens_per_s.samples, 15);
  }
  EXPECT_DOUBLE_EQ(m.parallel_overhead->points[0].region_us, 2.0);
  EXPECT_DOUBLE_EQ(m.parallel_overhead->points[0].barrier_us, 1.0);
  EXPECT_DOUBLE_EQ(m.parallel_overhead->points[0].broadcast_narrow_us, 0.25);
  EXPECT_DOUBLE_EQ(m.read_interference->points[0].read_progress, 1.0);
  EXPECT_DOUBLE_EQ(m.read_interference->points[0].slowdown, 0.1);
  ASSERT_TRUE(m.memory);
  EXPECT_DOUBLE_EQ(m.memory->fresh_page_us, 0.3);
  auto verified = verify_shared_profile(export_profile(merged->merged, {}), "merged.toml");
  EXPECT_TRUE(verified.ok()) << verified.error().message;
}

TEST(Fleet, DiffNamesEveryChangedField) {
  const DeviceProfile a = replay(kMachines / "container-cgroup-8g");
  DeviceProfile b = a;
  b.threads.decode_threads = 4;
  b.provenance.host = "other";
  const auto d = diff_profiles(a, b);
  EXPECT_NE(find(d, "threads.decode_threads"), nullptr);
  EXPECT_NE(find(d, "provenance.host"), nullptr);
  EXPECT_TRUE(diff_profiles(a, a).empty());
}

TEST(Fleet, SearchPathOrderAndClassMatch) {
  const fs::path dir = scratch("search");
  const fs::path extra = dir / "extra", system = dir / "system";
  fs::create_directories(extra);
  fs::create_directories(system);
  ::setenv("XDG_CONFIG_HOME", (dir / "config").c_str(), 1);
  ::setenv("COLI_PROFILE_PATH", (extra.string() + ":" + (dir / "missing.toml").string()).c_str(), 1);
  ::setenv("COLI_SYSTEM_PROFILE_DIR", system.c_str(), 1);
  const auto path = profile_search_path(dir / "explicit.toml");
  ASSERT_EQ(path.size(), 7u);
  EXPECT_EQ(path[0].origin, "--profile");
  EXPECT_EQ(path[1].path, extra);
  EXPECT_EQ(path[3].path, dir / "config/coli/device-profile.toml");
  EXPECT_EQ(path[4].path, dir / "config/coli/profiles");
  EXPECT_EQ(path[5].path, system);
  // Last, the curated profiles installed beside the programs (issue 12):
  // <prefix>/share/coli/profiles for <prefix>/bin, whatever the prefix.
  EXPECT_EQ(path[6].origin, "installed");
  EXPECT_EQ(path[6].path, (fs::canonical("/proc/self/exe").parent_path().parent_path() / "share/coli/profiles"));
  const DeviceProfile shared = replay(kMachines / "h200-xeon-16c", kH200Gpus);
  ASSERT_TRUE(write_file_atomically(system / "h200.toml", export_profile(shared, {})).ok());
  ASSERT_TRUE(write_file_atomically(extra / "broken.toml", "schema_version = 3\n").ok());
  const auto match = find_class_match(profile_search_path(), shared.identity.equivalence_class);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->path, system / "h200.toml");
  EXPECT_EQ(match->origin, "system");
  EXPECT_FALSE(find_class_match(profile_search_path(), "class-v1:0000000000000000").has_value());
  ::unsetenv("COLI_PROFILE_PATH");
  ::unsetenv("COLI_SYSTEM_PROFILE_DIR");
  ::unsetenv("XDG_CONFIG_HOME");
}

}  // namespace
}  // namespace coli::fleet
