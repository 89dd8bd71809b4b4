#include "coli/cli/command_line.h"

#include "coli/container/container.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/plan_io.h"
#include "coli/probe/device_profile.h"
#include "coli_git_commit.h"  // generated at build time (cmake/GitCommit.cmake)

namespace coli::cli {

std::string version_text(std::string_view program) {
  return std::string(program) + " " + COLI_VERSION + " (commit " + COLI_GIT_COMMIT + ")\n" +
         "schemas: device profile " + std::to_string(kDeviceProfileSchemaVersion) + ", plan " +
         std::to_string(planner::kPlanSchemaVersion) + ", container " + std::to_string(container::kFormatVersion) +
         ", usage history " + std::to_string(experts::kUsageHistoryVersion);
}

void add_version_flag(CLI::App& app, std::string_view program) {
  app.set_version_flag("--version", version_text(program), "Print the version, git commit and file-format versions");
}

std::optional<int> parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int printed = app.exit(error);  // help, version or the error with its usage hint
    return printed == 0 ? kExitOk : kExitUsage;
  }
  return std::nullopt;
}

}  // namespace coli::cli
