// Measurements and GPU facts of a profile (see profile_reader.h): every
// figure bounded, every statistic consistent (worst <= median <= best).
#include "profile_reader.h"

namespace coli::profile_detail {

SampleStats read_stats(const Reader& r) {
  SampleStats s;
  s.samples = r.small_int("samples", 0, 1000000);  // 0: not run (e.g. a GPU variant that does not fit)
  s.median = r.real("median_gb_per_s", 0, kMaxGbPerS);
  s.best = r.real("best_gb_per_s", 0, kMaxGbPerS);
  s.worst = r.real("worst_gb_per_s", 0, kMaxGbPerS);
  s.spread = r.real("spread", 0, 1000);
  if (s.worst > s.median || s.median > s.best) r.fail(nullptr, "median_gb_per_s", "must lie between worst and best");
  return s;
}


namespace {

KernelTuning read_kernel_tuning(const Reader& r, const CpuFacts& cpu) {
  KernelTuning tuning{r.text("cpu_kernel"), r.bytes("pool_bytes"), r.real("seconds", 0, 86400), r.text("note"), {}};
  for (const Reader& p : r.tables("points")) {
    KernelThroughputPoint point{p.text("kernel"), p.small_int("rows", 1, 1 << 24), p.small_int("cols", 1, 1 << 24),
                                p.small_int("batch", 1, 1 << 16), p.small_int("matrices", 0, 1 << 20),
                                p.text("thread_set"), p.small_int("threads", 1, kMaxCpus), p.cpus("pus"),
                                p.boolean("smt"), read_stats(p), {}};
    if (point.pus.size() != point.threads) p.fail(nullptr, "pus", "must hold one PU per thread");
    if (point.pus.intersect(cpu.usable.pus) != point.pus) p.fail(nullptr, "pus", "must be usable PUs of cpu.usable.pus");
    const Reader t = p.table("tokens_per_s");
    SampleStats& s = point.tokens_per_s;
    s.samples = t.small_int("samples", 0, 1000000), s.spread = t.real("spread", 0, 1000);
    s.median = t.real("median", 0, 1e12), s.best = t.real("best", 0, 1e12), s.worst = t.real("worst", 0, 1e12);
    if (s.worst > s.median || s.median > s.best) t.fail(nullptr, "median", "must lie between worst and best");
    tuning.points.push_back(std::move(point));
  }
  return tuning;
}

// Rates of one kernel alone and beside reads, and of the reads alone and
// beside it: a slowdown below -0.5 (the reads doubling the kernel's speed)
// or above 100 is a broken file.
ReadInterference read_read_interference(const Reader& r, const CpuFacts& cpu) {
  ReadInterference out{r.text("kernel"), r.bytes("block_bytes"), r.small_int("io_threads", 0, 1024), r.boolean("direct_io"),
                       r.text("note"), {}};
  for (const Reader& p : r.tables("points")) {
    ReadInterferencePoint point{p.text("thread_set"),         p.small_int("threads", 1, kMaxCpus),
                                p.cpus("pus"),                p.small_int("pairs", 1, 100000),
                                p.real("alone_gb_per_s", 0, kMaxGbPerS), p.real("with_reads_gb_per_s", 0, kMaxGbPerS),
                                p.real("slowdown", -0.5, 100),
                                p.real("reads_alone_per_s", 0, 1e9),
                                p.real("reads_beside_per_s", 0, 1e9),
                                p.real("read_progress", 0, 100)};
    if (point.pus.size() != point.threads) p.fail(nullptr, "pus", "must hold one PU per thread");
    if (point.pus.intersect(cpu.usable.pus) != point.pus) p.fail(nullptr, "pus", "must be usable PUs of cpu.usable.pus");
    out.points.push_back(std::move(point));
  }
  return out;
}

}  // namespace

Measurements read_measurements(const Reader& r, const CpuFacts& cpu) {
  Measurements out;
  if (r.has("memory_bandwidth")) {
    const Reader mb = r.table("memory_bandwidth");
    MemoryBandwidth bandwidth;
    bandwidth.buffer_bytes = mb.bytes("buffer_bytes");
    // A page that took a second to fault in is a broken file, not a machine.
    if (mb.has("fresh_page_us")) bandwidth.fresh_page_us = mb.real("fresh_page_us", 0, 1e6);
    for (const Reader& p : mb.tables("points")) {
      bandwidth.points.push_back(MemoryBandwidthPoint{p.text("kernel"), p.small_int("kind_rank", -1, 63),
                                                      p.small_int("threads", 1, kMaxCpus), p.cpus("pus"),
                                                      read_stats(p)});
    }
    out.memory = std::move(bandwidth);
  }
  if (r.has("parallel_overhead")) {
    const Reader po = r.table("parallel_overhead");
    ParallelOverhead overhead;
    overhead.repetitions = po.small_int("repetitions", 1, 100000000);
    // Microseconds: a team that took a second to fork is a broken file, not a machine.
    constexpr double kMostMicroseconds = 1e6;
    for (const Reader& p : po.tables("points")) {
      ParallelOverheadPoint point{p.small_int("threads", 1, kMaxCpus), p.real("region_us", 0, kMostMicroseconds),
                                  p.real("barrier_us", 0, kMostMicroseconds), p.real("broadcast_us", 0, kMostMicroseconds)};
      // Optional: profiles before the narrow figure price every hidden state at the 8 KiB one.
      point.broadcast_narrow_us =
          p.has("broadcast_narrow_us") ? p.real("broadcast_narrow_us", 0, kMostMicroseconds) : point.broadcast_us;
      overhead.points.push_back(point);
    }
    out.parallel_overhead = std::move(overhead);
  }
  if (r.has("disk")) {
    const Reader d = r.table("disk");
    DiskBandwidth disk{d.text("directory"), d.text("filesystem"), d.boolean("direct_io"), d.text("note"),
                       d.bytes("file_bytes"), {}};
    for (const Reader& p : d.tables("points")) {
      // Optional: only engine_pool_idle points have it; an hour idle is a broken file.
      disk.points.push_back(DiskBandwidthPoint{p.text("pattern"), p.bytes("block_bytes"),
                                               p.small_int("queue_depth", 1, 4096), read_stats(p),
                                               p.has("idle_us") ? p.real("idle_us", 0, 3.6e9) : 0.0});
    }
    // Optional: profiles before the engine-pool points have none.
    disk.engine_io_threads = d.has("engine_io_threads") ? d.small_int("engine_io_threads", 1, 1024) : 0;
    out.disk = std::move(disk);
  }
  if (r.has("gpu_kernels")) {
    for (const Reader& k : r.tables("gpu_kernels")) {
      // A device-level status line (no variant: "no Vulkan device", "no CUDA self-test: ...") has no shape.
      const int least = k.text("variant").empty() ? 0 : 1;
      out.gpu_kernels.push_back(GpuKernelResult{k.text("device"), k.text("backend"), k.text("variant"),
                                                k.small_int("rows", least, 1 << 24), k.small_int("cols", least, 1 << 24),
                                                k.u32("shared_memory_bytes", kMaxSharedMemory), k.boolean("passed"),
                                                k.real("max_relative_error", 0, 1e30), k.text("note"),
                                                read_stats(k),
                                                k.has("device_index") ? k.small_int("device_index", 0, 1024) : -1});
    }
  }
  if (r.has("kernel_tuning")) out.kernel_tuning = read_kernel_tuning(r.table("kernel_tuning"), cpu);
  if (r.has("read_interference")) out.read_interference = read_read_interference(r.table("read_interference"), cpu);
  if (r.has("uploads")) {
    const Reader u = r.table("uploads");
    out.upload_status = u.text("status");
    for (const Reader& p : u.tables("points")) {
      out.uploads.push_back(UploadBandwidthPoint{p.text("backend"), p.text("device"), p.small_int("device_index", 0, 1024),
                                                 p.bytes("block_bytes"), read_stats(p)});
    }
  }
  return out;
}


VulkanDevice read_vulkan(const Reader& r) {
  VulkanDevice d;
  d.name = r.text("name");
  if (d.name.empty()) r.fail(nullptr, "name", "must not be empty");
  d.vendor_id = r.u32("vendor_id", kMaxU32);
  d.device_id = r.u32("device_id", kMaxU32);
  d.type = r.text("type");
  d.api_version = r.text("api_version");
  d.driver_version = r.u32("driver_version", kMaxU32);
  d.driver_name = r.text("driver_name");
  d.driver_info = r.text("driver_info");
  d.uuid = r.text("uuid");
  d.max_compute_shared_memory_bytes = r.u32("max_compute_shared_memory_bytes", kMaxSharedMemory);
  d.max_workgroup_invocations = r.u32("max_workgroup_invocations", 1 << 20);
  d.max_workgroup_size = r.u32s("max_workgroup_size", 1 << 20);
  d.max_workgroup_count = r.u32s("max_workgroup_count", kMaxU32);
  if (d.max_workgroup_size.size() != 3 || d.max_workgroup_count.size() != 3) {
    r.fail(nullptr, "max_workgroup_size", "and max_workgroup_count must each hold 3 numbers (x, y, z)");
  }
  d.max_storage_buffer_range = r.bytes("max_storage_buffer_range");
  d.subgroup_size = r.u32("subgroup_size", 1024);
  d.min_subgroup_size = r.u32("min_subgroup_size", 1024);
  d.max_subgroup_size = r.u32("max_subgroup_size", 1024);
  if (d.min_subgroup_size > d.max_subgroup_size) r.fail(nullptr, "min_subgroup_size", "exceeds max_subgroup_size");
  d.subgroup_size_control = r.boolean("subgroup_size_control");
  d.compute_full_subgroups = r.boolean("compute_full_subgroups");
  d.subgroup_operations = r.strings("subgroup_operations");
  d.shader_int8 = r.boolean("shader_int8");
  d.shader_float16 = r.boolean("shader_float16");
  d.storage_buffer_8bit = r.boolean("storage_buffer_8bit");
  d.storage_buffer_16bit = r.boolean("storage_buffer_16bit");
  d.integer_dot_product = r.boolean("integer_dot_product");
  d.cooperative_matrix = r.boolean("cooperative_matrix");
  d.memory_budget = r.boolean("memory_budget");
  d.unified_memory = r.boolean("unified_memory");
  d.external_host_memory = r.boolean("external_host_memory");
  d.min_imported_host_pointer_alignment = r.bytes("min_imported_host_pointer_alignment");
  for (const Reader& h : r.tables("heaps")) {
    VulkanMemoryHeap heap{h.bytes("size_bytes"), h.boolean("device_local"), h.optional_bytes("budget_bytes"),
                          h.optional_bytes("usage_bytes"), h.boolean("budget_clamped")};
    if (heap.budget_bytes && *heap.budget_bytes > heap.size_bytes) {
      h.fail(nullptr, "budget_bytes", "exceeds the heap's size_bytes (budgets are clamped to the heap)");
    }
    d.heaps.push_back(heap);
  }
  return d;
}

CudaDevice read_cuda(const Reader& r) {
  CudaDevice d;
  d.ordinal = r.small_int("ordinal", 0, 1024);
  d.name = r.text("name");
  d.uuid = r.text("uuid");
  d.compute_capability_major = r.small_int("compute_capability_major", 0, 100);  // 0: unknown (see notes)
  d.compute_capability_minor = r.small_int("compute_capability_minor", 0, 100);
  d.sm_count = r.small_int("sm_count", 0, 100000);
  d.shared_memory_per_block = r.u32("shared_memory_per_block", kMaxSharedMemory);
  d.shared_memory_per_block_optin = r.u32("shared_memory_per_block_optin", kMaxSharedMemory);
  d.shared_memory_per_sm = r.u32("shared_memory_per_sm", kMaxSharedMemory);
  d.l2_bytes = r.bytes("l2_bytes");
  d.total_memory_bytes = r.bytes("total_memory_bytes");
  d.free_memory_bytes = r.bytes("free_memory_bytes");
  if (d.free_memory_bytes > d.total_memory_bytes) r.fail(nullptr, "free_memory_bytes", "exceeds total_memory_bytes");
  d.driver_version = r.small_int("driver_version", 0, 1000000);
  d.notes = r.strings("notes");
  read_cuda_topology(r, d);
  return d;
}

GpuFacts read_gpus(const Reader& r) {
  GpuFacts gpus;
  gpus.source = r.text("source");
  gpus.vulkan_status = r.text("vulkan_status");
  gpus.cuda_status = r.text("cuda_status");
  for (const Reader& device : r.tables("vulkan")) gpus.vulkan.push_back(read_vulkan(device));
  for (const Reader& device : r.tables("cuda")) gpus.cuda.push_back(read_cuda(device));
  for (std::size_t i = 0; i < gpus.cuda.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (gpus.cuda[i].ordinal == gpus.cuda[j].ordinal) {
        r.fail("cuda", "lists ordinal " + std::to_string(gpus.cuda[i].ordinal) + " twice");
      }
    }
  }
  if (r.has("topology_status")) gpus.topology_status = r.text("topology_status");
  gpus.links = read_links(r, gpus.cuda);
  return gpus;
}

}  // namespace coli::profile_detail
