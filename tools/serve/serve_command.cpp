#include "serve_command.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <mutex>
#include <thread>

#include "chat_prompt.h"
#include "coli/cli/exit_codes.h"

namespace coli::tools {

namespace {

// SIGINT and SIGTERM end the server from a thread of their own (a signal
// handler may not stop it): blocked first, so that every thread started
// later (the model's, the server's) inherits the mask and none dies of them.
// Before the server runs they end the process (a load is not worth keeping).
// SIGPIPE is ignored: a client that went away is a failed write.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);
    thread_ = std::thread([this] { watch(); });
  }
  ~SignalWatcher() {
    done_ = true;
    thread_.join();
  }
  void on_signal(std::function<void()> action) {
    std::lock_guard lock(lock_);
    action_ = std::move(action);
  }

 private:
  void watch() {
    const timespec tick{0, 200'000'000};
    while (!done_) {
      const int number = sigtimedwait(&set_, nullptr, &tick);
      if (number <= 0) continue;
      std::lock_guard lock(lock_);
      if (!action_) {
        std::fprintf(stderr, "coli serve: %s before the server started\n", strsignal(number));
        std::_Exit(128 + number);
      }
      std::fprintf(stderr, "coli serve: %s: stopping after the requests in flight\n", strsignal(number));
      action_();
    }
  }
  sigset_t set_{};
  std::atomic<bool> done_{false};
  std::mutex lock_;
  std::function<void()> action_;
  std::thread thread_;
};

// The chat format, or why /v1/chat/completions cannot answer.
void choose_chat_format(serve::ServerOptions& options, const std::string& model, const Tokenizer& tokenizer,
                        const std::string& override_name) {
  auto format = chat_format_for(model, tokenizer, override_name);
  if (format) {
    options.chat_format = *format;
    std::fprintf(stderr, "coli serve: chat format %s%s\n", std::string(chat_format_name(*format)).c_str(),
                 override_name.empty() ? " (the model's template; --chat-template overrides)" : " (--chat-template)");
    return;
  }
  options.chat_unavailable = "this server has no chat format: " + format.error().message +
                             " (start coli serve with --chat-template NAME)";
  std::fprintf(stderr, "coli serve: WARNING: /v1/chat/completions will answer 400: %s\n", format.error().message.c_str());
}

}  // namespace

ServeCommand::ServeCommand(CLI::App& app) {
  command_ = app.add_subcommand("serve", "Serve a converted model over an OpenAI-compatible HTTP API (/v1/chat/completions, "
                                         "/v1/completions, /v1/models, /health, /metrics)");
  CLI::App& cmd = *command_;
  add_engine_options(cmd, engine_);
  cmd.add_option("--host", server_.host, "Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)")
      ->capture_default_str();
  cmd.add_option("--port", server_.port, "Port to listen on (0: a free one, printed)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd.add_option("--api-key", server_.api_key,
                 "Require \"Authorization: Bearer KEY\" on /v1/* and /metrics (default: $COLI_API_KEY, else none)");
  cmd.add_option("--model-id", server_.defaults.model_id, "The model's name in the API (default: the container's file name without .coli)");
  cmd.add_option("--chat-template", chat_template_, "Chat format instead of the model's template: chatml, llama3, llama2, mistral, deepseek3");
  cmd.add_option("--max-tokens", server_.defaults.max_tokens,
                 "Most tokens per request when it names no max_tokens (-1: until an end token or the full context)")
      ->check(CLI::Range(-1, 1 << 24))
      ->capture_default_str();
  cmd.add_flag("--no-bos", server_.no_bos, "Do not start text prompts with BOS (default: as the tokenizer says)");
  add_sampling_options(cmd, sampling_);
}

int ServeCommand::run() {
#ifndef COLI_HAS_HTTP_SERVER
  std::fprintf(stderr, "coli serve: this build has no HTTP server: install cpp-httplib (Debian: libcpp-httplib-dev) "
                       "and build again\n");
  return cli::kExitError;
#else
  SignalWatcher signals;
  finish_engine_args(*command_, engine_, "coli serve");
  finish_sampling_args(*command_, sampling_);
  if (server_.api_key.empty()) {
    if (const char* key = std::getenv("COLI_API_KEY")) server_.api_key = key;
  }
  if (server_.defaults.model_id.empty()) server_.defaults.model_id = std::filesystem::path(engine_.model).stem().string();
  auto loaded = load_tokenizer(engine_.model, engine_.tokenizer);
  if (!loaded) {
    std::fprintf(stderr, "coli serve: %s\n", loaded.error().message.c_str());
    return cli::kExitError;
  }
  malloc_trim(0);  // the carried tokenizer's decoded copy: give it back before the model is sized
  const Tokenizer& tokenizer = loaded->tokenizer;
  const std::string applied = apply_generation_defaults(loaded->generation_config, sampling_);
  if (!applied.empty()) std::fprintf(stderr, "coli serve: request defaults from the model's generation_config.json: %s\n", applied.c_str());
  if (Status s = check_sampling(sampling_.options); !s) {
    std::fprintf(stderr, "coli serve: %s\n", s.error().message.c_str());
    return cli::kExitUsage;
  }
  server_.defaults.sampling = sampling_.options;
  server_.defaults.fresh_seed = command_->count("--seed") == 0;
  choose_chat_format(server_, engine_.model, tokenizer, chat_template_);
  int exit_code = cli::kExitError;
  // Requests of any length up to the context: the plan is sized for a prompt that fills it.
  auto engine = load_engine(engine_, {0, true, nullptr}, "coli serve", &exit_code);
  if (!engine) {
    std::fprintf(stderr, "coli serve: %s\n", engine.error().message.c_str());
    return exit_code;
  }
  serve::ModelServer server(*engine, tokenizer, server_);
  Status served = Ok{};
  signals.on_signal([&server] { server.stop(); });
  served = server.serve([&](int port) {
      std::fprintf(stderr, "coli serve: %s loaded in %.2f s; listening on http://%s:%d (one request at a time, the others "
                           "wait in order)%s\n",
                   server_.defaults.model_id.c_str(), engine->load_seconds, server_.host.c_str(), port,
                   server_.api_key.empty() ? "" : "; API key required");
  });
  signals.on_signal([] {});  // a second signal while the history is saved: ignored
  if (Status saved = save_history(engine->history, *engine->model, engine_.usage_decay); !saved) {
    std::fprintf(stderr, "coli serve: usage history not saved: %s\n", saved.error().message.c_str());
  }
  if (!served) {
    std::fprintf(stderr, "coli serve: %s\n", served.error().message.c_str());
    return cli::kExitError;
  }
  std::fprintf(stderr, "coli serve: stopped\n");
  return cli::kExitOk;
#endif
}

}  // namespace coli::tools
