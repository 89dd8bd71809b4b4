// coli: convert a Hugging Face MoE checkpoint to a container, run it, serve it.
//   coli convert --model DIR --out FILE [--experts q4_g64|q8_row|f32]
//   coli run --model FILE --prompt TEXT [--threads N --cap N --pin N --max-tokens N ...]   (coli_run_cmd.h)
//   coli serve --model FILE [--port N --api-key KEY ...]                                   (serve/serve_command.h)
//   coli perplexity --model FILE --text FILE [--base FILE]                                 (coli_perplexity_cmd.h)
//   coli profile ...                                                                      (coli_profile_cmd.h)
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "coli/base/clock.h"
#include "coli/base/text.h"
#include "coli/cli/command_line.h"
#include "coli/convert/convert.h"
#include "coli_perplexity_cmd.h"
#include "coli_profile_cmd.h"
#include "coli_run_cmd.h"
#include "serve/serve_command.h"

namespace {

using Clock = std::chrono::steady_clock;
using coli::seconds_since;

int run_convert(const std::string& model_dir, const std::string& out, const std::string& experts,
                const std::string& dense_name, const std::string& tokenizer) {
  auto format = coli::convert::parse_expert_format(experts);
  auto dense = coli::convert::parse_dense_format(dense_name);
  if (!format || !dense) {
    std::fprintf(stderr, "coli convert: %s\n", (!format ? format.error() : dense.error()).message.c_str());
    return 2;
  }
  const auto start = Clock::now();
  auto report = coli::convert::convert_model(model_dir, out, *format, *dense,
                                             [](std::string_view line) { std::fprintf(stderr, "coli convert: %.*s\n", static_cast<int>(line.size()), line.data()); },
                                             tokenizer);
  if (!report) {
    std::fprintf(stderr, "coli convert: %s\n", report.error().message.c_str());
    return 1;
  }
  std::printf("converted %s -> %s in %.2f s: %llu dense tensors (%s), %llu experts of %s (source %s each), file %s, "
              "read back against its checksums\n",
              model_dir.c_str(), out.c_str(), seconds_since(start), static_cast<unsigned long long>(report->dense_tensors),
              coli::format_bytes(report->dense_bytes).c_str(), static_cast<unsigned long long>(report->experts),
              coli::format_bytes(report->expert_record_bytes).c_str(),
              coli::format_bytes(report->source_bytes_per_expert).c_str(), coli::format_bytes(report->file_bytes).c_str());
  std::string carried;
  for (const std::string& name : report->runtime_files) carried += (carried.empty() ? "" : ", ") + name;
  std::printf("carries for running: %s\n", carried.empty() ? "no tokenizer (coli run needs --tokenizer or --prompt-ids)" : carried.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coli: run huge Mixture-of-Experts models on the machine you have"};
  app.require_subcommand(1);

  std::string model_dir, out, experts = "q4_g64", dense = "source", convert_tokenizer;
  CLI::App* convert = app.add_subcommand("convert", "Convert a Hugging Face checkpoint directory into a coli container (read back against "
                                                           "its checksums before it is published; a tensor holding NaN or Inf is refused)");
  convert->add_option("--model", model_dir, "Checkpoint directory (config.json + *.safetensors)")->required()->check(CLI::ExistingDirectory);
  convert->add_option("--out", out, "Container file to write (atomically)")->required();
  convert->add_option("--experts", experts, "Routed expert format: q4_g64 (int4), q8_row (int8) or f32")->capture_default_str();
  convert->add_option("--dense", dense, "Dense projections: source (keep dtype), q8_row (int8) or q4_g64 (int4)")->capture_default_str();
  convert->add_option("--tokenizer", convert_tokenizer,
                      "Tokenizer the container carries: a tokenizer.json or a GGUF vocabulary (default: the model directory's "
                      "tokenizer.json; its tokenizer_config.json and generation_config.json come along)")
      ->check(CLI::ExistingFile);

  coli::tools::RunCommand run_cmd(app);  // coli run ...
  coli::tools::ServeCommand serve_cmd(app);  // coli serve ... (docs/serve.md)
  coli::tools::PerplexityCommand perplexity_cmd(app);  // coli perplexity ... (docs/quality.md)
  const coli::tools::ProfileCommand profile_cmd(app);  // coli profile ... (docs/fleet.md)
  app.footer("Exit status: 0 done, 1 error (a file, the model, the machine), 2 usage, 3 refused (the plan does not "
             "fit this machine).");
  coli::cli::add_version_flag(app, "coli");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;

  if (profile_cmd.parsed()) return profile_cmd.run();
  if (convert->parsed()) return run_convert(model_dir, out, experts, dense, convert_tokenizer);
  if (serve_cmd.parsed()) return serve_cmd.run();
  if (perplexity_cmd.parsed()) return perplexity_cmd.run();
  return run_cmd.run();
}
