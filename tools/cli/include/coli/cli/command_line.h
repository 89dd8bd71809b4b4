// What every coli program's command line shares: --version, and CLI11's
// parse mapped onto coli's exit codes (exit_codes.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "coli/cli/exit_codes.h"

namespace coli::cli {

// "PROGRAM VERSION (commit C)" and a line with the file-format versions this
// build reads and writes (profile, plan, container, usage history).
std::string version_text(std::string_view program);

// --version prints version_text(program) on stdout and exits 0.
void add_version_flag(CLI::App& app, std::string_view program);

// Parses argv. nullopt: go on. A value: the program exits with it (0 after
// --help or --version, kExitUsage after a usage error, which CLI11 printed).
std::optional<int> parse(CLI::App& app, int argc, const char* const* argv);

}  // namespace coli::cli
