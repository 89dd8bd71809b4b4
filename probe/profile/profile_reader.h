// What profile_read*.cpp share (internal to coli_profile_io): the limits a
// profile's numbers must respect and the field reader (coli/probe/toml_fields.h)
// with the profile's hint.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "coli/base/cpu_set.h"
#include "coli/probe/device_profile.h"
#include "coli/probe/toml_fields.h"

namespace coli::profile_detail {

constexpr std::int64_t kMaxCpus = 1 << 16;                  // no machine has more logical CPUs
constexpr std::int64_t kMaxBytes = kTomlMaxBytes;
constexpr double kMaxGbPerS = 1e5;                          // 100 TB/s: more is a corrupt number
constexpr std::int64_t kMaxU32 = 0xffffffffLL;
constexpr std::int64_t kMaxSharedMemory = 16 << 20;  // no GPU has 16 MiB of shared memory per workgroup
constexpr const char* kHint = "fix the field or run coli-probe again to write a fresh profile";

using Reader = TomlFields;


SampleStats read_stats(const Reader& r);
Measurements read_measurements(const Reader& r, const CpuFacts& cpu);
GpuFacts read_gpus(const Reader& r);
// Schema 5 (profile_read_topology.cpp): optional fields, checked when present.
void read_cuda_topology(const Reader& r, CudaDevice& d);
std::vector<GpuLink> read_links(const Reader& r, const std::vector<CudaDevice>& cuda);

}  // namespace coli::profile_detail
