// run_probe: facts from replayable sources, then (full mode) measurements,
// then the thread recommendation, provenance and fingerprint.
#include "coli/base/clock.h"
#include "coli/base/expert_io.h"
#include "coli/base/text.h"
#include "coli/probe/probe.h"
#include "coli/probe/profile_io.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "cpu/apple_perflevels.h"
#include "cpu/hwloc_topology.h"
#include "cpu/isa_flags.h"
#include "cpu/thread_rule.h"
#include "cpu/usable_cpus.h"
#include "gpu/cuda_peer.h"
#include "gpu/cuda_probe.h"
#include "gpu/gpu_topology.h"
#include "gpu/nvml_probe.h"
#include "gpu/vulkan_probe.h"
#include "measure/disk_bandwidth.h"
#include "measure/kernel_tuning.h"
#include "measure/memory_bandwidth.h"
#include "measure/parallel_overhead.h"
#include "measure/read_interference.h"
#include "measure/retime.h"
#include "memory/memory_facts.h"

namespace coli {
namespace {

// One peer copy: large enough that launch cost vanishes against NVLink's ~450 GB/s.
constexpr std::size_t kPeerCopyBytes = std::size_t{256} << 20;

namespace fs = std::filesystem;

void report(const ProbeOptions& options, std::string_view line) {
  if (options.progress) options.progress(line);
}

std::string host_name() {
  char buffer[256] = {};
  return ::gethostname(buffer, sizeof buffer - 1) == 0 ? buffer : "";
}

// CPU facts and memory facts from sysctl text (macOS, live or recorded).
Status read_sysctl_machine(const std::string& text, const std::string& source, DeviceProfile& profile) {
  auto cpu = probe::cpu_facts_from_sysctl(text, source);
  if (!cpu) return cpu.error();
  profile.cpu = std::move(*cpu);
  const auto memsize = probe::memsize_from_sysctl(text);
  if (!memsize) return make_error(source + ": hw.memsize is missing; record it with `sysctl hw.memsize`");
  profile.memory = probe::memory_facts_from_total(*memsize, source + " hw.memsize");
  return Ok{};
}

// Where a replay finds a recorded /proc or /sys file: below its recorded
// root; a replay without one reads nothing (never this machine's /proc).
struct ReplayFiles {
  const ProbeOptions& options;
  bool replay() const { return is_replay(options); }
  bool nothing_recorded() const { return replay() && options.root.is_live(); }
  std::optional<std::string> read(std::string_view absolute) const {
    if (nothing_recorded()) return std::nullopt;
    return options.root.read(absolute);
  }
  std::string path(std::string_view absolute) const {
    if (!options.root.is_live() || !replay()) return options.root.map(absolute).string();
    const fs::path dir = options.replay_machine.value_or(fs::path("<recording>")) / "root";
    return (dir / std::string(absolute.substr(1))).string();
  }
  // The provenance line of a fact this recording lacks.
  std::string not_recorded(std::string_view absolute, std::string_view consequence) const {
    return "not recorded: " + path(absolute) + " (" + std::string(consequence) + ")";
  }
};

// The topology's NUMA total stands in for memory when /proc/meminfo was not
// recorded; a topology without one cannot say how much memory the machine has.
Result<MemoryFacts> replay_memory_without_meminfo(const ReplayFiles& files, const CpuFacts& cpu,
                                                  std::uint64_t numa_total, std::vector<std::string>& unknown) {
  if (numa_total == 0) {
    return make_error("the replay cannot know the recorded machine's memory: " + files.path("/proc/meminfo") +
                      " was not recorded and " + cpu.topology_source +
                      " records no NUMA memory; record the machine with tools/fixtures/capture_machine.sh");
  }
  unknown.push_back(files.not_recorded("/proc/meminfo", "memory is the topology's NUMA total; availability and "
                                                        "cgroup limits are unknown"));
  return probe::memory_facts_from_total(numa_total, cpu.topology_source + " NUMA total");
}

// CPU facts through hwloc plus /proc and /sys (Linux, live or recorded).
// `unknown` collects what a replay's recording lacks (provenance says so).
Status read_linux_machine(const ProbeOptions& options, DeviceProfile& profile, std::vector<std::string>& unknown) {
  auto cpu = probe::read_hwloc_topology(options.hwloc_xml);
  if (!cpu) return cpu.error();
  profile.cpu = std::move(*cpu);
  const ReplayFiles files{options};
  if (const auto cpuinfo = files.read("/proc/cpuinfo")) {
    profile.cpu.isa = probe::isa_from_cpuinfo(*cpuinfo);
    profile.cpu.isa_source = files.path("/proc/cpuinfo");
  } else {
    profile.cpu.isa_source = "unknown (" + files.path("/proc/cpuinfo") + (files.replay() ? " not recorded)" : " unreadable)");
    if (files.replay()) unknown.push_back(files.not_recorded("/proc/cpuinfo", "ISA unknown: the scalar kernel"));
  }
  CpuSet machine_pus;
  for (const CpuKind& kind : profile.cpu.kinds) machine_pus = machine_pus.unite(kind.pus);
  if (files.nothing_recorded()) {
    profile.cpu.usable.pus = profile.cpu.usable.affinity = machine_pus;
  } else {
    profile.cpu.usable = probe::read_usable_cpus(options.root, machine_pus);
  }
  if (files.replay() && !files.read("/proc/self/status")) {
    unknown.push_back(files.not_recorded("/proc/self/status", "affinity unknown: all " +
                                                                  std::to_string(machine_pus.size()) +
                                                                  " PUs of the topology assumed allowed"));
  }
  if (files.replay() && !files.read("/proc/self/cgroup")) {
    unknown.push_back(files.not_recorded("/proc/self/cgroup", "cgroup cpuset, CPU quota and memory limit unknown"));
  }

  std::uint64_t numa_total = 0;
  for (const NumaNode& node : profile.cpu.numa_nodes) numa_total += node.memory_bytes;
  if (files.replay() && !files.read("/proc/meminfo")) {
    auto memory = replay_memory_without_meminfo(files, profile.cpu, numa_total, unknown);
    if (!memory) return memory.error();
    profile.memory = std::move(*memory);
    return Ok{};
  }
  auto memory = probe::read_memory_facts(
      options.root, numa_total > 0 ? std::optional<std::uint64_t>(numa_total) : std::nullopt);
  if (!memory) return memory.error();
  profile.memory = std::move(*memory);
  return Ok{};
}

// A replay describes another machine, so its CPU must be recorded too:
// recorded /proc or GPU facts on this machine's topology would mix two machines.
Status check_replay_is_whole(const ProbeOptions& options) {
  if (!is_replay(options) || options.hwloc_xml || options.sysctl_file) return Ok{};
  const std::string recorded = options.replay_machine ? options.replay_machine->string() + " (no topology.xml or sysctl.txt in it)"
                               : !options.root.is_live() ? "the recorded tree " + options.root.prefix().string()
                                                         : "the recorded GPU facts " + options.gpu_record.value_or("").string();
  return make_error("a replay reads only recorded sources, and " + recorded +
                    " lacks the recorded CPU topology: add topology.xml (`lstopo --of xml`) or sysctl.txt, or pass "
                    "--replay-hwloc-xml FILE / --replay-sysctl FILE (tools/fixtures/capture_machine.sh records a machine)");
}

// Where each CUDA device hangs off and how pairs connect: NVML, sysfs
// (below options.root) and the driver's peer-access answers.
void read_live_topology(const ProbeOptions& options, GpuFacts& gpus) {
  if (gpus.cuda.empty()) {
    gpus.topology_status = "no CUDA device: no topology";
    return;
  }
  probe::TopologyFacts topology = probe::topology_from_nvml(probe::read_nvml(), gpus.cuda);
  probe::read_pci_locality(options.root, gpus.cuda);
  gpus.links = std::move(topology.links);
  gpus.topology_status = std::move(topology.status);
  if (const std::string problem = probe::read_peer_access(gpus.links); !problem.empty()) {
    gpus.topology_status += "; " + problem;
  }
}

// sysfs counts every CPU of a device's node, hwloc only those this container
// may see: the profile keeps the visible ones (and a node hwloc knows), noted.
void keep_locality_within_machine(DeviceProfile& profile) {
  CpuSet machine_pus;
  for (const CpuKind& kind : profile.cpu.kinds) machine_pus = machine_pus.unite(kind.pus);
  const auto& nodes = profile.cpu.numa_nodes;
  for (CudaDevice& device : profile.gpus.cuda) {
    const CpuSet outside = device.local_cpus.minus(machine_pus);
    if (!outside.empty()) {
      device.notes.push_back("local CPUs " + outside.to_list() + " are not in the CPU topology (hidden from this process); left out");
      device.local_cpus = device.local_cpus.intersect(machine_pus);
    }
    const bool known = std::any_of(nodes.begin(), nodes.end(), [&](const NumaNode& n) { return n.os_index == device.numa_node; });
    if (device.numa_node >= 0 && !nodes.empty() && !known) {
      device.notes.push_back("NUMA node " + std::to_string(device.numa_node) + " is not in the CPU topology; numa_node = -1");
      device.numa_node = -1;
    }
  }
}

// Live GPUs, a recorded file, or (replaying a CPU-only recording) nothing:
// never this machine's GPUs inside another machine's profile.
Status read_gpus(const ProbeOptions& options, GpuFacts& gpus) {
  if (options.gpu_record) {
    auto text = read_text_file(*options.gpu_record);
    if (!text) return text.error();
    auto recorded = parse_gpu_record(*text, options.gpu_record->string());
    if (!recorded) return recorded.error();
    gpus = std::move(*recorded);
    gpus.source = "replay:" + options.gpu_record->string();
    return Ok{};
  }
  if (is_replay(options)) {
    gpus.vulkan_status = gpus.cuda_status = gpus.topology_status = "not recorded (replaying a machine without a GPU record)";
    gpus.source = "replay";
    return Ok{};
  }
  auto vulkan = probe::probe_vulkan();
  gpus.vulkan_status = std::move(vulkan.status);
  gpus.vulkan = std::move(vulkan.devices);
  auto cuda = probe::probe_cuda();
  gpus.cuda_status = std::move(cuda.status);
  gpus.cuda = std::move(cuda.devices);
  read_live_topology(options, gpus);
  gpus.source = "live";
  return Ok{};
}

// Disk read bandwidth where the models live. A --disk-dir the user named
// that cannot be measured is an error; the default directory failing is
// recorded (a disk entry without points whose note says why) so coli-plan
// can give the real reason instead of "run without --quick".
Status measure_disk(const ProbeOptions& options, DeviceProfile& profile) {
  std::error_code error;
  fs::path directory = fs::absolute(options.disk_dir, error).lexically_normal();
  if (error) directory = options.disk_dir;
  if (!directory.has_filename() && directory.has_parent_path()) directory = directory.parent_path();  // "/a/." -> "/a"
  const probe::DiskBandwidthOptions disk_options{options.budget_seconds * 0.25, 0};
  auto disk = probe::measure_disk_bandwidth(directory, disk_options, options.progress);
  if (disk) {
    profile.measurements.disk = std::move(*disk);
    return Ok{};
  }
  if (options.disk_dir_given) return make_error("--disk-dir " + options.disk_dir.string() + ": " + disk.error().message);
  DiskBandwidth unmeasured;
  unmeasured.directory = directory.string();
  std::string reason = disk.error().message;
  if (reason.rfind("disk bandwidth: ", 0) == 0) reason.erase(0, std::string_view("disk bandwidth: ").size());
  unmeasured.note = kDiskNotMeasured + reason;
  profile.measurements.disk = std::move(unmeasured);
  return Ok{};
}

// Reads beside compute (schema 6): the expert decode batch on the sets the
// tuning phase timed, alone and beside 1 MiB reads of a 64 MiB test file in
// the disk's directory, about a tenth of the budget beside the writing of
// the file and the weights (read_interference_options). Left out, and
// said, without a measured disk or kernel points.
void measure_interference(const ProbeOptions& options, DeviceProfile& profile) {
  const auto& disk = profile.measurements.disk;
  if (!disk || disk->points.empty() || !profile.measurements.kernel_tuning) {
    report(options, "read interference not measured: it needs the disk and kernel tuning phases");
    return;
  }
  const auto sets = probe::timed_thread_sets(profile);
  auto interference_options = probe::read_interference_options(options.budget_seconds, sets.size());
  interference_options.pool_bytes = profile.measurements.kernel_tuning->pool_bytes;  // the weights the kernels read
  auto measured = probe::measure_reads_beside_compute(disk->directory, probe::kInterferenceBlockBytes, kDefaultIoThreads,
                                                      profile.cpu, profile.memory, sets, interference_options,
                                                      options.progress);
  if (measured) profile.measurements.read_interference = std::move(*measured);
  else report(options, "read interference not measured: " + measured.error().message);
}

// Disk first: a --disk-dir that cannot be measured fails before the rest of the budget is spent.
Status measure(const ProbeOptions& options, DeviceProfile& profile) {
  // Shares of the budget: memory 35%, disk 25%, kernel tuning 35% (at 30% a
  // 16-core H200 machine timed 4 of its 5 thread sets: its 8-thread plans were
  // predicted from the 4-thread rates, 30% slow).
  if (auto disk = measure_disk(options, profile); !disk) return disk;
  const probe::MemoryBandwidthOptions memory_options{options.budget_seconds * 0.35, 0};
  auto memory = probe::measure_memory_bandwidth(profile.cpu, profile.memory, memory_options, options.progress);
  if (memory) {
    profile.measurements.memory = std::move(*memory);
  } else {
    report(options, "memory bandwidth not measured: " + memory.error().message);
  }
  probe::KernelTuningOptions tuning_options;
  tuning_options.pool_bytes = options.tuning_pool_bytes;
  const std::size_t sets = probe::tuning_candidates(profile.cpu).size();
  tuning_options.budget_seconds = probe::tuning_budget_seconds(options.budget_seconds, options.budget_given, sets);
  tuning_options.stretch_for_min_rounds = !options.budget_given;
  if (tuning_options.budget_seconds > probe::kTuningShareOfBudget * options.budget_seconds) {
    report(options, "kernel tuning: " + format_fixed(tuning_options.budget_seconds, 1) + " s for " + std::to_string(sets) +
                        " candidate thread sets (" + format_fixed(probe::kTuningSecondsPerSet, 1) +
                        " s each, above 35% of the " + format_fixed(options.budget_seconds, 0) +
                        " s budget; --budget bounds it)");
  }
  auto tuning = probe::measure_kernel_tuning(profile.cpu, profile.memory, tuning_options, options.progress);
  if (tuning) {
    profile.measurements.kernel_tuning = std::move(*tuning);
  } else {
    report(options, "kernel tuning not measured: " + tuning.error().message);
  }
  // Peer copies between GPUs: 2.5% of the budget (none with fewer than 2 GPUs).
  if (!profile.gpus.links.empty()) {
    report(options, "GPU peer copies (" + std::to_string(profile.gpus.links.size()) + " pairs)");
    const std::string status = probe::measure_peer_copies(profile.gpus.links, kPeerCopyBytes, options.budget_seconds * 0.025);
    profile.gpus.topology_status += "; " + status;
  }
  // Well under a second: no share of the budget.
  const int usable = std::max(1, profile.cpu.usable.pus.size());
  profile.measurements.parallel_overhead =
      probe::measure_parallel_overhead(probe::parallel_overhead_team_sizes(usable), probe::kParallelOverheadRepetitions);
  measure_interference(options, profile);
  return Ok{};
}

// The tier rule, replaced by the tuning phase's choice when it could decide.
ThreadRecommendation recommend(const ProbeOptions& options, const DeviceProfile& profile) {
  ThreadRecommendation rule = probe::recommend_threads(profile.cpu);
  if (!profile.measurements.kernel_tuning) return rule;
  auto measured = probe::recommend_from_measurements(profile.measurements.kernel_tuning->points);
  if (measured) return std::move(*measured);
  // Said in the profile (coli-probe prints it on stderr too): a fallback is never silent.
  rule.reason += std::string(" (") + kTuningFallback + measured.error().message + ")";
  report(options, measured.error().message + "; keeping the " + rule.rule + " rule");
  return rule;
}

}  // namespace

void apply_replay_machine(const std::filesystem::path& dir, ProbeOptions& options) {
  options.replay_machine = dir;
  if (fs::exists(dir / "topology.xml")) options.hwloc_xml = dir / "topology.xml";
  if (fs::exists(dir / "sysctl.txt")) options.sysctl_file = dir / "sysctl.txt";
  if (fs::exists(dir / "root")) options.root = SystemRoot(dir / "root");
  if (fs::exists(dir / "gpus.toml")) options.gpu_record = dir / "gpus.toml";
}

bool is_replay(const ProbeOptions& options) {
  return options.hwloc_xml.has_value() || options.sysctl_file.has_value() || options.gpu_record.has_value() ||
         options.replay_machine.has_value() || !options.root.is_live();
}

Result<DeviceProfile> run_probe(const ProbeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  DeviceProfile profile;
  Provenance& provenance = profile.provenance;

  report(options, "reading CPU and memory facts");
  if (auto whole = check_replay_is_whole(options); !whole) return whole.error();
  std::vector<std::string> unknown;  // what a replay's recording lacks
  if (options.sysctl_file) {
    auto text = read_text_file(*options.sysctl_file);
    if (!text) return text.error();
    if (auto status = read_sysctl_machine(*text, "sysctl:" + options.sysctl_file->string(), profile); !status) {
      return status.error();
    }
    provenance.sources = {"sysctl:" + options.sysctl_file->string()};
  } else {
#if defined(__APPLE__)
    auto text = probe::read_live_sysctl_text();
    if (!text) return text.error();
    if (auto status = read_sysctl_machine(*text, "sysctl:live", profile); !status) return status.error();
    provenance.sources = {"sysctl:live"};
#else
    if (auto status = read_linux_machine(options, profile, unknown); !status) return status.error();
    const bool no_root = is_replay(options) && options.root.is_live();
    provenance.sources = {profile.cpu.topology_source, "procfs+sysfs:" + (no_root ? "not recorded" : options.root.describe())};
    provenance.sources.insert(provenance.sources.end(), unknown.begin(), unknown.end());
#endif
  }

  report(options, "reading GPU facts (Vulkan, CUDA)");
  if (auto status = read_gpus(options, profile.gpus); !status) return status.error();
  if (const std::string problem = gpu_locality_problem(profile); !problem.empty() && options.gpu_record) {
    return make_error(options.gpu_record->string() + ": " + problem +
                      ": the GPU record is of another machine; replay it with the CPU recording it was captured with");
  }
  if (!options.gpu_record) keep_locality_within_machine(profile);
  provenance.sources.push_back("gpus:" + profile.gpus.source);

  const bool measured = !options.quick && !is_replay(options);
  if (measured) {
    if (auto status = measure(options, profile); !status) return status.error();
  }
  if (!options.quick && is_replay(options)) {
    report(options, "replaying a recorded machine: measurements skipped (they would time this machine)");
  }
  profile.threads = recommend(options, profile);

  provenance.probe_version = COLI_VERSION;
  provenance.build = COLI_BUILD_INFO;
  provenance.created_utc = utc_now();
  provenance.host = is_replay(options) ? "replay" : host_name();
  provenance.mode = measured ? "full" : "quick";
  provenance.probe_seconds = coli::seconds_since(start);
  assign_fingerprint(profile);
  return profile;
}

std::filesystem::path default_profile_path() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "coli" / "device-profile.toml";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : ".") / ".config" / "coli" / "device-profile.toml";
}

}  // namespace coli
