// coli-probe: measure this machine once and write its device profile.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>

#include "coli/base/text.h"
#include "coli/cli/command_line.h"
#include "coli/probe/fleet_machine.h"
#include "coli/probe/probe.h"
#include "coli/probe/profile_io.h"
#include "gpu/cuda_upload.h"
#include "vulkan/gpu_selftest.h"
#ifdef COLI_HAS_CUDA_SELFTEST
#include "cuda/cuda_selftest.h"
#endif
#include "vulkan/upload_bandwidth.h"

namespace {

namespace fs = std::filesystem;
using coli::DeviceProfile;

std::string kinds_line(const coli::CpuFacts& cpu) {
  std::string line;
  for (const auto& kind : cpu.kinds) {
    if (!line.empty()) line += "; ";
    line += "rank " + std::to_string(kind.rank) + (kind.core_type.empty() ? "" : " " + kind.core_type) + ": " +
            std::to_string(kind.cores) + " cores, PUs " + kind.pus.to_list();
    if (kind.frequency_max_mhz > 0) line += ", " + std::to_string(kind.frequency_max_mhz) + " MHz";
  }
  return line;
}

void print_bandwidth(const coli::MemoryBandwidth& bandwidth) {
  std::map<std::pair<std::string, int>, std::string> rows;  // (kernel, kind) -> "1t 38.1, 2t 71.0"
  for (const auto& point : bandwidth.points) {
    char cell[48];
    std::snprintf(cell, sizeof cell, "%dt %.1f", point.threads, point.gb_per_s.median);
    auto& row = rows[{point.kernel, point.kind_rank}];
    row += (row.empty() ? "" : ", ") + std::string(cell);
  }
  for (const auto& [key, row] : rows) {
    const std::string where = key.second < 0 ? "all kinds" : "kind " + std::to_string(key.second);
    std::printf("  %-6s %-10s GB/s: %s\n", key.first.c_str(), where.c_str(), row.c_str());
  }
}

void print_disk(const coli::DiskBandwidth& disk) {
  std::printf("  disk at %s (%s, %s%s)\n", disk.directory.c_str(), disk.filesystem.c_str(),
              disk.direct_io ? "O_DIRECT" : "buffered", disk.note.empty() ? "" : ("; " + disk.note).c_str());
  std::map<std::pair<std::string, std::uint64_t>, std::string> rows;
  for (const auto& point : disk.points) {
    char cell[64];
    if (point.idle_us > 0 && point.gb_per_s.median > 0)  // engine_pool_idle: the read's time after the pool's idle time
      std::snprintf(cell, sizeof cell, "%.2f ms idle: %.1f us", point.idle_us / 1e3,
                    static_cast<double>(point.block_bytes) / point.gb_per_s.median / 1e3);
    else
      std::snprintf(cell, sizeof cell, "qd%d %.2f", point.queue_depth, point.gb_per_s.median);
    auto& row = rows[{point.pattern, point.block_bytes}];
    row += (row.empty() ? "" : ", ") + std::string(cell);
  }
  for (const auto& [key, row] : rows) {
    const bool idle = key.first == coli::kEnginePoolIdlePattern;
    std::printf("  %-10s %8s %s: %s\n", key.first.c_str(), coli::format_bytes(key.second).c_str(), idle ? "read" : "GB/s",
                row.c_str());
  }
}

// Where each CUDA device hangs off, and every pair's path (schema 5).
void print_topology(const coli::GpuFacts& gpus) {
  if (gpus.topology_status.empty() && gpus.links.empty()) return;
  std::printf("topology  %s\n", gpus.topology_status.c_str());
  for (const auto& gpu : gpus.cuda) {
    if (gpu.pci_bus_id.empty() && gpu.numa_node < 0) continue;
    std::printf("  GPU %d: bus %s, NUMA node %d, local CPUs %s, PCIe gen %d x%d (%.1f GB/s per direction)\n", gpu.ordinal,
                gpu.pci_bus_id.empty() ? "?" : gpu.pci_bus_id.c_str(), gpu.numa_node,
                gpu.local_cpus.empty() ? "?" : gpu.local_cpus.to_list().c_str(), gpu.pcie_generation, gpu.pcie_width,
                gpu.host_link_gbs);
  }
  for (const auto& link : gpus.links) {
    const std::string measured = link.measured_gbs > 0 ? "measured " + coli::format_fixed(link.measured_gbs, 1) + " GB/s" : "not measured";
    std::printf("  GPU %d <-> %d: %s%s, spec %.1f GB/s per direction, %s, peer access %s\n", link.a, link.b,
                link.path.c_str(), link.nvlinks > 0 ? (" x" + std::to_string(link.nvlinks)).c_str() : "", link.spec_gbs,
                measured.c_str(), link.peer_access ? "yes" : "no");
  }
}

void print_gpus(const coli::GpuFacts& gpus) {
  std::printf("Vulkan    %s\n", gpus.vulkan_status.c_str());
  for (const auto& gpu : gpus.vulkan) {
    std::printf("  %s (%s, %s, API %s): shared memory %u B, subgroup %u (%u-%u), %zu heap(s)%s\n", gpu.name.c_str(),
                gpu.type.c_str(), gpu.driver_name.empty() ? "driver ?" : gpu.driver_name.c_str(),
                gpu.api_version.c_str(), gpu.max_compute_shared_memory_bytes, gpu.subgroup_size, gpu.min_subgroup_size,
                gpu.max_subgroup_size, gpu.heaps.size(), gpu.unified_memory ? ", unified memory" : "");
  }
  std::printf("CUDA      %s\n", gpus.cuda_status.c_str());
  for (const auto& gpu : gpus.cuda) {
    std::printf("  %s: sm_%d%d, %d SMs, shared memory %u B/block (opt-in %u), %s total, %s free\n", gpu.name.c_str(),
                gpu.compute_capability_major, gpu.compute_capability_minor, gpu.sm_count, gpu.shared_memory_per_block,
                gpu.shared_memory_per_block_optin, coli::format_bytes(gpu.total_memory_bytes).c_str(),
                coli::format_bytes(gpu.free_memory_bytes).c_str());
    for (const auto& note : gpu.notes) std::printf("    note: %s\n", note.c_str());
  }
  print_topology(gpus);
}

void print_summary(const DeviceProfile& p, const std::string& written_to) {
  const auto& cpu = p.cpu;
  const auto& memory = p.memory;
  std::printf("coli-probe %s: %s profile in %.2f s -> %s\n", p.provenance.probe_version.c_str(),
              p.provenance.mode.c_str(), p.provenance.probe_seconds, written_to.c_str());
  std::printf("CPU       %s (%s), %d package(s), %d cores, %d PUs%s\n", cpu.model.c_str(), cpu.arch.c_str(),
              cpu.packages, cpu.cores, cpu.pus, cpu.smt() ? " (SMT)" : "");
  std::printf("kinds     %s\n", kinds_line(cpu).c_str());
  std::string isa;
  for (const auto& flag : cpu.isa) isa += flag + " ";
  std::printf("ISA       %s\n", isa.empty() ? "(unknown)" : isa.c_str());
  std::printf("usable    PUs %s (affinity %s; cgroup cpuset %s; quota %s)\n", cpu.usable.pus.to_list().c_str(),
              cpu.usable.affinity.to_list().c_str(),
              cpu.usable.cgroup_cpuset ? cpu.usable.cgroup_cpuset->to_list().c_str() : "none",
              cpu.usable.quota_cpus ? std::to_string(*cpu.usable.quota_cpus).c_str() : "none");
  std::printf("memory    total %s, available %s, headroom %s (from %s)\n", coli::format_bytes(memory.total_bytes).c_str(),
              coli::format_bytes(memory.available_bytes).c_str(), coli::format_bytes(memory.headroom_bytes).c_str(),
              memory.headroom_source.c_str());
  for (const auto& source : memory.sources) {
    std::printf("  %-12s %-32s %10s  %s\n", source.believed ? "believed" : "NOT believed", source.name.c_str(),
                coli::format_bytes(source.bytes).c_str(), source.note.c_str());
  }
  std::printf("threads   decode %d on PUs %s, prefill %d on PUs %s\n", p.threads.decode_threads,
              p.threads.decode_pus.to_list().c_str(), p.threads.prefill_threads,
              p.threads.prefill_pus.to_list().c_str());
  std::printf("  rule %s: %s\n", p.threads.rule.c_str(), p.threads.reason.c_str());
  print_gpus(p.gpus);
  if (p.measurements.memory) {
    std::printf("bandwidth buffers of %s per array\n", coli::format_bytes(p.measurements.memory->buffer_bytes).c_str());
    print_bandwidth(*p.measurements.memory);
  }
  if (p.measurements.disk) print_disk(*p.measurements.disk);
  if (!p.measurements.gpu_kernels.empty()) {
    std::printf("GPU self-test\n%s", coli::vulkan::format_selftest_table(p.measurements.gpu_kernels).c_str());
  }
  std::printf("fingerprint %s\n", p.fingerprint.c_str());
}

// --validate: every file must parse and pass every field check.
int validate_profiles(const std::vector<std::string>& paths) {
  int invalid = 0;
  for (const std::string& path : paths) {
    auto text = coli::read_text_file(path);  // fields, bounds, identity and an export's checksum
    auto profile = text ? coli::fleet::verify_shared_profile(*text, path) : coli::Result<DeviceProfile>(text.error());
    if (profile) {
      std::printf("%s: valid (schema %d, %s, %s)\n", path.c_str(), profile->schema_version,
                  profile->fingerprint.c_str(), profile->provenance.mode.c_str());
    } else {
      std::fprintf(stderr, "coli-probe: %s\n", profile.error().message.c_str());
      ++invalid;
    }
  }
  return invalid == 0 ? coli::cli::kExitOk : coli::cli::kExitError;
}

// Where this run's profile goes. An explicit --out is obeyed. The default
// location holds the machine's profile that coli-plan and coli run find: a
// replay (another machine's facts) never writes there, and a quick probe
// (facts only) never replaces a full one there; it goes beside it instead.
coli::Result<std::string> output_path(const std::string& out, bool out_given, const coli::DeviceProfile& profile,
                                      bool replay) {
  if (out_given || out == "-") return out;
  if (replay) {
    return coli::make_error("a replay describes another machine and writes nothing to this machine's default profile " +
                            out + ": give --out FILE (or --out - for stdout)");
  }
  if (profile.provenance.mode != "full" && fs::exists(out)) {
    auto existing = coli::load_profile(out);
    if (existing && existing->provenance.mode == "full") {
      const std::string beside = (fs::path(out).parent_path() / "device-profile.quick.toml").string();
      std::fprintf(stderr, "coli-probe: %s holds a full (measured) profile, which a quick probe never replaces: "
                   "writing %s instead (--out %s replaces it on purpose)\n", out.c_str(), beside.c_str(), out.c_str());
      return beside;
    }
  }
  return out;
}

// The command line's choices beside coli::ProbeOptions.
struct ProbeArgs {
  coli::ProbeOptions options;
  std::string out = coli::default_profile_path().string();
  bool out_given = false;
  bool json = false;
  std::string tuning_pool;
  std::string replay_root, replay_xml, replay_sysctl, replay_machine, replay_gpus;
  std::vector<std::string> validate;
  bool gpu_selftest = false;
  coli::vulkan::SelftestOptions selftest;

  bool replay() const {
    return !replay_machine.empty() || !replay_root.empty() || !replay_xml.empty() || !replay_sysctl.empty() ||
           !replay_gpus.empty();
  }
};

void add_options(CLI::App& app, ProbeArgs& a) {
  app.add_option("--out", a.out, "Where to write the profile ('-' = stdout: TOML, or JSON with --json)")->capture_default_str();
  app.add_flag("--quick", a.options.quick, "Facts only: skip the bandwidth measurements");
  app.add_flag("--json", a.json, "Print the profile as JSON on stdout instead of the summary");
  app.add_option("--disk-dir", a.options.disk_dir,
                 "Directory on the filesystem that holds your models (one that cannot be measured is an error)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--budget", a.options.budget_seconds,
                 "Upper bound for all measurements, in seconds (default: 25, and kernel tuning at least 4 s per candidate "
                 "thread set)")
      ->check(CLI::Range(2.0, 3600.0))
      ->capture_default_str();
  app.add_option("--tuning-pool", a.tuning_pool,
                 "Test weights the kernel tuning cycles through, e.g. 1G (default: 16x the last-level cache within "
                 "1 GiB..4 GiB, at most an eighth of the memory headroom)");
  app.add_option("--replay-root", a.replay_root, "Read /proc and /sys below this recorded tree")
      ->check(CLI::ExistingDirectory);
  app.add_option("--replay-hwloc-xml", a.replay_xml, "Read the CPU topology from this hwloc XML file")
      ->check(CLI::ExistingFile);
  app.add_option("--replay-sysctl", a.replay_sysctl, "Read a recorded macOS sysctl listing instead of hwloc")
      ->check(CLI::ExistingFile);
  app.add_option("--replay-gpus", a.replay_gpus, "Read recorded GPU facts (a [gpus] TOML file) instead of the live GPUs")
      ->check(CLI::ExistingFile);
  app.add_option("--replay-machine", a.replay_machine,
                 "A recorded machine directory (topology.xml, sysctl.txt, root/), e.g. tests/fixtures/machines/*")
      ->check(CLI::ExistingDirectory);
  app.add_flag("--gpu-selftest", a.gpu_selftest,
               "Run every GEMV shader variant that fits each Vulkan device against the CPU reference and time it");
  app.add_option("--gpu-selftest-budget", a.selftest.time_budget_seconds, "Seconds of timing for the self-test")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  app.add_option("--gpu-shared-memory-limit", a.selftest.shared_memory_limit_bytes,
                 "Pretend each GPU allows at most this many bytes of shared memory in the self-test")
      ->check(CLI::Range(1024u, 1u << 24));
  app.add_option("--validate", a.validate, "Check existing profile files and exit (nothing is probed)");
  app.footer("Exit status: 0 done, 1 error (probe failed, profile invalid, file not written), 2 usage.");
}

// The options the parsed flags imply (replays, the tuning pool, progress on a terminal); false after
// printing why when --tuning-pool is no size in range.
bool finish_options(const CLI::App& app, ProbeArgs& a) {
  coli::ProbeOptions& options = a.options;
  options.disk_dir_given = app.count("--disk-dir") > 0;
  options.budget_given = app.count("--budget") > 0;
  a.out_given = app.count("--out") > 0;
  if (!a.tuning_pool.empty()) {
    const auto bytes = coli::parse_size(a.tuning_pool);
    if (!bytes || *bytes < (32ull << 20) || *bytes > (1ull << 40)) {
      std::fprintf(stderr, "coli-probe: --tuning-pool '%s' is not a size between 32M and 1T (e.g. 1G)\n", a.tuning_pool.c_str());
      return false;
    }
    options.tuning_pool_bytes = *bytes;
  }
  if (!a.replay_machine.empty()) coli::apply_replay_machine(a.replay_machine, options);
  if (!a.replay_root.empty()) options.root = coli::SystemRoot(a.replay_root);
  if (!a.replay_xml.empty()) options.hwloc_xml = a.replay_xml;
  if (!a.replay_sysctl.empty()) options.sysctl_file = a.replay_sysctl;
  if (!a.replay_gpus.empty()) options.gpu_record = a.replay_gpus;
  if (::isatty(STDERR_FILENO)) {
    options.progress = [](std::string_view line) { std::cerr << "coli-probe: " << line << "\n"; };
  }
  return true;
}

// What the probe could not do as asked, on stderr: an unmeasured disk, a tuning phase that fell back to
// the tier rule, what a replay's recording lacks.
void report_shortfalls(const DeviceProfile& profile) {
  if (const auto& disk = profile.measurements.disk; disk && disk->points.empty()) {
    std::fprintf(stderr, "coli-probe: disk bandwidth %s (recorded in the profile; --disk-dir DIR measures another)\n",
                 disk->note.c_str());
  }
  if (profile.measurements.kernel_tuning && profile.threads.reason.find(coli::kTuningFallback) != std::string::npos) {
    std::fprintf(stderr, "coli-probe: threads: %s\n", profile.threads.reason.c_str());
  }
  for (const std::string& source : profile.provenance.sources) {
    if (source.rfind("not recorded:", 0) == 0) std::fprintf(stderr, "coli-probe: replay: %s\n", source.c_str());
  }
}

// A full probe's host-to-device upload bandwidth (5% of the budget) and, asked for, the GPU self-test.
void measure_gpus(DeviceProfile& profile, const ProbeArgs& a) {
  const coli::ProbeOptions& options = a.options;
  if (profile.provenance.mode == "full") {
    if (options.progress) options.progress("GPU upload bandwidth (Vulkan, CUDA)");
    constexpr std::size_t kUploadBlock = 64u << 20;
    auto vulkan = coli::vulkan::measure_vulkan_uploads(kUploadBlock, options.budget_seconds * 0.025);
    auto cuda = coli::probe::measure_cuda_uploads(kUploadBlock, options.budget_seconds * 0.025);
    auto& m = profile.measurements;
    m.upload_status = vulkan.status + "; " + cuda.status;
    m.uploads = std::move(vulkan.points);
    m.uploads.insert(m.uploads.end(), cuda.points.begin(), cuda.points.end());
  }
  if (a.gpu_selftest) {
    if (options.progress) options.progress("GPU self-test: running every fitting shader variant");
    profile.measurements.gpu_kernels = coli::vulkan::run_gpu_selftest(a.selftest);
#ifdef COLI_HAS_CUDA_SELFTEST
    if (options.progress) options.progress("GPU self-test: the CUDA decoder's matvec on each CUDA device");
    for (coli::GpuKernelResult& r : coli::cuda::run_cuda_selftest()) profile.measurements.gpu_kernels.push_back(std::move(r));
#endif
  }
}

// The summary's measurement lines: tuning, reads beside compute, uploads.
void print_measurements(const DeviceProfile& profile) {
  if (const auto& tuning = profile.measurements.kernel_tuning) {
    std::printf("tuning      %zu kernel points in %.1f s (%s)%s%s\n", tuning->points.size(), tuning->seconds,
                tuning->cpu_kernel.c_str(), tuning->note.empty() ? "" : "; ", tuning->note.c_str());
  }
  if (const auto& reads = profile.measurements.read_interference) {
    std::string sets;
    for (const auto& p : reads->points)
      sets += (sets.empty() ? "" : ", ") + coli::format_fixed(100 * p.slowdown, 0) + "% on " + p.thread_set;
    std::printf("reads       %s slower by %s with a %s %s read in flight%s%s\n", reads->kernel.c_str(), sets.c_str(),
                coli::format_bytes(reads->block_bytes).c_str(), reads->direct_io ? "O_DIRECT" : "buffered",
                reads->note.empty() ? "" : "; ", reads->note.c_str());
  }
  if (!profile.measurements.upload_status.empty()) {
    std::printf("uploads     %s\n", profile.measurements.upload_status.c_str());
    for (const auto& u : profile.measurements.uploads) {
      std::printf("  %-6s %d %s: %.2f GB/s (median of %d, spread %.2f)\n", u.backend.c_str(), u.device_index,
                  u.device.c_str(), u.gb_per_s.median, u.gb_per_s.samples, u.gb_per_s.spread);
    }
  }
}

// The profile to its destination (output_path) or stdout, then the summary or JSON.
int write_profile(const DeviceProfile& profile, const ProbeArgs& a) {
  auto destination = output_path(a.out, a.out_given, profile, a.replay());
  if (!destination) {
    std::fprintf(stderr, "coli-probe: %s\n", destination.error().message.c_str());
    return coli::cli::kExitUsage;
  }
  const std::string out = *destination;
  // A shared profile of this class (COLI_PROFILE_PATH, user and system dirs): say so.
  const std::string shared_match = coli::fleet::describe_class_match(profile, out == "-" ? fs::path() : fs::path(out));
  if (out == "-") {  // the format --json asks for, else TOML
    std::fputs((a.json ? coli::profile_to_json(profile) : coli::profile_to_toml(profile)).c_str(), stdout);
    std::fprintf(stderr, "coli-probe: %s\n", shared_match.c_str());
    return 0;
  }
  if (auto saved = coli::save_profile(out, profile); !saved) {
    std::fprintf(stderr, "coli-probe: %s (choose another place with --out)\n", saved.error().message.c_str());
    return coli::cli::kExitError;
  }
  if (a.json) {
    std::fputs(coli::profile_to_json(profile).c_str(), stdout);
    return 0;
  }
  print_summary(profile, out);
  print_measurements(profile);
  std::printf("class       %s\n%s\n", profile.identity.equivalence_class.c_str(), shared_match.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coli-probe: measure this machine and write its device profile (TOML)"};
  ProbeArgs a;
  add_options(app, a);
  coli::cli::add_version_flag(app, "coli-probe");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;
  if (!a.validate.empty()) return validate_profiles(a.validate);
  if (!finish_options(app, a)) return coli::cli::kExitUsage;

  auto profile = coli::run_probe(a.options);
  if (!profile) {
    std::fprintf(stderr, "coli-probe: %s\n", profile.error().message.c_str());
    return coli::cli::kExitError;
  }
  report_shortfalls(*profile);
  coli::fleet::assign_identity(*profile, coli::fleet::kernel_catalogue_digest());  // docs/fleet.md
  measure_gpus(*profile, a);
  return write_profile(*profile, a);
}
