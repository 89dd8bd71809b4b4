// `coli serve`: load a model once (planned from the profile, as coli run
// does) and answer OpenAI-compatible requests over HTTP until SIGINT or
// SIGTERM (docs/serve.md). Registered on coli's CLI11 app; run() after
// parsing when parsed() says this subcommand was given.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "engine_setup.h"
#include "server.h"

namespace coli::tools {

class ServeCommand {
 public:
  explicit ServeCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  int run();

 private:
  CLI::App* command_ = nullptr;
  EngineArgs engine_;
  SamplingArgs sampling_;
  serve::ServerOptions server_;
  std::string chat_template_;
};

}  // namespace coli::tools
