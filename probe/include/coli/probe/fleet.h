// Fleet profiles (docs/fleet.md): the equivalence class that says which
// machines may share tuned results, the live re-validation of a shared
// profile, export/import with a content checksum, merging the measurements of
// several machines of one class, and the profile search path. Pure functions
// over DeviceProfile, except where a function says it reads files.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli::fleet {

inline constexpr std::string_view kClassVersion = "class-v1";

// ------------------------------------------------------------ identity

std::string fnv1a64_hex(std::string_view text);  // 16 lowercase hex digits (the fingerprint's hash)

// One field of the class basis. Two machines are of one class when every
// `class_value` is equal; `shown` is what a human reads in a mismatch
// (e.g. class_value "13" and shown "13.0" for a CUDA driver version).
struct ClassField {
  std::string field;        // "cpu.model", "cpu.kinds[0].cores", "gpus.cuda[0].driver_version", "kernel_catalogue"
  std::string class_value;
  std::string shown;
};

// The class fields of a profile's facts plus a kernel catalogue digest.
std::vector<ClassField> class_fields(const DeviceProfile& profile, std::string_view kernel_catalogue);
// Sets profile.identity from its facts and the build's kernel catalogue digest.
void assign_identity(DeviceProfile& profile, std::string_view kernel_catalogue);
// Empty when the stored [identity] matches the file's own facts; else the problem.
std::string identity_problem(const DeviceProfile& profile);

// Driver "major" as the class compares it: CUDA 13000 -> 13; Vulkan drivers
// are vendor-encoded (NVIDIA: bits 22-31; others: VK_API_VERSION_MAJOR).
int cuda_driver_major(int driver_version);
std::string cuda_driver_text(int driver_version);  // 13000 -> "13.0"
int vulkan_driver_major(std::uint32_t vendor_id, std::uint32_t driver_version);

// ------------------------------------------------------ re-validation

struct FieldDifference {
  std::string field;          // dotted path as in the file
  std::string profile_value;  // what the shared profile says
  std::string live_value;     // what this machine says
  std::string line() const;   // "field: profile X, this machine Y"
};

struct Revalidation {
  bool class_match = false;
  bool tuned_values_used = false;                 // measurements from the shared profile
  bool tuned_threads_used = false;                // its thread recommendation
  std::vector<FieldDifference> class_mismatches;  // why its tuned values were not used
  std::vector<FieldDifference> live_differences;  // memory, cgroup, usable CPUs, free VRAM: live values used
  std::vector<std::string> notes;                 // other decisions, one sentence each
  // This machine's live facts (cpu, memory, gpus, identity) plus the shared
  // profile's tuned values where allowed: what a planner may use.
  DeviceProfile effective;
  // Human report, one line each, ending with the advice to re-probe when
  // anything did not match.
  std::vector<std::string> report(const std::string& profile_name) const;
};

// `live` is a quick probe of this machine with its identity assigned. Memory
// headroom, cgroup limits, usable CPUs and GPU memory are ALWAYS the live
// ones; measurements and the thread recommendation come from `shared` only
// when the classes match (and the threads only when their PUs are usable here).
Revalidation revalidate(const DeviceProfile& shared, const DeviceProfile& live);

// ------------------------------------------------------ export / import

std::string sha256_hex(std::string_view data);  // FIPS 180-4, lowercase hex

struct ExportOptions {
  bool keep_private = false;    // keep host name, GPU UUIDs, disk directory
  std::string exported_utc;     // when empty: now
};
// The exported file's text: host-private data dropped (unless asked), an
// [export] table with the sha256 of the text without its checksum line.
std::string export_profile(DeviceProfile profile, const ExportOptions& options);

// Validates an exported file's text completely: TOML and every field (the
// reader's bounds), the identity against the facts, and, when it has an
// [export] table, the checksum. Errors name the file and field.
Result<DeviceProfile> verify_shared_profile(std::string_view text, const std::string& source_name);
// Reads a file and verifies it as above (what coli-plan and coli run load).
Result<DeviceProfile> load_shared_profile(const std::string& path);

// ------------------------------------------------------ merge

struct MachineScore {
  std::string name;      // file name, else host
  double ratio = 1;      // lowest per-kind median of (its median / the other machines' median)
  int points = 0;        // points of that kind it shares with a peer
  bool outlier = false;  // ratio <= kOutlierRatio
  std::string kind;      // "memory_bandwidth", "disk", "gpu_kernels", "cpu_kernels", "uploads": where the ratio comes from
};
inline constexpr double kOutlierRatio = 0.8;  // 20% or more slower than its peers

struct MergeResult {
  DeviceProfile merged;
  std::vector<MachineScore> machines;
  std::vector<std::string> findings;  // outliers, one sentence each, by name
};

// Profiles of one class (refused otherwise, naming the file and field):
// per measurement point, samples summed, median of the machines' medians,
// best of bests, worst of worsts, spread recomputed (the tuning phase's
// kernel points too, which the speed model prices plans with); OpenMP step
// costs and reads beside compute are the machines' medians. Outliers are
// reported and left out of the merged numbers.
Result<MergeResult> merge_profiles(const std::vector<DeviceProfile>& profiles, const std::vector<std::string>& names);

// Every field whose value differs between two profiles ("path: A -> B").
std::vector<FieldDifference> diff_profiles(const DeviceProfile& a, const DeviceProfile& b);

}  // namespace coli::fleet
