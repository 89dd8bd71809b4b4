// `coli run`: generate text with a converted model, from one prompt (text,
// a file, stdin or token ids) or, with --chat and no prompt, a conversation
// one line per user turn. Registered on coli's CLI11 app; run() after
// parsing when parsed() says this subcommand was given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine_setup.h"

namespace coli::tools {

struct RunArgs {
  EngineArgs engine;
  SamplingArgs sampling;
  std::string prompt, prompt_file;  // --prompt TEXT, --prompt-file FILE ("-": stdin)
  std::vector<std::int32_t> prompt_ids;
  int max_tokens = -1;                 // --max-tokens; < 0: until an end token or the context is full
  std::optional<std::int32_t> eos_id;  // --eos-id (default: the tokenizer's)
  std::vector<std::string> stops;      // --stop TEXT (repeatable)
  bool ignore_eos = false;             // --ignore-eos: generate through EOS and turn ends (llama.cpp's flag)
  bool no_bos = false;                 // --no-bos
  bool chat = false;                   // --chat: the model's chat format; without a prompt, a conversation
  bool json_stats = false;             // --json: the statistics as one JSON object on stderr
  bool report = false;                 // --report: the engine's own accounting even without a plan
  std::string system, chat_template;   // --system TEXT, --chat-template NAME (implies --chat)
};

class RunCommand {
 public:
  explicit RunCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  int run();

 private:
  int run_prompt();        // one prompt, one generation
  int run_conversation();  // --chat without a prompt: turns from stdin
  CLI::App* command_ = nullptr;
  RunArgs args_;
};

}  // namespace coli::tools
