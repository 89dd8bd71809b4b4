// `coli profile list | show | diff A B | validate | export | import | merge`:
// fleet profiles for admins (docs/fleet.md). Registered on coli's CLI11 app;
// run() after parsing when parsed() says this subcommand was given.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace coli::tools {

class ProfileCommand {
 public:
  explicit ProfileCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  int run() const;

 private:
  int list() const;
  int show() const;
  int diff() const;
  int validate() const;
  int export_file() const;
  int import_files() const;
  int merge() const;

  CLI::App* command_ = nullptr;
  CLI::App *list_ = nullptr, *show_ = nullptr, *diff_ = nullptr, *validate_ = nullptr, *export_ = nullptr,
           *import_ = nullptr, *merge_ = nullptr;
  std::vector<std::string> files_;
  std::string out_, dir_, replay_machine_, replay_gpus_;
  bool keep_private_ = false, force_ = false, no_live_ = false;
};

}  // namespace coli::tools
