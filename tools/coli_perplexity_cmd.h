// `coli perplexity --model M --text FILE [--base F32_MODEL] [--ctx N]`: the
// perplexity of a text in llama-perplexity's windows and, against a base
// model (the f32 container of the same checkpoint), the KL divergence and
// top-1 agreement of every scored token, as `llama-perplexity
// --kl-divergence` reports them. Progress on stderr, the JSON result on stdout.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "engine_setup.h"

namespace coli::tools {

class PerplexityCommand {
 public:
  explicit PerplexityCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  int run();

 private:
  CLI::App* command_ = nullptr;
  EngineArgs engine_;
  std::string text_, base_, record_, save_logits_;  // --save-logits FILE: a base for later runs  // --record FILE: the quality file to add this measurement to
  int window_ = 512;  // --ctx: tokens per window (llama-perplexity's -c, default 512)
  int chunks_ = -1;  // --chunks: the first N windows only (llama-perplexity's --chunks)
};

}  // namespace coli::tools
