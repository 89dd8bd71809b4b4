#include "coli_run_cmd.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "chat_prompt.h"
#include "coli/base/files.h"
#include "coli/base/process_memory.h"
#include "coli/base/text.h"
#include "coli/cli/exit_codes.h"
#include "generation.h"

namespace coli::tools {

namespace {

// --prompt-file: the whole file (or stdin for "-") as the prompt text, as is.
Result<std::string> read_prompt_file(const std::string& path) {
  if (path != "-") {
    auto text = read_text_file(path);
    if (!text) return make_error("--prompt-file " + path + ": " + text.error().message);
    return *text;
  }
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) return make_error("--prompt-file -: reading stdin failed");
  return text;
}

// A text prompt's tokens (generation.h's encode_prompt), saying so when BOS was added.
std::vector<std::int32_t> encode_and_say(const Tokenizer& tokenizer, const std::string& text, bool no_bos) {
  bool added_bos = false;
  std::vector<std::int32_t> prompt = encode_prompt(tokenizer, text, !no_bos, &added_bos);
  if (added_bos) {
    std::fprintf(stderr, "coli run: prompt starts with BOS (token %d), as the tokenizer asks (--no-bos leaves it out)\n",
                 *tokenizer.bos_id());
  }
  return prompt;
}

struct ChatSetup {
  ChatFormat format;
  std::optional<std::int32_t> turn_end;  // the token ending the assistant's turn
};

Result<ChatSetup> chat_setup(const RunArgs& args, const Tokenizer& tokenizer) {
  auto format = chat_format_for(args.engine.model, tokenizer, args.chat_template);
  if (!format) return format.error();
  std::fprintf(stderr, "coli run: chat format %s%s\n", std::string(chat_format_name(*format)).c_str(),
               args.chat_template.empty() ? " (the model's template; --chat-template overrides)" : " (--chat-template)");
  return ChatSetup{*format, tokenizer.find_token(chat_turn_end(*format))};
}

// Generation ends at the end-of-sequence token and the chat turn's end (not
// printed), as llama.cpp's does, unless --ignore-eos.
GenerationLimits limits_of(const RunArgs& args, const Tokenizer* tokenizer, const std::optional<ChatSetup>& chat) {
  GenerationLimits limits;
  limits.max_tokens = args.max_tokens;
  limits.stop_strings = args.stops;
  if (args.ignore_eos) return limits;
  if (args.eos_id) limits.end_tokens.push_back(*args.eos_id);
  else if (tokenizer && tokenizer->eos_id()) limits.end_tokens.push_back(*tokenizer->eos_id());
  if (chat && chat->turn_end) limits.end_tokens.push_back(*chat->turn_end);
  return limits;
}

std::string stop_name(const GenerationResult& result, const std::optional<ChatSetup>& chat) {
  if (result.stop != StopReason::end_token) return std::string(stop_reason_name(result.stop));
  return chat && chat->turn_end == result.end_token ? "turn_end" : "eos";
}

double decode_tok_s(const GenerationResult& r) {
  return r.generated > 1 && r.decode_seconds > 0 ? (r.generated - 1) / r.decode_seconds : 0.0;
}

void say_why_it_stopped(const GenerationResult& result, const std::optional<ChatSetup>& chat, int context) {
  const std::string stop = stop_name(result, chat);
  if (stop == "eos") std::fprintf(stderr, "coli run: stopped at the end-of-sequence token %d (--ignore-eos generates on)\n", *result.end_token);
  if (stop == "turn_end") std::fprintf(stderr, "coli run: stopped at the end of the assistant's turn (token %d)\n", *result.end_token);
  if (stop == "stop_string") std::fprintf(stderr, "coli run: stopped at the stop string \"%s\"\n", result.stop_string->c_str());
  if (stop == "context_full") std::fprintf(stderr, "coli run: stopped: the context of %d positions is full (--ctx)\n", context);
}

MeasuredSpeed measured_speed(const GenerationResult& result) {
  MeasuredSpeed measured{result.prompt_tokens / result.prefill_seconds, result.prompt_tokens, decode_tok_s(result),
                         result.prompt_tokens + (result.generated - 1) / 2.0};
  measured.prompt_reads = static_cast<double>(result.prompt_misses);
  if (result.decode_passes > 0)
    measured.decode_reads_per_token = static_cast<double>(result.decode_misses) / static_cast<double>(result.decode_passes);
  measured.decode_tokens = static_cast<int>(result.decode_passes);
  measured.prompt_page_faults = result.prompt_page_faults;
  measured.first_pass = result.first_pass;
  return measured;
}

void print_json_stats(const GenerationResult& result, const LoadedEngine& engine, const std::optional<ChatSetup>& chat) {
  const auto& stats = engine.model->stats();
  const double lookups = static_cast<double>(stats.expert_hits + stats.expert_misses);
  nlohmann::json json = {
      {"schema_version", 1}, {"load_s", engine.load_seconds}, {"ttft_s", result.prefill_seconds},
      {"prompt_tokens", result.prompt_tokens}, {"prefill_tok_s", result.prompt_tokens / result.prefill_seconds},
      {"generated_tokens", result.generated}, {"decode_tok_s", decode_tok_s(result)}, {"stop", stop_name(result, chat)},
      {"expert_hits", stats.expert_hits}, {"expert_misses", stats.expert_misses},
      {"hit_rate", lookups > 0 ? static_cast<double>(stats.expert_hits) / lookups : 0.0},
      {"expert_bytes_read", stats.expert_bytes_read}, {"expert_read_s", stats.expert_read_seconds},
      {"expert_reads_timed", stats.expert_reads_timed}, {"preloaded_experts", stats.preloaded_experts},
      {"prompt_expert_misses", result.prompt_misses}, {"decode_expert_misses", result.decode_misses},
      {"prompt_page_faults", result.prompt_page_faults}, {"kernel", stats.cpu_kernel},
      {"prefill_threads", stats.prefill_thread_set}, {"decode_threads", stats.decode_thread_set}, {"io", stats.io_mode},
      {"peak_rss_bytes", process_peak_resident_bytes()}};
  if (engine.planned) {
    const RunPrediction predicted = prediction_for_run(*engine.planned, measured_speed(result));
    if (predicted.speed.available) {
      json["predicted"] = {{"decode_tok_s", predicted.speed.decode_tok_per_s},
                           {"prefill_tok_s", predicted.prefill_tok_s()},  // as its process's first pass, where priced
                           {"prefill_warm_tok_s", predicted.speed.prefill_tok_per_s},
                           {"first_pass_s", predicted.first_pass.seconds},
                           {"first_pass_fresh_bytes", predicted.first_pass.fresh_bytes},
                           {"disk_read_s", predicted.speed.disk_read_seconds},
                           {"prompt_disk_reads", predicted.speed.prefill_disk_reads},
                           {"decode_disk_reads_per_token", predicted.speed.decode_disk_reads},
                           {"for_this_run", predicted.for_this_run},
                           {"prompt_tokens", predicted.prompt_tokens},
                           {"decode_depth", predicted.decode_depth}};
      if (const planner::SpeedBand& band = predicted.speed.band; band.made()) {  // the probe's slowest and fastest rounds
        json["predicted"]["decode_band_tok_s"] = {band.decode_slowest, band.decode_fastest};
        json["predicted"]["prefill_band_tok_s"] = {predicted.as_first_pass(band.prefill_slowest),
                                                   predicted.as_first_pass(band.prefill_fastest)};
      }
    }
  }
  std::fprintf(stderr, "%s\n", json.dump().c_str());
}

void print_stats(const GenerationResult& result, const LoadedEngine& engine, bool report) {
  const auto& stats = engine.model->stats();
  const double lookups = static_cast<double>(stats.expert_hits + stats.expert_misses);
  std::fprintf(stderr, "---\nload %.2f s | TTFT %.3f s | prefill %.1f tok/s (%d tokens) | decode %.1f tok/s (%d tokens)\n",
               engine.load_seconds, result.prefill_seconds, result.prompt_tokens / result.prefill_seconds,
               result.prompt_tokens, decode_tok_s(result), result.generated);
  // The I/O threads' mean time per read (each timed alone; reads in flight
  // together overlap), over the reads they timed: a miss's, and the
  // preload's and speculative prefetch's, which the miss count leaves out.
  const std::string read_time =
      stats.expert_misses > 0 && stats.expert_reads_timed > 0
          ? " (" + format_fixed(stats.expert_read_seconds / static_cast<double>(stats.expert_reads_timed) * 1e3, 3) + " ms a read)"
          : std::string();
  std::fprintf(stderr, "experts: hit rate %.1f%% (%llu hits, %llu misses), %s read from disk%s | kernel %s | threads: prefill %s, decode %s | I/O %s | peak RSS %s\n",
               lookups > 0 ? 100.0 * static_cast<double>(stats.expert_hits) / lookups : 0.0,
               static_cast<unsigned long long>(stats.expert_hits), static_cast<unsigned long long>(stats.expert_misses),
               format_bytes(stats.expert_bytes_read).c_str(), read_time.c_str(), stats.cpu_kernel.c_str(),
               stats.prefill_thread_set.empty() ? "-" : stats.prefill_thread_set.c_str(),
               stats.decode_thread_set.empty() ? "-" : stats.decode_thread_set.c_str(), stats.io_mode.c_str(),
               format_bytes(process_peak_resident_bytes()).c_str());
  if (engine.planned) {
    print_plan_vs_actual(engine.planned->plan, stats, process_peak_resident_bytes());
    MeasuredSpeed measured = measured_speed(result);
    measured.cold_cache = stats.experts_stream && stats.preloaded_experts == 0;
    print_speed_vs_plan(prediction_for_run(*engine.planned, measured), measured);
  } else if (report) {
    print_measured(stats, process_peak_resident_bytes());
  }
}

// Prints a piece as it comes: its text, or its id without a tokenizer.
bool print_piece(const GeneratedPiece& piece, bool has_tokenizer) {
  if (has_tokenizer) std::fputs(piece.text.c_str(), stdout);
  else if (piece.token) std::printf("%d ", *piece.token);
  std::fflush(stdout);
  return true;
}


// The tokenizer, the model's sampling defaults for what the command line
// left unset, and the sampling options checked.
Result<Tokenizer> prepare_text_run(RunArgs& a) {
  auto loaded = load_tokenizer(a.engine.model, a.engine.tokenizer);
  if (!loaded) return loaded.error();
  const std::string applied = apply_generation_defaults(loaded->generation_config, a.sampling);
  if (!applied.empty()) {
    std::fprintf(stderr, "coli run: sampling as the model's generation_config.json says: %s (options override)\n", applied.c_str());
  }
  Tokenizer tokenizer = std::move(loaded->tokenizer);
  // Reading a carried tokenizer parses the index and decodes the file:
  // megabytes of heap freed by now, which glibc keeps unless asked. Give
  // them back so the run's RSS is the plan's (the weights are mmap-served).
  malloc_trim(0);
  return tokenizer;
}

int load_failed(const Error& error, int exit_code) {
  std::fprintf(stderr, "coli run: %s\n", error.message.c_str());
  return exit_code;
}

}  // namespace

int RunCommand::run_prompt() {
  RunArgs& a = args_;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatSetup> chat;
  std::vector<std::int32_t> prompt = a.prompt_ids;
  if (prompt.empty()) {
    auto loaded = prepare_text_run(a);
    if (!loaded) return load_failed(loaded.error(), cli::kExitError);
    tokenizer = std::move(*loaded);
    std::string text = a.prompt;
    if (!a.prompt_file.empty()) {
      auto read = read_prompt_file(a.prompt_file);
      if (!read) return load_failed(read.error(), cli::kExitError);
      text = std::move(*read);
    }
    if (a.chat) {
      auto setup = chat_setup(a, *tokenizer);
      if (!setup) return load_failed(setup.error(), cli::kExitUsage);
      chat = *setup;
      std::vector<ChatMessage> messages;
      if (!a.system.empty()) messages.push_back({"system", a.system});
      messages.push_back({"user", text});
      text = render_chat(chat->format, messages);
    }
    prompt = encode_and_say(*tokenizer, text, a.no_bos);
    if (prompt.empty()) return load_failed(Error{"the prompt is empty"}, cli::kExitUsage);
  }
  if (Status s = check_sampling(a.sampling.options); !s) return load_failed(s.error(), cli::kExitUsage);
  int exit_code = cli::kExitError;
  auto engine = load_engine(a.engine, {static_cast<int>(prompt.size()), tokenizer.has_value(), nullptr}, "coli run", &exit_code);
  if (!engine) return load_failed(engine.error(), exit_code);
  Generator generator(*engine->model, tokenizer ? &*tokenizer : nullptr);
  std::string prefill_op_times;  // printed after the generated text
  auto take_prefill_times = [&] {
    if (auto* times = engine->model->op_times()) {
      prefill_op_times = runtime::op_times_table(*times, "prefill");
      times->clear();
    }
  };
  auto result = generator.generate(prompt, a.sampling.options, limits_of(a, tokenizer ? &*tokenizer : nullptr, chat),
                                   [&](const GeneratedPiece& piece) { return print_piece(piece, tokenizer.has_value()); },
                                   take_prefill_times);
  if (!result) return load_failed(Error{"\ncoli run: " + result.error().message}, cli::kExitError);
  if (Status saved = save_history(engine->history, *engine->model, a.engine.usage_decay); !saved) {
    std::fprintf(stderr, "coli run: usage history not saved: %s\n", saved.error().message.c_str());
  }
  // The text alone on stdout (`coli run > out.txt` keeps only it); the statistics on stderr.
  std::fputs("\n", stdout);
  std::fflush(stdout);
  say_why_it_stopped(*result, chat, generator.context_size());
  if (a.json_stats) {
    print_json_stats(*result, *engine, chat);
    return cli::kExitOk;
  }
  print_stats(*result, *engine, a.report);
  if (auto* times = engine->model->op_times()) {
    std::fprintf(stderr, "\n%s\n%s", prefill_op_times.c_str(), runtime::op_times_table(*times, "decode").c_str());
  }
  return cli::kExitOk;
}

int RunCommand::run_conversation() {
  RunArgs& a = args_;
  auto tokenizer = prepare_text_run(a);
  if (!tokenizer) return load_failed(tokenizer.error(), cli::kExitError);
  auto chat = chat_setup(a, *tokenizer);
  if (!chat) return load_failed(chat.error(), cli::kExitUsage);
  if (Status s = check_sampling(a.sampling.options); !s) return load_failed(s.error(), cli::kExitUsage);
  int exit_code = cli::kExitError;
  // Turns of any length up to the context: the plan is sized for a prompt that fills it.
  auto engine = load_engine(a.engine, {0, true, nullptr}, "coli run", &exit_code);
  if (!engine) return load_failed(engine.error(), exit_code);
  Generator generator(*engine->model, &*tokenizer);
  const std::optional<ChatSetup> setup = *chat;
  const GenerationLimits limits = limits_of(a, &*tokenizer, setup);
  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  const std::size_t kept_on_clear = messages.size();
  const bool terminal = isatty(STDIN_FILENO) != 0;
  if (terminal) std::fprintf(stderr, "coli run: chat: one line per turn; /clear starts over, /exit or Ctrl-D ends\n");
  for (std::string line;;) {
    if (terminal) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/clear") {
      messages.resize(kept_on_clear);
      continue;
    }
    if (trim(line).empty()) continue;
    messages.push_back({"user", line});
    const std::vector<std::int32_t> prompt = encode_prompt(*tokenizer, render_chat(chat->format, messages), !a.no_bos);
    if (static_cast<int>(prompt.size()) >= generator.context_size()) {
      std::fprintf(stderr, "coli run: the conversation is %zu tokens and the context holds %d: /clear starts over\n",
                   prompt.size(), generator.context_size());
      messages.pop_back();
      continue;
    }
    auto result = generator.generate(prompt, a.sampling.options, limits,
                                     [](const GeneratedPiece& piece) { return print_piece(piece, true); });
    if (!result) return load_failed(Error{"\ncoli run: " + result.error().message}, cli::kExitError);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    messages.push_back({"assistant", result->text});
    if (a.json_stats) print_json_stats(*result, *engine, setup);
    else std::fprintf(stderr, "[prompt %d tokens (%d reused) at %.1f tok/s | %d tokens at %.1f tok/s | %s]\n", result->prompt_tokens,
                      result->reused_tokens, (result->prompt_tokens - result->reused_tokens) / result->prefill_seconds,
                      result->generated, decode_tok_s(*result), stop_name(*result, setup).c_str());
  }
  if (Status saved = save_history(engine->history, *engine->model, a.engine.usage_decay); !saved) {
    std::fprintf(stderr, "coli run: usage history not saved: %s\n", saved.error().message.c_str());
  }
  return cli::kExitOk;
}

RunCommand::RunCommand(CLI::App& app) {
  RunArgs& a = args_;
  command_ = app.add_subcommand("run", "Generate text with a converted model");
  CLI::App& cmd = *command_;
  add_engine_options(cmd, a.engine);
  auto* prompt = cmd.add_option("--prompt", a.prompt, "Prompt text");
  auto* ids = cmd.add_option("--prompt-ids", a.prompt_ids, "Prompt as token ids, space- or comma-separated (no tokenizer needed)")
                  ->delimiter(',');
  prompt->excludes(ids);
  cmd.add_option("--prompt-file", a.prompt_file, "Prompt text from this file, as is (\"-\": stdin)")->excludes(prompt)->excludes(ids);
  cmd.add_option("--max-tokens", a.max_tokens,
                 "Most tokens to generate; -1 (default): until the end-of-sequence token, the end of the chat turn, "
                 "a --stop string, or the full context")
      ->check(CLI::Range(-1, 1 << 24))
      ->capture_default_str();
  auto* eos = cmd.add_option("--eos-id", a.eos_id,
                             "The end-of-sequence token id that ends generation (default: the tokenizer's, "
                             "tokenizer.ggml.eos_token_id; none with --prompt-ids)")
                  ->check(CLI::Range(0, (1 << 30)));
  cmd.add_flag("--ignore-eos", a.ignore_eos, "Generate through the end-of-sequence token and the chat turn's end")->excludes(eos);
  cmd.add_option("--stop", a.stops, "Stop before this text (repeatable; it is not printed)");
  auto* chat = cmd.add_flag("--chat", a.chat,
                            "The model's chat format (its template recognised: chatml, llama3, llama2, mistral, deepseek3); "
                            "with --prompt/--prompt-file one user turn, without them a conversation, one user turn per "
                            "line of stdin (/clear starts over, /exit or end of input ends); stops at the end of each turn");
  chat->excludes(ids);
  cmd.add_option("--system", a.system, "With --chat: a system message before the user's")->needs(chat);
  cmd.add_option("--chat-template", a.chat_template,
                 "Chat format to use instead of recognising the model's template: chatml, llama3, llama2, mistral, deepseek3");
  cmd.add_flag("--json", a.json_stats,
               "Print the statistics as one JSON object on stderr (schema_version 1: load_s, ttft_s, prompt_tokens, "
               "prefill_tok_s, generated_tokens, decode_tok_s, stop, expert hits and misses, hit_rate, bytes read, kernel, "
               "threads, peak_rss_bytes, and with a plan its predicted tok/s) instead of the summary lines");
  cmd.add_flag("--no-bos", a.no_bos,
               "Do not start a text prompt with BOS (default: as the tokenizer says: SentencePiece and Llama 3 "
               "vocabularies, tokenizer.ggml.add_bos_token, a tokenizer.json post_processor template)");
  cmd.add_flag("--report", a.report,
               "Print memory per component and peak RSS at the end (with --plan/--profile: planned vs measured, always printed)");
  cmd.add_flag("--op-times", a.engine.op_times,
               "Print where the CPU forward passes spent their wall time, per op category (ms per token, % of the pass), "
               "for the prefill and for the decode steps");
  add_sampling_options(cmd, a.sampling);
}

int RunCommand::run() {
  RunArgs& a = args_;
  if (!a.chat_template.empty()) a.chat = true;
  const bool conversation = a.chat && a.prompt.empty() && a.prompt_file.empty();
  if (a.prompt.empty() && a.prompt_ids.empty() && a.prompt_file.empty() && !conversation) {
    std::fprintf(stderr, "coli run: give --prompt TEXT, --prompt-file FILE (- for stdin), --prompt-ids N... or --chat\n");
    return cli::kExitUsage;
  }
  finish_engine_args(*command_, a.engine, "coli run");
  finish_sampling_args(*command_, a.sampling);
  if (!a.stops.empty() && !a.prompt_ids.empty()) {
    std::fprintf(stderr, "coli run: --stop needs a tokenizer: give the prompt as text\n");
    return cli::kExitUsage;
  }
  return conversation ? run_conversation() : run_prompt();
}

}  // namespace coli::tools
