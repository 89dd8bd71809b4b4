// Made-up multi-GPU hosts for the expert-parallel tests: the recorded H200
// machine (profiles/h200-xeon-16c.toml) with N copies of its CUDA device,
// links between every pair and a made-up CUDA self-test on each, plus the
// CUDA decoder's memory description as a build with it states it.
#pragma once

#include <cstdio>
#include <string>

#include "coli/planner/plan.h"
#include "planner_fixtures.h"

namespace coli::planner {

// A made-up CUDA self-test result (the decoder's int4 matvec at `gb_s`) on
// every CUDA device of `p`, as coli-probe --gpu-selftest records them.
inline void add_cuda_selftests(DeviceProfile& p, double gb_s) {
  for (const CudaDevice& d : p.gpus.cuda) {
    GpuKernelResult selftest;
    selftest.device = d.name;
    selftest.backend = "cuda";
    selftest.variant = "cuda_matvec_q4_g64";
    selftest.rows = 768;
    selftest.cols = 2048;
    selftest.passed = true;
    selftest.device_index = d.ordinal;
    selftest.gb_per_s.median = gb_s;
    p.measurements.gpu_kernels.push_back(selftest);
  }
}

// `gpus` copies of the H200, half on each of two NUMA nodes (CPUs 0-7 and
// 8-15), every pair joined by `link_gbs` per direction (0: no link entry),
// a 63 GB/s PCIe 5 x16 host link each, and a CUDA self-test of 2000 GB/s.
inline DeviceProfile made_up_host(int gpus, double link_gbs, const std::string& path = "nvlink") {
  DeviceProfile p = h200();
  const CudaDevice base = p.gpus.cuda.at(0);
  p.gpus.cuda.clear();
  for (int i = 0; i < gpus; ++i) {
    CudaDevice d = base;
    d.ordinal = i;
    char uuid[40];
    std::snprintf(uuid, sizeof uuid, "%030d%02d", 0, i);
    d.uuid = uuid;
    d.numa_node = i < (gpus + 1) / 2 ? 0 : 1;
    d.local_cpus = *CpuSet::parse(d.numa_node == 0 ? "0-7" : "8-15");
    d.pcie_generation = 5;
    d.pcie_width = 16;
    d.host_link_gbs = 63;
    p.gpus.cuda.push_back(d);
  }
  add_cuda_selftests(p, 2000);
  p.gpus.cuda_status = std::to_string(gpus) + " devices (made up from the recorded H200)";
  for (int a = 0; a < gpus && link_gbs > 0; ++a) {
    for (int b = a + 1; b < gpus; ++b) p.gpus.links.push_back({a, b, path, 18, link_gbs, true, 0, "spec:made-up"});
  }
  return p;
}

inline BackendMemory cuda_decoder() {
  BackendMemory b = backend::cuda_backend_memory({.kind = backend::BackendKind::cuda, .name = "cuda"});
  b.engine_runs_experts = true;
  b.engine_runs_expert_parallel = false;  // as in a build without the CUDA decoder: tests that want it say so
  return b;
}

inline PlanRequest spread(const std::string& gpus) {
  PlanRequest request;
  request.gpus = gpus;
  request.backend = cuda_decoder();
  return request;
}

}  // namespace coli::planner
