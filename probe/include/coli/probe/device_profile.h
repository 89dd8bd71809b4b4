// The device profile: what a machine *is* (facts) and what it *does*
// (measurements), plus the thread set recommended from them. Plain, copyable
// data with no handles inside (design.md #1); the TOML file is this struct
// serialised (profile_io.h). Every number that came from somewhere names its
// source, so a planner decision can be traced back to a file or a measurement.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "coli/base/cpu_set.h"

namespace coli {

// Bump when a field is added, removed or changes meaning. Readers refuse
// newer versions (the file may mean something this build cannot know).
// v2: GPU facts ([gpus]: Vulkan and CUDA devices).
// v3: kernel tuning (measured engine-kernel throughput per thread set, host to
//     device upload bandwidth) and fleet identity (equivalence class, export).
//     Readers accept v1-v3; the v3 tables are optional in older files.
// v4: [measurements.parallel_overhead] (OpenMP region, barrier and broadcast
//     costs per team size); optional, so v1-v3 files read as before.
// v5: GPU topology (issue 18): where each CUDA device hangs off (PCI bus id,
//     NUMA node, local CPUs, PCIe link) and [[gpus.links]] between pairs of
//     CUDA devices (NVLink / PCIe path, spec and measured peer bandwidth);
//     optional, so v1-v4 files read as before.
// v6: [measurements.read_interference] (the expert decode batch timed with
//     the engine's I/O pool reading beside it, per thread set); optional,
//     so v1-v5 files read as before.
// v7: [measurements.memory_bandwidth].fresh_page_us (the first touch of a
//     fresh page); optional, so v1-v6 files read as before.
inline constexpr int kDeviceProfileSchemaVersion = 7;

// ---------------------------------------------------------------- CPU facts

// One kind of core (hwloc "cpukind", Apple "perflevel"). Kinds are ranked by
// performance: rank 0 is the lowest-performance, most power-efficient kind
// (hwloc efficiency 0, Apple's last perflevel, ARM LITTLE cores). On a CPU
// with a single kind there is exactly one kind, rank 0.
struct CpuKind {
  int rank = 0;
  int hwloc_efficiency = -1;     // as hwloc reported it; -1 when unknown
  std::string core_type;         // "IntelCore", "IntelAtom", Apple perflevel name, "" when unknown
  int frequency_max_mhz = 0;     // 0 when unknown
  int linux_capacity = 0;        // /sys/.../cpu_capacity, 0 when unknown
  CpuSet pus;                    // logical CPUs of this kind (OS indices)
  int cores = 0;                 // physical cores of this kind
  // The PUs of each physical core, SMT siblings together, in core order. Kept
  // explicitly because sibling numbering differs: adjacent (0,1) on client
  // parts, N apart (0,128) on many servers.
  std::vector<CpuSet> core_pus;
  bool operator==(const CpuKind&) const = default;
};

// One cache level as seen from one core of one kind ("per kind, not object 0").
struct CacheInfo {
  int level = 0;                 // 1, 2, 3, 4
  std::string type;              // "data", "instruction", "unified"
  int kind_rank = 0;             // which CpuKind's cores this describes
  std::uint64_t size_bytes = 0;
  int line_bytes = 0;
  int cores_sharing = 0;         // physical cores sharing one instance
  int instances = 0;             // how many instances serve this kind
  bool operator==(const CacheInfo&) const = default;
};

// The last cache level's bytes a team of `threads` threads on distinct
// cores reaches: per kind, its instances the team spans at fewest
// (ceil(threads / cores sharing one)); the largest over kinds (a hybrid
// CPU's kinds report one shared L3 each). 0 without cache facts.
inline std::uint64_t last_level_cache_bytes(const std::vector<CacheInfo>& caches, int threads) {
  int last_level = 0;
  for (const CacheInfo& c : caches) last_level = std::max(last_level, c.level);
  std::uint64_t best = 0;
  for (const CacheInfo& c : caches) {
    if (c.level != last_level) continue;
    const int sharing = std::max(1, c.cores_sharing), team = std::max(1, threads);
    const int reached = team / sharing + (team % sharing != 0 ? 1 : 0);  // no overflow at INT_MAX
    best = std::max(best, c.size_bytes * static_cast<std::uint64_t>(std::clamp(reached, 1, std::max(1, c.instances))));
  }
  return best;
}

// A core's own cache: the largest data or unified cache below the last
// level that serves one core alone (L2 on most x86 cores; 0 without cache
// facts). A GEMV thread's share of weights read token after token stays
// there where it fits; a larger share comes from the last level.
inline std::uint64_t core_cache_bytes(const std::vector<CacheInfo>& caches) {
  int last_level = 0;
  for (const CacheInfo& c : caches) last_level = std::max(last_level, c.level);
  std::uint64_t best = 0;
  for (const CacheInfo& c : caches) {
    if (c.level < last_level && c.cores_sharing == 1 && c.type != "instruction") best = std::max(best, c.size_bytes);
  }
  return best;
}

// What a buffer the probe reads round and round must span to stream from
// RAM: 16 last-level caches (every instance, a hybrid CPU's shared L3
// once), of which a cache that resists streaming keeps at most a sixteenth
// (measure/weight_pool.h says why). The tuning pool and the bandwidth
// arrays take it within bounds of their own; a profile tuned over fewer
// bytes may carry decode rates a cache helped, and the speed model says so.
inline constexpr std::uint64_t kTuningPoolCaches = 16;
inline std::uint64_t streaming_buffer_bytes(const std::vector<CacheInfo>& caches) {
  return kTuningPoolCaches * last_level_cache_bytes(caches, std::numeric_limits<int>::max());
}
// The tuning phase's test weights by default: streaming_buffer_bytes within
// 1..4 GiB, before the probe's headroom bound.
inline constexpr std::uint64_t kMinTuningPool = 1ull << 30, kMaxTuningPool = 4ull << 30;
inline std::uint64_t default_tuning_pool_bytes(const std::vector<CacheInfo>& caches) {
  return std::clamp(streaming_buffer_bytes(caches), kMinTuningPool, kMaxTuningPool);
}

struct NumaNode {
  int os_index = 0;
  CpuSet pus;
  std::uint64_t memory_bytes = 0;  // as the topology source claims it (see MemoryFacts for belief)
  bool operator==(const NumaNode&) const = default;
};

// The CPUs this process may actually use, and why.
struct UsableCpus {
  CpuSet pus;                          // what compute may run on: affinity ∩ cgroup cpuset ∩ online
  CpuSet affinity;                     // sched_getaffinity / Cpus_allowed_list
  std::optional<CpuSet> cgroup_cpuset; // cpuset.cpus.effective (v2) or cpuset.cpus (v1)
  std::optional<double> quota_cpus;    // cpu.max (v2) or cfs_quota/period (v1); nullopt = unlimited
  bool operator==(const UsableCpus&) const = default;
};

struct CpuFacts {
  std::string arch;                 // "x86_64", "aarch64", "arm64"
  std::string vendor;               // "GenuineIntel", "AuthenticAMD", "Apple", "ARM" ...
  std::string model;                // marketing name as reported
  int packages = 0;
  int cores = 0;                    // physical cores in the machine
  int pus = 0;                      // logical CPUs (hardware threads)
  std::vector<CpuKind> kinds;       // ordered by rank, ascending
  std::vector<CacheInfo> caches;
  std::vector<NumaNode> numa_nodes;
  std::vector<std::string> isa;     // normalised flags, sorted: "avx2", "avx512f", "amx_int8", "neon", ...
  UsableCpus usable;
  std::string topology_source;      // "hwloc:live", "hwloc-xml:<file>", "sysctl:live", "sysctl:<file>"
  std::string isa_source;           // "/proc/cpuinfo (live)", "<root>/proc/cpuinfo", "sysctl ..."
  bool smt() const { return pus > cores; }
  bool operator==(const CpuFacts&) const = default;
};

// ------------------------------------------------------------- memory facts

// One reading of "how much memory may we use", with where it came from and
// whether the probe believed it (sources are cross-checked; see docs/probe.md).
struct MemorySource {
  std::string name;        // "MemAvailable", "cgroup v2 memory.max headroom", "hwloc NUMA total", ...
  std::uint64_t bytes = 0;
  std::string origin;      // file path or API the number was read from
  bool believed = true;
  std::string note;        // why it was (not) believed
  bool operator==(const MemorySource&) const = default;
};

struct MemoryFacts {
  std::uint64_t total_bytes = 0;       // MemTotal
  std::uint64_t available_bytes = 0;   // MemAvailable
  std::uint64_t swap_total_bytes = 0;
  std::uint64_t swap_free_bytes = 0;
  std::optional<std::uint64_t> cgroup_limit_bytes;    // tightest limit of this group and its ancestors
  std::optional<std::uint64_t> cgroup_usage_bytes;    // usage in the group that sets that limit
  std::optional<std::uint64_t> cgroup_reclaimable_bytes;  // its inactive_file
  std::uint64_t headroom_bytes = 0;    // what the planner may use: the smallest believed source
  std::string headroom_source;         // name of the MemorySource that set it
  std::vector<MemorySource> sources;
  bool operator==(const MemoryFacts&) const = default;
};

// ---------------------------------------------------------------- GPU facts

struct VulkanMemoryHeap {
  std::uint64_t size_bytes = 0;
  bool device_local = false;
  // VK_EXT_memory_budget; nullopt when the driver lacks it. The budget is
  // clamped to the heap size (drivers have reported more); `budget_clamped` says so.
  std::optional<std::uint64_t> budget_bytes;
  std::optional<std::uint64_t> usage_bytes;
  bool budget_clamped = false;
  bool operator==(const VulkanMemoryHeap&) const = default;
};

// One Vulkan physical device as the driver reports it.
struct VulkanDevice {
  // identity
  std::string name;
  std::uint32_t vendor_id = 0;
  std::uint32_t device_id = 0;
  std::string type;                  // "discrete", "integrated", "virtual", "cpu", "other"
  std::string api_version;           // "1.3.239"
  std::uint32_t driver_version = 0;  // raw, vendor-encoded
  std::string driver_name;           // VkPhysicalDeviceDriverProperties, "" when absent
  std::string driver_info;
  std::string uuid;                  // deviceUUID, 32 hex digits
  // limits
  std::uint32_t max_compute_shared_memory_bytes = 0;
  std::uint32_t max_workgroup_invocations = 0;
  std::vector<std::uint32_t> max_workgroup_size;   // x, y, z
  std::vector<std::uint32_t> max_workgroup_count;  // x, y, z
  std::uint64_t max_storage_buffer_range = 0;
  // subgroups
  std::uint32_t subgroup_size = 0;
  std::uint32_t min_subgroup_size = 0;          // = subgroup_size without size control
  std::uint32_t max_subgroup_size = 0;
  bool subgroup_size_control = false;
  bool compute_full_subgroups = false;
  std::vector<std::string> subgroup_operations;  // "basic", "vote", "arithmetic", "ballot", "shuffle",
                                                 // "shuffle_relative", "clustered", "quad" (compute stage)
  // features
  bool shader_int8 = false;
  bool shader_float16 = false;
  bool storage_buffer_8bit = false;
  bool storage_buffer_16bit = false;
  bool integer_dot_product = false;
  bool cooperative_matrix = false;
  // memory
  std::vector<VulkanMemoryHeap> heaps;
  bool memory_budget = false;        // VK_EXT_memory_budget present
  bool unified_memory = false;       // one device-local heap that is also host-visible (UMA)
  bool external_host_memory = false; // VK_EXT_external_memory_host
  std::uint64_t min_imported_host_pointer_alignment = 0;
  bool operator==(const VulkanDevice&) const = default;
};

// One CUDA device through the driver API.
struct CudaDevice {
  int ordinal = 0;
  std::string name;
  std::string uuid;                    // 32 hex digits
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  std::uint32_t shared_memory_per_block = 0;        // default limit
  std::uint32_t shared_memory_per_block_optin = 0;  // with cudaFuncAttributeMaxDynamicSharedMemorySize
  std::uint32_t shared_memory_per_sm = 0;
  std::uint64_t l2_bytes = 0;
  std::uint64_t total_memory_bytes = 0;
  std::uint64_t free_memory_bytes = 0; // at probe time; planners re-read it live
  int driver_version = 0;              // e.g. 13000 for 13.0
  std::vector<std::string> notes;      // values the probe clamped or distrusted, and why
  // Where the device hangs off (v5; NVML and sysfs). Empty / -1 / 0 = unknown.
  std::string pci_bus_id;              // "00000000:18:00.0" as NVML writes it
  int numa_node = -1;                  // the NUMA node the device is local to
  CpuSet local_cpus;                   // the CPUs local to it (sysfs local_cpulist, hwloc)
  int pcie_generation = 0;             // the link's maximum generation
  int pcie_width = 0;                  // its maximum lanes
  double host_link_gbs = 0;            // PCIe bandwidth per direction that generation x width allows, GB/s
  bool operator==(const CudaDevice&) const = default;
};

// How two CUDA devices reach each other (v5): one entry per unordered pair.
struct GpuLink {
  int a = 0;                           // CUDA ordinals, a < b
  int b = 0;
  // NVML's topology level between them, or "nvlink" when NVLink joins them:
  // "nvlink", "same-board", "pcie-switch", "pcie-multi-switch", "host-bridge", "cross-socket".
  std::string path;
  int nvlinks = 0;                     // active NVLink links joining the pair
  double spec_gbs = 0;                 // per direction the path allows (NVLink: links x per-link rate; else the slower PCIe link)
  bool peer_access = false;            // cuDeviceCanAccessPeer both ways
  double measured_gbs = 0;             // measured peer copy a->b, GB/s; 0 = not measured
  std::string source;                  // "nvml", "nvml+measured", "spec:<document>", "replay:<file>"
  bool operator==(const GpuLink&) const = default;
};

struct GpuFacts {
  // One line each saying what was found or why nothing was: "2 devices",
  // "no Vulkan loader (libvulkan.so.1 not found)", "no CUDA driver (...)".
  std::string vulkan_status;
  std::vector<VulkanDevice> vulkan;
  std::string cuda_status;
  std::vector<CudaDevice> cuda;
  std::string topology_status;  // v5: what NVML / the peer copies found, or why nothing ("1 CUDA device: no pairs")
  std::vector<GpuLink> links;   // v5: between CUDA devices (gpus.cuda ordinals)
  std::string source;  // "live" or "replay:<file>"
  bool operator==(const GpuFacts&) const = default;
};

// Which GPU, in profiles and plans: the Vulkan physical-device index (its
// position in GpuFacts::vulkan) and deviceUUID, so two identical GPUs are two
// GPUs. The name is for humans and for matching when the UUID was dropped
// (coli profile export): then index and model must both agree.
struct GpuIdentity {
  int index = -1;    // -1: no GPU (experts on the CPU)
  std::string uuid;  // 32 hex digits; "" when unknown or exported without it
  std::string name;  // VulkanDevice::name
  bool chosen() const { return index >= 0; }
  std::string describe() const;  // "GPU 1 (NVIDIA H200, uuid 0a1b...)", "no GPU"
  bool operator==(const GpuIdentity&) const = default;
};

// The identity of gpus.vulkan[index] (index must be in range).
GpuIdentity vulkan_identity(const GpuFacts& gpus, int index);
// The index in `gpus.vulkan` of the GPU `id` names: by UUID when both sides
// have one, else by index and model name; nullopt when this machine has no such GPU.
std::optional<int> find_gpu(const GpuFacts& gpus, const GpuIdentity& id);
// The same over `gpus.cuda` (CUDA ordinals and UUIDs), for plans of the CUDA decoder.
GpuIdentity cuda_identity(const GpuFacts& gpus, int index);
std::optional<int> find_cuda_gpu(const GpuFacts& gpus, const GpuIdentity& id);

// ------------------------------------------------------------- measurements

// Summary of repeated timings of one configuration (design.md #5).
struct SampleStats {
  int samples = 0;
  double median = 0;
  double best = 0;      // the most favourable sample (highest bandwidth)
  double worst = 0;
  double spread = 0;    // (best - worst) / median; 0 with one sample
  bool operator==(const SampleStats&) const = default;
};

struct MemoryBandwidthPoint {
  std::string kernel;      // "read" (sum of a stream) or "triad" (a = b + s*c, STREAM counting)
  int kind_rank = -1;      // -1: threads spread over all usable kinds; else pinned to that kind
  int threads = 0;
  CpuSet pus;              // where the threads were pinned
  SampleStats gb_per_s;    // 1 GB = 1e9 bytes
  bool operator==(const MemoryBandwidthPoint&) const = default;
};

struct MemoryBandwidth {
  std::uint64_t buffer_bytes = 0;  // per array; chosen larger than the last-level cache
  std::vector<MemoryBandwidthPoint> points;
  // Microseconds to touch one 4 KiB page of fresh anonymous memory for the
  // first time (the fault and the zeroing; in a VM the host's fault too), as
  // a process's first prompt pays for its prompt-sized buffers. The median
  // of a few fresh mappings, under the machine's transparent huge page
  // setting as the engine's allocations get it. 0: not measured (schema 6
  // and older).
  double fresh_page_us = 0;
  bool operator==(const MemoryBandwidth&) const = default;
};

// What OpenMP's fixed costs are at one team size (unpinned team, already
// formed and spinning, as between the engine's steps), microseconds. A
// decode token pays them once per parallel step (issue 15's speed model).
// The hidden states the broadcast figures read: OLMoE's 2048 floats (8 KiB)
// and a 64-wide model's (256 B).
inline constexpr int kBroadcastFloats = 2048, kBroadcastNarrowFloats = 64;

struct ParallelOverheadPoint {
  int threads = 0;
  double region_us = 0;     // fork and join of an empty parallel region, as a run of them pays it (the mean)
  double barrier_us = 0;    // one barrier inside a region
  // What a region costs more when all threads read floats the calling thread
  // just wrote (the hidden state between steps): kBroadcastFloats of them,
  // and kBroadcastNarrowFloats (a small model's; profiles before it: the
  // first figure, so their step cost is as before).
  double broadcast_us = 0;
  double broadcast_narrow_us = 0;
  bool operator==(const ParallelOverheadPoint&) const = default;
};

struct ParallelOverhead {
  int repetitions = 0;  // each figure is a median of this many
  std::vector<ParallelOverheadPoint> points;
  bool operator==(const ParallelOverhead&) const = default;
};

struct DiskBandwidthPoint {
  // "sequential" or "random": queue_depth threads reading back to back;
  // kEnginePoolPattern: random reads in batches of queue_depth, submitted
  // to the engine's own I/O pool and waited for together, as a layer's
  // misses are (hand-offs to and from the pool's threads included).
  // kEnginePoolIdlePattern: one such read after the pool sat idle for
  // `idle_us` (a decoded token's misses come that far apart).
  std::string pattern;
  std::uint64_t block_bytes = 0;   // one read, sized like an expert (1-20 MB)
  int queue_depth = 1;             // reads in flight at once (engine_pool: the batch)
  SampleStats gb_per_s;
  double idle_us = 0;              // kEnginePoolIdlePattern: the pool's idle time before each read
  bool operator==(const DiskBandwidthPoint&) const = default;
};

// A disk entry without points whose note starts with this: the probe tried
// the (default) directory and could not measure it; the rest says why.
inline constexpr const char* kDiskNotMeasured = "not measured: ";

inline constexpr const char* kEnginePoolPattern = "engine_pool";
inline constexpr const char* kEnginePoolIdlePattern = "engine_pool_idle";

struct DiskBandwidth {
  std::string directory;           // where the test file lived (the model's filesystem)
  std::string filesystem;          // "ext4", "xfs", "tmpfs", ...
  bool direct_io = false;          // O_DIRECT used (page cache bypassed)
  std::string note;                // e.g. why O_DIRECT was not possible and what the figures then mean
  std::uint64_t file_bytes = 0;
  std::vector<DiskBandwidthPoint> points;
  int engine_io_threads = 0;       // the engine_pool points' I/O threads (0: none measured, an older profile)
  bool operator==(const DiskBandwidth&) const = default;
};

// One kernel variant run on one GPU against the CPU reference (--gpu-selftest).
struct GpuKernelResult {
  std::string device;        // VulkanDevice::name (or CUDA name)
  std::string backend;       // "vulkan" or "cuda"
  std::string variant;       // catalogue name, e.g. "gemv_q4_g64_shmem_x"
  int rows = 0;
  int cols = 0;
  std::uint32_t shared_memory_bytes = 0;  // what the pipeline declared
  bool passed = false;       // matched the CPU reference within tolerance
  double max_relative_error = 0;
  std::string note;          // why it failed or was skipped
  SampleStats gb_per_s;      // bytes of weights + scales + x per call / time
  int device_index = -1;     // Vulkan physical-device index; -1 in profiles recorded before it was (match by name)
  // This result was measured on gpus.vulkan[index] named `name`.
  bool measured_on(int index, const std::string& name) const {
    return device_index >= 0 ? device_index == index : device == name;
  }
  bool operator==(const GpuKernelResult&) const = default;
};

// The stream points (expert_q4_prefill_stream1, _stream, _stream4; _q8_
// the same): each call streams the records of kStreamPointExperts
// OLMoE-wide experts with 1, 2 or 4 rows each, fresh from the tuning pool.
// The warm ones (_stream_warm1, _stream_warm, _stream_warm4) keep the first
// kWarmStreamExperts of them the same every call and time those alone,
// after an untimed call of the others' fresh records: each kept record is
// re-read after kStreamPointExperts - 1 other records, as a prompt's
// popular expert is re-read round after round at one layer.
inline constexpr int kStreamPointExperts = 24, kWarmStreamExperts = 12;

// The narrow expert batch's idle copies (expert_q4_prefill_narrow_idle1ms,
// _idle4ms; idle_point_name): before each call the team spins on registers
// for the gap, so the buffers the batch reuses have aged that long in the
// caches, as a pass's batch finds them a layer later. Other tenants of a
// shared last-level cache evict them meanwhile (the 2-core VM kept 2 MiB
// 0.95 after 2 ms and 0.69 after 5; the H100 box 4 MiB whole after 5 ms),
// and the demo model's batch cost 1.4x its back-to-back figure in a VM pass.
inline constexpr std::array<int, 2> kIdleGapsMs = {1, 4};
inline std::string idle_point_name(const std::string& kernel, int gap_ms) {
  return kernel + "_idle" + std::to_string(gap_ms) + "ms";
}

// The decode attention points (attention_decode, _grouped): one token at
// this position (so depth + 1 positions) over a layer's f16 K and V read
// from RAM; rows: query heads, cols: head_dim, matrices: KV heads.
inline constexpr int kDecodeAttentionDepth = 512;

// One engine kernel (kernels/cpu, the calls decode and prefill make) timed on
// one candidate thread set by the tuning phase (probe/measure/kernel_tuning.h).
struct KernelThroughputPoint {
  std::string kernel;      // "expert_q4_decode", "expert_q8_decode", "dense_q8_decode", "expert_q4_prefill", ...
  int rows = 0;            // of the first matrix (expert gate/up, or the dense matrix)
  int cols = 0;
  int batch = 1;           // tokens per call: 1 for decode, the prefill round for prefill
  int matrices = 0;        // matrices one call multiplies (e.g. 8 experts x 3)
  std::string thread_set;  // candidate name, e.g. "kind1:4c", "kinds0-1:12c+smt"
  int threads = 0;
  CpuSet pus;              // OpenMP member i pinned to the i-th lowest PU
  bool smt = false;        // SMT siblings included
  SampleStats gb_per_s;      // weight bytes (with scales) streamed per second; samples = rounds (each its slice's median)
  SampleStats tokens_per_s;  // batch / call time: tokens through this kernel of one layer
  bool operator==(const KernelThroughputPoint&) const = default;
};

struct KernelTuning {
  std::string cpu_kernel;        // variant timed ("avx2", "avx512vnni", ...), the engine's default
  std::uint64_t pool_bytes = 0;  // weights cycled through; larger than the LLC so calls stream from RAM
  double seconds = 0;            // wall time of the tuning phase
  std::string note;              // what was cut short and why; how many rounds ran and whether the sets separated
  std::vector<KernelThroughputPoint> points;
  bool operator==(const KernelTuning&) const = default;
};

// How much slower the engine's expert decode batch (expert_q4_decode) runs
// on one thread set while the engine's I/O pool keeps a read of the disk
// test file in flight: where the team holds every core, a read's CPU work
// (its submission and completion, the copy without O_DIRECT, a hypervisor's
// disk emulation) comes out of the team's time. The 2-core VM decoded the
// OLMoE shape at 2 threads in 21.9 ms a token streaming against 18.9
// resident, 0.8 ms of it waiting for reads: its compute slowed while the
// reads ran. Slices alone and with reads alternate, so the machine's drift
// touches both alike. The reads' own rate beside the kernel says how much of
// a read's time the compute beside it really hides.
struct ReadInterferencePoint {
  std::string thread_set;  // candidate name, as the kernel points'
  int threads = 0;
  CpuSet pus;
  int pairs = 0;                  // (alone, with reads) slice pairs timed
  double alone_gb_per_s = 0;      // median over the alone slices (each its calls' median)
  double with_reads_gb_per_s = 0; // median over the slices with reads in flight
  double slowdown = 0;            // median over the pairs of alone / with reads, less 1 (below 0: noise)
  // The reads' side: reads landed per second with the calling thread asleep
  // (a layer waiting) and beside the kernel, and the median over the pairs
  // of beside / alone: how far reads get while the team computes (near 1
  // with a core to spare; the 2-core VM's 2 threads left them ...).
  double reads_alone_per_s = 0;
  double reads_beside_per_s = 0;
  double read_progress = 1;
  bool operator==(const ReadInterferencePoint&) const = default;
};

struct ReadInterference {
  std::string kernel;             // the kernel timed ("expert_q4_decode")
  std::uint64_t block_bytes = 0;  // one read
  int io_threads = 0;             // the I/O pool's threads (one read in flight at a time)
  bool direct_io = false;         // O_DIRECT reads (else the page cache's copy)
  std::string note;               // what was left out and why
  std::vector<ReadInterferencePoint> points;
  bool operator==(const ReadInterference&) const = default;
};

// Host-to-device copy bandwidth of one GPU (pinned/staging host memory).
struct UploadBandwidthPoint {
  std::string backend;     // "cuda" or "vulkan"
  std::string device;      // device name
  int device_index = 0;    // CUDA ordinal / Vulkan physical-device index
  std::uint64_t block_bytes = 0;
  SampleStats gb_per_s;
  bool operator==(const UploadBandwidthPoint&) const = default;
};

struct Measurements {
  std::optional<MemoryBandwidth> memory;
  std::optional<DiskBandwidth> disk;
  std::vector<GpuKernelResult> gpu_kernels;
  std::optional<KernelTuning> kernel_tuning;  // schema 3
  std::string upload_status;                  // schema 3: what was measured, or why nothing was
  std::vector<UploadBandwidthPoint> uploads;  // schema 3
  std::optional<ParallelOverhead> parallel_overhead;  // schema 4
  std::optional<ReadInterference> read_interference;  // schema 6
  bool operator==(const Measurements&) const = default;
};

// --------------------------------------------------------- recommendations

// Starts the part of ThreadRecommendation::reason that says a full probe's
// tuning phase could not decide and the tier rule was kept instead.
inline constexpr const char* kTuningFallback = "the tier rule, because ";

struct ThreadRecommendation {
  int decode_threads = 0;
  int prefill_threads = 0;
  CpuSet decode_pus;       // one PU per chosen physical core (SMT siblings left out)
  CpuSet prefill_pus;
  // machine-readable name of what decided: a tier rule such as
  // "single-kind-physical-cores", or "measured-kernel-throughput" (tuning phase)
  std::string rule;
  std::string reason;      // one sentence for humans
  bool operator==(const ThreadRecommendation&) const = default;
};

// ---------------------------------------------------------------- profile

struct Provenance {
  std::string probe_version;       // coli version that wrote the profile
  std::string build;               // compiler, build type, git revision
  std::string created_utc;         // ISO 8601
  std::string host;                // host name (host-private: fleet export drops it)
  std::string mode;                // "quick" (facts only) or "full" (facts + measurements)
  double probe_seconds = 0;        // wall time the probe took
  std::vector<std::string> sources;  // every input read: "hwloc:live", "procfs:live", "replay:<dir>" ...
  bool operator==(const Provenance&) const = default;
};

// ------------------------------------------------------ fleet identity (v3)

// Which machines may share tuned results (docs/fleet.md). The class is a hash
// of a canonical basis (fleet.h: class_fields): CPU arch, vendor, model, ISA,
// packages, per-kind core and PU counts; GPU models with their driver major
// versions; and the build's kernel catalogue digest. Empty in files written
// before schema 3: such a profile has no class and shares nothing.
struct FleetIdentity {
  std::string equivalence_class;  // "class-v1:<16 hex>"
  std::string class_basis;        // the canonical text that was hashed
  std::string kernel_catalogue;   // "gemv-v1:<16 hex>": digest of the build's kernel catalogue
  bool operator==(const FleetIdentity&) const = default;
};

// Present only in files written by `coli profile export`.
struct ExportInfo {
  std::string exported_utc;            // ISO 8601
  bool private_data_removed = true;    // host name, GPU UUIDs, disk path dropped (unless --keep-private)
  // "sha256:<64 hex>" of the file's exact bytes with this one line removed.
  std::string content_sha256;
  bool operator==(const ExportInfo&) const = default;
};

struct DeviceProfile {
  int schema_version = kDeviceProfileSchemaVersion;
  // Stable hardware identity: CPU model and kinds, core counts, RAM total
  // (rounded), GPU identities later. Not free memory, not dates.
  std::string fingerprint;          // "fnv1a64:<16 hex>"
  std::string fingerprint_basis;    // the canonical text that was hashed, for humans and diffs
  Provenance provenance;
  CpuFacts cpu;
  MemoryFacts memory;
  GpuFacts gpus;
  Measurements measurements;
  ThreadRecommendation threads;
  FleetIdentity identity;                  // [identity], schema 3
  std::optional<ExportInfo> export_info;   // [export], exported files only
  bool operator==(const DeviceProfile&) const = default;
};

}  // namespace coli
