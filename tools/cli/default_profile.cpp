#include "coli/cli/default_profile.h"

#include "coli/probe/fleet_machine.h"
#include "coli/probe/probe.h"

namespace coli::cli {

namespace fs = std::filesystem;

Result<ChosenProfile> choose_profile(const std::string& explicit_profile) {
  if (!explicit_profile.empty()) return ChosenProfile{explicit_profile, "--profile"};
  const fs::path own = default_profile_path();
  std::error_code error;
  if (fs::exists(own, error)) return ChosenProfile{own, "this machine's profile, where coli-probe writes it"};
  // No profile of its own: a shared one of this machine's class (a quick
  // probe, facts only, tells the class).
  auto live = fleet::probe_live();
  const auto path = fleet::profile_search_path();
  if (live) {
    if (auto match = fleet::find_class_match(path, live->identity.equivalence_class)) {
      return ChosenProfile{match->path, "shared profile of this machine's class " + live->identity.equivalence_class +
                                            " (" + match->origin + ")"};
    }
  }
  std::string looked;
  for (const fleet::SearchEntry& entry : path) looked += (looked.empty() ? "" : ", ") + entry.path.string();
  return make_error("no --profile given and no device profile of this machine found (looked in " + looked +
                    "): run coli-probe, which writes " + own.string() + ", or give --profile FILE");
}

}  // namespace coli::cli
