// Which device profile coli-plan and coli run use when no --profile is given
// (docs/fleet.md, "Search path"): this machine's own profile where coli-probe
// writes it, else the first profile on the search path whose class is this
// machine's. The caller prints `why`, so the user sees which file was used.
#pragma once

#include <filesystem>
#include <string>

#include "coli/base/result.h"

namespace coli::cli {

struct ChosenProfile {
  std::filesystem::path path;
  std::string why;  // "the default profile (coli-probe writes it there)", "shared profile of this machine's class ..."
};

// `explicit_profile` non-empty: that file. Otherwise the default, or an error
// that names where it looked and says to run coli-probe or give --profile.
Result<ChosenProfile> choose_profile(const std::string& explicit_profile);

}  // namespace coli::cli
