// DeviceProfile <-> TOML (and JSON for --json). Parsing validates every
// field; an error names the file, the line and the field and says what to do.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli {

std::string profile_to_toml(const DeviceProfile& profile);
std::string profile_to_json(const DeviceProfile& profile);

// Recorded GPU facts: a TOML file holding only the profile's [gpus] table
// (tests/fixtures/gpus/*/gpus.toml); what `coli-probe --replay-gpus` reads.
std::string gpus_to_toml(const GpuFacts& gpus);
Result<GpuFacts> parse_gpu_record(std::string_view toml_text, const std::string& source_name);
// "" when every CUDA device's local_cpus are the machine's PUs and its
// numa_node one of cpu.numa_nodes; else what is wrong (a GPU record of
// another machine). Reading a profile and replaying a GPU record check it.
std::string gpu_locality_problem(const DeviceProfile& profile);

// `source_name` (usually the file path) prefixes every error message.
Result<DeviceProfile> parse_profile(std::string_view toml_text, const std::string& source_name);

Result<DeviceProfile> load_profile(const std::filesystem::path& path);
// Sets fingerprint and fingerprint_basis from the profile's hardware identity.
void assign_fingerprint(DeviceProfile& profile);

Status save_profile(const std::filesystem::path& path, const DeviceProfile& profile);  // atomic

}  // namespace coli
