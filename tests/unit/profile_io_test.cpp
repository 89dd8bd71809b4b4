// Device profile files: exact round trip, and a table of broken files that
// must each be refused with the field (and line) named, never a crash.
#include <gtest/gtest.h>

#include <filesystem>

#include "coli/base/files.h"
#include "coli/base/text.h"
#include "coli/probe/fleet.h"
#include "coli/probe/profile_io.h"

namespace coli {
namespace {

SampleStats stats(double worst, double median, double best, int samples) {
  return SampleStats{samples, median, best, worst, (best - worst) / median};
}

// A made-up two-kind machine with every optional part present.
DeviceProfile sample_profile() {
  DeviceProfile p;
  p.provenance = {"0.1.0", "GNU 12.2.0 Release", "2026-11-29T18:00:00Z", "box", "full", 12.625, {"hwloc:live", "x"}};
  CpuFacts& cpu = p.cpu;
  cpu.arch = "x86_64";
  cpu.vendor = "GenuineIntel";
  cpu.model = "Made-up Core i9 \"quoted\"";
  cpu.packages = 1;
  cpu.cores = 6;
  cpu.pus = 8;
  cpu.kinds = {CpuKind{0, 0, "IntelAtom", 3000, 0, CpuSet({4, 5, 6, 7}), 4,
                       {CpuSet({4}), CpuSet({5}), CpuSet({6}), CpuSet({7})}},
               CpuKind{1, 1, "IntelCore", 5500, 0, CpuSet({0, 1, 2, 3}), 2, {CpuSet({0, 2}), CpuSet({1, 3})}}};
  cpu.caches = {CacheInfo{2, "unified", 1, 2u << 20, 64, 1, 2}, CacheInfo{3, "unified", 0, 36u << 20, 64, 6, 1}};
  cpu.numa_nodes = {NumaNode{0, CpuSet({0, 1, 2, 3, 4, 5, 6, 7}), 32ull << 30}};
  cpu.isa = {"avx2", "fma"};
  cpu.usable = UsableCpus{CpuSet({0, 1, 2, 3, 4, 5}), CpuSet({0, 1, 2, 3, 4, 5, 6, 7}), CpuSet({0, 1, 2, 3, 4, 5}), 5.5};
  cpu.topology_source = "hwloc:live";
  cpu.isa_source = "/proc/cpuinfo";
  MemoryFacts& m = p.memory;
  m.total_bytes = 32ull << 30;
  m.available_bytes = 30ull << 30;
  m.swap_total_bytes = 0;
  m.swap_free_bytes = 0;
  m.cgroup_limit_bytes = 8ull << 30;
  m.cgroup_usage_bytes = 1ull << 30;
  m.cgroup_reclaimable_bytes = 1ull << 28;
  m.headroom_bytes = (7ull << 30) + (1ull << 28);
  m.headroom_source = "cgroup headroom";
  m.sources = {MemorySource{"MemAvailable", 30ull << 30, "/proc/meminfo", true, ""},
               MemorySource{"cgroup headroom", m.headroom_bytes, "/sys/fs/cgroup/memory.max", true, "tightest"}};
  p.measurements.memory = MemoryBandwidth{1ull << 30,
                                          {MemoryBandwidthPoint{"read", -1, 1, CpuSet({0}), stats(30.5, 31.25, 33.0, 5)},
                                           MemoryBandwidthPoint{"triad", 1, 2, CpuSet({0, 2}), stats(60, 61.1, 62.3, 4)}}};
  p.measurements.disk = DiskBandwidth{"/data", "ext4", true, "", 512ull << 20,
                                      {DiskBandwidthPoint{"random", 4u << 20, 8, stats(1.0, 1.1, 1.2, 3)},
                                       DiskBandwidthPoint{kEnginePoolPattern, 16384, 2, stats(0.2, 0.3, 0.4, 3)},
                                       DiskBandwidthPoint{kEnginePoolIdlePattern, 16384, 1, stats(0.05, 0.06, 0.07, 3), 1000}},
                                      4};
  VulkanDevice gpu;
  gpu.name = "Made-up GPU";
  gpu.vendor_id = 0x10de;
  gpu.device_id = 0x2335;
  gpu.type = "discrete";
  gpu.api_version = "1.4.312";
  gpu.driver_version = 2432696320u;
  gpu.uuid = "00112233445566778899aabbccddeeff";
  gpu.max_compute_shared_memory_bytes = 49152;
  gpu.max_workgroup_invocations = 1024;
  gpu.max_workgroup_size = {1024, 1024, 64};
  gpu.max_workgroup_count = {2147483647, 65535, 65535};
  gpu.max_storage_buffer_range = 4294967295ull;
  gpu.subgroup_size = gpu.min_subgroup_size = gpu.max_subgroup_size = 32;
  gpu.subgroup_operations = {"arithmetic", "basic", "shuffle"};
  gpu.heaps = {VulkanMemoryHeap{140ull << 30, true, 130ull << 30, 1ull << 30, false},
               VulkanMemoryHeap{64ull << 30, false, std::nullopt, std::nullopt, false}};
  p.gpus.vulkan = {gpu};
  p.gpus.vulkan_status = "1 device";
  CudaDevice cuda{0, "Made-up GPU", "00112233445566778899aabbccddeeff", 9, 0, 132, 49152, 232448, 233472,
                  60ull << 20, 140ull << 30, 139ull << 30, 13000, {"note"}};
  p.gpus.cuda = {cuda};
  p.gpus.cuda_status = "1 device";
  p.gpus.source = "live";
  p.measurements.gpu_kernels = {
      GpuKernelResult{"Made-up GPU", "vulkan", "gemv_q4_g64_direct", 2048, 1024, 0, true, 1e-6, "", stats(90, 100, 110, 5),
                      0},  // device_index round-trips; the second result has none (an older profile's)
      GpuKernelResult{"Made-up GPU", "vulkan", "gemv_q4_g64_tile64k", 2048, 1024, 65536, false, 0, "needs 65536 B",
                      SampleStats{}},
      // A device-level status line: no variant, no shape (a machine without a CUDA driver).
      GpuKernelResult{"", "cuda", "", 0, 0, 0, false, 0, "no CUDA self-test: no CUDA driver is installed", SampleStats{}}};
  p.threads = ThreadRecommendation{2, 2, CpuSet({0, 2}), CpuSet({0, 2}), "all-but-efficiency-kind", "because"};
  assign_fingerprint(p);
  return p;
}

TEST(ProfileIo, RoundTripsExactly) {
  const DeviceProfile original = sample_profile();
  const std::string text = profile_to_toml(original);
  auto parsed = parse_profile(text, "sample.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\n" << text;
  EXPECT_EQ(*parsed, original);
  EXPECT_EQ(profile_to_toml(*parsed), text);
}

TEST(ProfileIo, RoundTripsThroughAnAtomicallyWrittenFile) {
  const auto path = std::filesystem::temp_directory_path() / ("coli_profile_" + std::to_string(::getpid())) / "p.toml";
  const DeviceProfile original = sample_profile();
  ASSERT_TRUE(save_profile(path, original).ok());
  auto loaded = load_profile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(*loaded, original);
  std::filesystem::remove_all(path.parent_path());
}

TEST(ProfileIo, JsonCarriesTheSameFields) {
  const std::string json = profile_to_json(sample_profile());
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"schema_version\" : " + std::to_string(kDeviceProfileSchemaVersion)), std::string::npos);
  EXPECT_NE(json.find("\"decode_threads\" : 2"), std::string::npos);
}

TEST(ProfileIo, FingerprintIgnoresFreeMemoryAndDatesButNotHardware) {
  DeviceProfile a = sample_profile();
  DeviceProfile b = a;
  b.memory.available_bytes /= 2;
  b.memory.headroom_bytes /= 2;
  b.provenance.created_utc = "2027-01-01T00:00:00Z";
  b.provenance.host = "other";
  assign_fingerprint(b);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  b.cpu.kinds[1].cores = 3;
  assign_fingerprint(b);
  EXPECT_NE(a.fingerprint, b.fingerprint);
}

// Replaces `key = ...` in the first table named `header` ("[threads]").
std::string with_field(std::string text, std::string_view header, std::string_view key, std::string_view value,
                       int* line_number = nullptr) {
  size_t pos = header.empty() ? 0 : text.find("\n" + std::string(header) + "\n");
  EXPECT_NE(pos, std::string::npos) << header;
  pos = text.find("\n" + std::string(key) + " = ", pos);
  EXPECT_NE(pos, std::string::npos) << key;
  if (pos == std::string::npos) return text;
  const size_t start = pos + 1;
  const size_t end = text.find('\n', start);
  if (line_number) *line_number = 1 + static_cast<int>(std::count(text.begin(), text.begin() + start, '\n'));
  return text.replace(start, end - start, value.empty() ? "" : std::string(key) + " = " + std::string(value));
}

struct BadProfile {
  const char* name;
  std::string text;
  std::string expected;  // substring of the error
  int line = 0;          // expected line in the message, 0 = not checked
};

std::vector<BadProfile> bad_profiles() {
  const std::string good = profile_to_toml(sample_profile());
  std::vector<BadProfile> cases;
  auto add = [&](const char* name, std::string_view header, std::string_view key, std::string_view value,
                 std::string expected, bool check_line = true) {
    int line = 0;
    std::string text = with_field(good, header, key, value, &line);
    cases.push_back({name, std::move(text), std::move(expected), check_line ? line : 0});
  };
  add("absurd thread count", "[threads]", "decode_threads", "100000", "'threads.decode_threads' = 100000 is out of range");
  add("negative size", "[memory]", "total_bytes", "-5", "'memory.total_bytes' = -5 is out of range");
  add("future schema", "", "schema_version", std::to_string(kDeviceProfileSchemaVersion + 1),
      "newer than this build understands");
  add("zero schema", "", "schema_version", "0", "'schema_version' = 0 is out of range");
  add("string for a number", "[cpu]", "cores", "\"six\"", "'cpu.cores' must be an integer");
  add("bad CPU list", "[cpu.usable]", "pus", "\"3-1\"", "'cpu.usable.pus' is not a CPU list");
  add("NaN bandwidth", "[[measurements.memory_bandwidth.points]]", "median_gb_per_s", "nan", "must be a finite number");
  add("absurd bandwidth", "[[measurements.disk.points]]", "best_gb_per_s", "1e12", "is out of range");
  add("engine pool of no threads", "[measurements.disk]", "engine_io_threads", "0",
      "'measurements.disk.engine_io_threads' = 0 is out of range");
  add("missing field", "[memory]", "headroom_bytes", "", "'memory.headroom_bytes' is missing", false);
  add("headroom above total", "[memory]", "headroom_bytes", std::to_string(64ull << 30), "exceeds total_bytes", false);
  add("unknown headroom source", "[memory]", "headroom_source", "\"guess\"", "names no entry of memory.sources", false);
  add("PU outside the machine", "[cpu.usable]", "pus", "\"0-9\"", "subset of the machine's PUs", false);
  add("kinds not covering cores", "[cpu]", "cores", "7", "must cover exactly the machine's 7 cores", false);
  add("threads on forbidden PUs", "[threads]", "decode_pus", "\"6-7\"", "PUs 6-7 this process may not use", false);
  add("pus list size mismatch", "[threads]", "prefill_pus", "\"0\"", "one PU per prefill thread", false);
  add("core map not covering the kind", "[[cpu.kinds]]", "core_pus", "[ '4', '5', '6', '6' ]", "'cpu.kinds[0].core_pus' must list");
  add("GPU budget above its heap", "[[gpus.vulkan.heaps]]", "budget_bytes", std::to_string(200ull << 30),
      "exceeds the heap's size_bytes");
  add("absurd shared memory", "[[gpus.vulkan]]", "max_compute_shared_memory_bytes", "1073741824", "is out of range");
  add("subgroup sizes reversed", "[[gpus.vulkan]]", "min_subgroup_size", "64", "exceeds max_subgroup_size", false);
  add("workgroup size not xyz", "[[gpus.vulkan]]", "max_workgroup_size", "[ 1024 ]", "must each hold 3 numbers", false);
  add("CUDA free above total", "[[gpus.cuda]]", "free_memory_bytes", std::to_string(400ull << 30),
      "exceeds total_memory_bytes");
  add("bad mode", "[provenance]", "mode", "\"fast\"", "'provenance.mode' must be", false);
  cases.push_back({"truncated", good.substr(0, good.size() / 2) + "\"unterminated", "not valid TOML", 0});
  cases.push_back({"empty", "", "'schema_version' is missing", 0});
  cases.push_back({"binary junk", std::string("\x7f" "ELF\x02\x01\x01\0\0\0", 10), "not valid TOML", 0});
  return cases;
}

TEST(ProfileIo, RefusesEachBadProfileWithTheFieldNamed) {
  for (const BadProfile& bad : bad_profiles()) {
    SCOPED_TRACE(bad.name);
    auto parsed = parse_profile(bad.text, "bad.toml");
    ASSERT_FALSE(parsed.ok());
    const std::string& message = parsed.error().message;
    EXPECT_NE(message.find("bad.toml:"), std::string::npos) << message;
    EXPECT_NE(message.find(bad.expected), std::string::npos) << message;
    if (bad.line > 0) {
      EXPECT_NE(message.find("bad.toml:" + std::to_string(bad.line) + ":"), std::string::npos) << message;
    }
  }
}

TEST(ProfileIo, GpuRecordsRoundTripOnTheirOwn) {
  const GpuFacts gpus = sample_profile().gpus;
  auto parsed = parse_gpu_record(gpus_to_toml(gpus), "gpus.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, gpus);
  auto broken = parse_gpu_record("[gpus]\nsource = 'x'\n", "gpus.toml");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("'gpus.vulkan_status' is missing"), std::string::npos) << broken.error().message;
}

TEST(ProfileIo, Schema1ProfilesLoadAndSayGpusWereNotProbed) {
  std::string text = profile_to_toml(sample_profile());
  text.replace(text.find("schema_version = " + std::to_string(kDeviceProfileSchemaVersion)),
               std::string("schema_version = 2").size(), "schema_version = 1");
  text.erase(text.find("[gpus]"), text.find("[measurements") - text.find("[gpus]"));
  auto parsed = parse_profile(text, "old.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_TRUE(parsed->gpus.vulkan.empty());
  EXPECT_NE(parsed->gpus.vulkan_status.find("not probed"), std::string::npos);
}

// Schema 3: the tuning phase's points and the upload bandwidths.
DeviceProfile tuned_profile() {
  DeviceProfile p = sample_profile();
  const CpuSet pus = p.threads.decode_pus;
  KernelTuning tuning{"avx2", 512ull << 20, 6.5, "", {}};
  tuning.points.push_back({"expert_q4_decode", 1024, 2048, 1, 24, "kind1:2c", pus.size(), pus, false,
                           stats(9.5, 10.25, 11, 21), stats(380.5, 410, 440, 21)});
  tuning.points.push_back({"expert_q4_prefill", 1024, 2048, 32, 768, "kind1:2c", pus.size(), pus, false,
                           stats(4, 5, 6, 3), stats(1000, 1250, 1500, 3)});
  p.measurements.kernel_tuning = tuning;
  p.measurements.upload_status = "cuda: 1 device; vulkan: 1 device";
  p.measurements.uploads.push_back({"cuda", "NVIDIA H200", 0, 64ull << 20, stats(50, 52.5, 53, 5)});
  p.threads.rule = "measured-kernel-throughput";
  return p;
}

TEST(ProfileIo, KernelTuningAndUploadsRoundTrip) {
  const DeviceProfile original = tuned_profile();
  const std::string text = profile_to_toml(original);
  auto parsed = parse_profile(text, "tuned.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\n" << text;
  EXPECT_EQ(*parsed, original);
  EXPECT_EQ(profile_to_toml(*parsed), text);
  // A v2 file has neither table and still loads.
  auto old = parse_profile(profile_to_toml(sample_profile()), "v2.toml");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_FALSE(old->measurements.kernel_tuning);
  EXPECT_TRUE(old->measurements.uploads.empty());
}

TEST(ProfileIo, RefusesBadTuningFieldsWithTheFieldNamed) {
  const std::string good = profile_to_toml(tuned_profile());
  struct Case { const char* header; const char* key; const char* value; const char* expected; };
  const Case cases[] = {
      {"[[measurements.kernel_tuning.points]]", "threads", "0", "'measurements.kernel_tuning.points[0].threads' = 0 is out of range"},
      {"[[measurements.kernel_tuning.points]]", "pus", "\"0-7\"", "must hold one PU per thread"},
      {"[[measurements.kernel_tuning.points]]", "median_gb_per_s", "1e9", "is out of range"},
      {"[measurements.kernel_tuning.points.tokens_per_s]", "median", "5000", "must lie between worst and best"},
      {"[measurements.kernel_tuning]", "seconds", "-1", "'measurements.kernel_tuning.seconds'"},
      {"[[measurements.uploads.points]]", "block_bytes", "-2", "'measurements.uploads.points[0].block_bytes' = -2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    int line = 0;
    auto parsed = parse_profile(with_field(good, c.header, c.key, c.value, &line), "bad.toml");
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().message.find("bad.toml:"), std::string::npos) << parsed.error().message;
    EXPECT_NE(parsed.error().message.find(c.expected), std::string::npos) << parsed.error().message;
  }
}

// Schema 4: OpenMP's fixed costs per team size.
TEST(ProfileIo, ParallelOverheadRoundTripsAndBadValuesNameTheField) {
  DeviceProfile original = tuned_profile();
  original.measurements.parallel_overhead = ParallelOverhead{2000, {{1, 0.37, 0.21, 1.95, 0.4}, {16, 4.54, 1.48, 4.24, 1.1}}};
  const std::string text = profile_to_toml(original);
  auto parsed = parse_profile(text, "overhead.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\n" << text;
  EXPECT_EQ(*parsed, original);
  EXPECT_EQ(profile_to_toml(*parsed), text);
  // A profile before the 256-byte figure prices every hidden state at its 8 KiB one.
  std::string older = text;
  for (std::size_t at; (at = older.find("broadcast_narrow_us")) != std::string::npos;) older.erase(at, older.find('\n', at) + 1 - at);
  auto before = parse_profile(older, "older.toml");
  ASSERT_TRUE(before.ok()) << before.error().message;
  EXPECT_DOUBLE_EQ(before->measurements.parallel_overhead->points[0].broadcast_narrow_us, 1.95);
  EXPECT_DOUBLE_EQ(before->measurements.parallel_overhead->points[1].broadcast_narrow_us, 4.24);
  // A v3 file (the profiles in profiles/) has no such table and still loads.
  auto v3 = parse_profile(profile_to_toml(tuned_profile()), "v3.toml");
  ASSERT_TRUE(v3.ok()) << v3.error().message;
  EXPECT_FALSE(v3->measurements.parallel_overhead);
  int line = 0;
  auto bad = parse_profile(with_field(text, "[[measurements.parallel_overhead.points]]", "region_us", "-3", &line), "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'measurements.parallel_overhead.points[0].region_us' = -3"), std::string::npos)
      << bad.error().message;
}

// Schema 6: the expert decode batch alone and beside reads, per thread set.
TEST(ProfileIo, ReadInterferenceRoundTripsAndBadValuesNameTheField) {
  DeviceProfile original = tuned_profile();
  const CpuSet first = CpuSet({original.cpu.usable.pus.cpus().front()});
  original.measurements.read_interference =
      ReadInterference{"expert_q4_decode", 1 << 20, 4, true, "", {{"kind0:1c", 1, first, 4, 20.7, 18.5, 0.121, 1150, 790, 0.69}}};
  const std::string text = profile_to_toml(original);
  auto parsed = parse_profile(text, "interference.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\n" << text;
  EXPECT_EQ(*parsed, original);
  EXPECT_EQ(profile_to_toml(*parsed), text);
  // A v5 file has no such table and still loads.
  auto v5 = parse_profile(profile_to_toml(tuned_profile()), "v5.toml");
  ASSERT_TRUE(v5.ok()) << v5.error().message;
  EXPECT_FALSE(v5->measurements.read_interference);
  int line = 0;
  auto bad = parse_profile(with_field(text, "[[measurements.read_interference.points]]", "slowdown", "-2", &line), "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'measurements.read_interference.points[0].slowdown' = -2"), std::string::npos)
      << bad.error().message;
  auto wrong_pus = parse_profile(with_field(text, "[[measurements.read_interference.points]]", "threads", "2", &line), "bad.toml");
  ASSERT_FALSE(wrong_pus.ok());
  EXPECT_NE(wrong_pus.error().message.find("one PU per thread"), std::string::npos) << wrong_pus.error().message;
}

// Schema 5: two CUDA devices with their locality and the link between them.
DeviceProfile two_gpu_profile() {
  DeviceProfile p = sample_profile();
  CudaDevice second = p.gpus.cuda[0];
  second.ordinal = 1;
  second.uuid = "00112233445566778899aabbccddee00";
  p.gpus.cuda.push_back(second);
  const char* buses[] = {"00000000:17:00.0", "00000000:65:00.0"};
  for (int i = 0; i < 2; ++i) {
    CudaDevice& d = p.gpus.cuda[static_cast<std::size_t>(i)];
    d.pci_bus_id = buses[i];
    d.numa_node = 0;
    d.local_cpus = CpuSet({0, 1, 2, 3});
    d.pcie_generation = 5;
    d.pcie_width = 16;
    d.host_link_gbs = 63.008;
  }
  p.gpus.cuda_status = "2 devices";
  p.gpus.topology_status = "NVML: 2 of 2 CUDA devices matched; 1 pair (1 over NVLink)";
  p.gpus.links = {GpuLink{0, 1, "nvlink", 18, 450, true, 391.25, "nvml+measured"}};
  assign_fingerprint(p);
  return p;
}

TEST(ProfileIo, GpuTopologyRoundTripsInProfilesAndGpuRecords) {
  const DeviceProfile original = two_gpu_profile();
  const std::string text = profile_to_toml(original);
  auto parsed = parse_profile(text, "two.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\n" << text;
  EXPECT_EQ(*parsed, original);
  EXPECT_EQ(profile_to_toml(*parsed), text);
  auto record = parse_gpu_record(gpus_to_toml(original.gpus), "gpus.toml");
  ASSERT_TRUE(record.ok()) << record.error().message;
  EXPECT_EQ(*record, original.gpus);
}

TEST(ProfileIo, V4FilesWithoutTopologyReadAsUnknown) {
  std::string text = profile_to_toml(sample_profile());
  for (const char* key : {"pci_bus_id", "numa_node", "local_cpus", "pcie_generation", "pcie_width", "host_link_gbs",
                          "topology_status", "links"}) {
    text = with_field(text, "", key, "");
  }
  auto parsed = parse_profile(text, "v4.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const CudaDevice& d = parsed->gpus.cuda.at(0);
  EXPECT_EQ(d.numa_node, -1);
  EXPECT_TRUE(d.local_cpus.empty());
  EXPECT_EQ(d.pci_bus_id, "");
  EXPECT_EQ(d.host_link_gbs, 0);
  EXPECT_TRUE(parsed->gpus.links.empty());
  EXPECT_EQ(parsed->gpus.topology_status, "");
}

// Schema 7: a fresh page's first touch beside the bandwidth points; files
// before it read as not measured (0), and a broken figure names its field.
TEST(ProfileIo, FreshPageCostRoundTripsAndOlderFilesReadAsNotMeasured) {
  DeviceProfile original = sample_profile();
  original.measurements.memory->fresh_page_us = 14.5;
  const std::string text = profile_to_toml(original);
  auto parsed = parse_profile(text, "fresh.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, original);
  auto older = parse_profile(profile_to_toml(sample_profile()), "older.toml");
  ASSERT_TRUE(older.ok()) << older.error().message;
  EXPECT_EQ(older->measurements.memory->fresh_page_us, 0);
  EXPECT_EQ(profile_to_toml(sample_profile()).find("fresh_page_us"), std::string::npos) << "not measured: not written";
  int line = 0;
  auto bad = parse_profile(with_field(text, "[measurements.memory_bandwidth]", "fresh_page_us", "-1", &line), "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'measurements.memory_bandwidth.fresh_page_us'"), std::string::npos) << bad.error().message;
}

// Profiles written before the engine-pool disk points: none, and no pool size.
TEST(ProfileIo, DiskWithoutEnginePoolPointsReadsAsNoneMeasured) {
  const std::string text = with_field(profile_to_toml(sample_profile()), "[measurements.disk]", "engine_io_threads", "");
  auto parsed = parse_profile(text, "older.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->measurements.disk->engine_io_threads, 0);
  EXPECT_EQ(parse_profile(profile_to_toml(sample_profile()), "now.toml")->measurements.disk->engine_io_threads, 4);
}

TEST(ProfileIo, RefusesBadTopologyWithTheFieldNamed) {
  const std::string good = profile_to_toml(two_gpu_profile());
  struct Case { const char* header; const char* key; const char* value; const char* expected; };
  const Case cases[] = {
      {"[[gpus.links]]", "b", "0", "'gpus.links[0].b' must be greater than a"},
      {"[[gpus.links]]", "b", "5", "'gpus.links[0].b' = 5 is no ordinal of gpus.cuda"},
      {"[[gpus.links]]", "path", "'warp-drive'", "'gpus.links[0].path' = 'warp-drive' is not one of"},
      {"[[gpus.links]]", "nvlinks", "0", "'gpus.links[0].nvlinks' must be above 0 exactly when path is \"nvlink\""},
      {"[[gpus.links]]", "spec_gbs", "nan", "'gpus.links[0].spec_gbs' must be a finite number"},
      {"[[gpus.links]]", "measured_gbs", "1e9", "'gpus.links[0].measured_gbs' = 1000000000.000000 is out of range"},
      {"[[gpus.links]]", "peer_access", "1", "'gpus.links[0].peer_access' must be true or false"},
      {"[[gpus.cuda]]", "numa_node", "-2", "'gpus.cuda[0].numa_node' = -2 is out of range"},
      {"[[gpus.cuda]]", "local_cpus", "'5-1'", "'gpus.cuda[0].local_cpus' is not a CPU list"},
      {"[[gpus.cuda]]", "pcie_width", "3", "'gpus.cuda[0].pcie_width' = 3 is not a PCIe link width"},
      {"[[gpus.cuda]]", "pcie_generation", "9", "'gpus.cuda[0].pcie_generation' = 9 is out of range"},
      {"[[gpus.cuda]]", "host_link_gbs", "-1", "'gpus.cuda[0].host_link_gbs'"},
      {"[[gpus.cuda]]", "pci_bus_id", "'18:00.0'", "'gpus.cuda[0].pci_bus_id' = '18:00.0' is not a PCI address"},
      {"[[gpus.cuda]]", "local_cpus", "'0-63'", "local_cpus 0-63 of CUDA device 0 are not all among the machine's PUs"},
      {"[[gpus.cuda]]", "numa_node", "3", "numa_node 3 of CUDA device 0 is not a NUMA node of cpu.numa_nodes"},
      {"[[gpus.cuda]]", "ordinal", "1", "'gpus.cuda' lists ordinal 1 twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    auto parsed = parse_profile(with_field(good, c.header, c.key, c.value), "bad.toml");
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.error().message.find("bad.toml:"), std::string::npos) << parsed.error().message;
    EXPECT_NE(parsed.error().message.find(c.expected), std::string::npos) << parsed.error().message;
  }
  // The same pair twice.
  const std::string links = good.substr(good.find("[[gpus.links]]"));
  const std::string one_link = links.substr(0, links.find("\n\n") + 1);
  std::string twice = good;
  twice.insert(twice.find("[[gpus.links]]"), one_link + "\n");
  auto parsed = parse_profile(twice, "bad.toml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message.find("'gpus.links[1].a' repeats the pair 0-1"), std::string::npos) << parsed.error().message;
}

// Wiring is identity (a multi-GPU plan depends on it); bus ids and bandwidths are not.
TEST(ProfileIo, FingerprintHasLinkPathsAndNumaNodesNotBandwidthsOrBusIds) {
  const DeviceProfile a = two_gpu_profile();
  DeviceProfile same = a;
  same.gpus.links[0].measured_gbs = 120;
  same.gpus.links[0].spec_gbs = 300;
  same.gpus.cuda[1].pci_bus_id = "00000000:b3:00.0";
  assign_fingerprint(same);
  EXPECT_EQ(same.fingerprint, a.fingerprint);
  DeviceProfile pcie = a;
  pcie.gpus.links[0] = GpuLink{0, 1, "cross-socket", 0, 63.008, true, 0, "nvml"};
  assign_fingerprint(pcie);
  EXPECT_NE(pcie.fingerprint, a.fingerprint);
  DeviceProfile far = a;
  far.gpus.cuda[1].numa_node = 1;
  assign_fingerprint(far);
  EXPECT_NE(far.fingerprint, a.fingerprint);
  // One GPU: its topology stays out, so one-GPU fingerprints are what they were before schema 5.
  DeviceProfile one = sample_profile();
  one.gpus.cuda[0].numa_node = 0;
  assign_fingerprint(one);
  EXPECT_EQ(one.fingerprint, sample_profile().fingerprint);
  EXPECT_EQ(one.fingerprint_basis.find("cuda_links"), std::string::npos);
}

TEST(ProfileIo, FleetClassHasTheWiringOfTwoOrMoreGpus) {
  DeviceProfile a = two_gpu_profile();
  fleet::assign_identity(a, "catalogue");
  EXPECT_NE(a.identity.class_basis.find("gpus.links[0-1]=nvlinkx18"), std::string::npos) << a.identity.class_basis;
  EXPECT_NE(a.identity.class_basis.find("gpus.cuda[1].numa_node=0"), std::string::npos) << a.identity.class_basis;
  DeviceProfile measured_elsewhere = two_gpu_profile();
  measured_elsewhere.gpus.links[0].measured_gbs = 100;
  measured_elsewhere.gpus.cuda[0].pci_bus_id = "00000000:18:00.0";
  fleet::assign_identity(measured_elsewhere, "catalogue");
  EXPECT_EQ(measured_elsewhere.identity.equivalence_class, a.identity.equivalence_class);
  DeviceProfile bridged_less = two_gpu_profile();
  bridged_less.gpus.links[0].nvlinks = 12;
  fleet::assign_identity(bridged_less, "catalogue");
  EXPECT_NE(bridged_less.identity.equivalence_class, a.identity.equivalence_class);
  DeviceProfile one = sample_profile();
  fleet::assign_identity(one, "catalogue");
  EXPECT_EQ(one.identity.class_basis.find("numa_node"), std::string::npos);
  EXPECT_EQ(one.identity.class_basis.find("gpus.links"), std::string::npos);
}

TEST(ProfileIo, MissingFileSaysHowToCreateOne) {
  auto loaded = load_profile("/nonexistent/coli/device-profile.toml");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message.find("/nonexistent/coli/device-profile.toml"), std::string::npos);
  EXPECT_NE(loaded.error().message.find("coli-probe"), std::string::npos);
}

}  // namespace
}  // namespace coli
