// The parts of fleet profiles that need this machine or this build (library
// coli_fleet): the build's kernel catalogue digest, a live quick probe with its
// identity, and the profile search path of this machine's directories.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/probe/fleet.h"
#include "coli/probe/probe.h"

namespace coli::fleet {

// "gemv-v1:<16 hex>": FNV-1a over every catalogue variant's name, format,
// kind, spec-constant defaults, shared memory, requirements, rank and SPIR-V
// words. Changes whenever a kernel of this build changes.
std::string kernel_catalogue_digest();

// A quick probe (facts only) with its identity assigned: what this machine
// is right now. `options.quick` is forced on.
Result<DeviceProfile> probe_live(ProbeOptions options = {});

// The shared profile re-validated against a live quick probe of this machine.
Result<Revalidation> revalidate_here(const DeviceProfile& shared, ProbeOptions options = {});

struct SearchEntry {
  std::filesystem::path path;  // a file or a directory of *.toml
  std::string origin;          // "--profile", "COLI_PROFILE_PATH", "user", "system", "installed"
};
// --profile FILE, then $COLI_PROFILE_PATH (':'-separated files or directories),
// then the user's config dir (device-profile.toml, profiles/), then the
// system dir ($COLI_SYSTEM_PROFILE_DIR, else /etc/coli/profiles), then the
// curated profiles installed with the programs (share/coli/profiles).
std::vector<SearchEntry> profile_search_path(const std::optional<std::filesystem::path>& explicit_profile = {});
std::filesystem::path installed_profile_dir();  // <prefix>/share/coli/profiles of the running program
std::filesystem::path user_profile_dir();    // <config>/coli/profiles: where import writes
std::filesystem::path system_profile_dir();  // $COLI_SYSTEM_PROFILE_DIR, else /etc/coli/profiles

struct FoundProfile {
  std::filesystem::path path;
  std::string origin;
  std::optional<DeviceProfile> profile;  // nullopt: unreadable, see error
  std::string error;
};
// Every profile file on the search path, in order (directories: *.toml sorted;
// a file met twice is listed once).
std::vector<FoundProfile> find_profiles(const std::vector<SearchEntry>& path);
// The first readable profile on the path with this class, other than `except`.
std::optional<FoundProfile> find_class_match(const std::vector<SearchEntry>& path, const std::string& equivalence_class,
                                             const std::filesystem::path& except = {});

// One sentence for coli-probe: the first shared profile of `probed`'s class on
// the search path (other than `except`, the file just written), or where it looked.
std::string describe_class_match(const DeviceProfile& probed, const std::filesystem::path& except);

}  // namespace coli::fleet
