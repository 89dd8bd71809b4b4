#include "server.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>

#include <httplib.h>

#include "coli/base/process_memory.h"
#include "generation.h"
#include "metrics_page.h"

namespace coli::serve {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump() + "\n", "application/json");
}

// A request checked and tokenised, ready for the model.
struct Job {
  CompletionRequest request;
  std::vector<std::int32_t> prompt;
  tools::GenerationLimits limits;
  ResponseIds ids;
};

}  // namespace

struct ModelServer::State {
  tools::LoadedEngine& engine;
  const Tokenizer& tokenizer;
  ServerOptions options;
  httplib::Server http;
  tools::Generator generator;
  std::timed_mutex model_lock;  // one request on the model at a time
  std::atomic<int> queued{0};
  std::atomic<bool> busy{false};
  std::mutex counts_lock;       // guards what /metrics reads
  ServedCounts counts;
  runtime::ModelStats stats;    // copied after each request: the model's own is written while one runs
  std::mt19937_64 ids{std::random_device{}()};

  State(tools::LoadedEngine& e, const Tokenizer& t, ServerOptions o)
      : engine(e), tokenizer(t), options(std::move(o)), generator(*e.model, &t), stats(e.model->stats()) {}

  void routes();
  bool authorised(const httplib::Request& req, httplib::Response& res);
  void reject(httplib::Response& res, const ApiError& error);
  std::variant<Job, ApiError> prepare(const httplib::Request& req, Endpoint endpoint);
  void complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  bool acquire(const std::function<bool()>& client_still_there);
  void release(const Result<tools::GenerationResult>& result);
  void stream(const Job& job, httplib::DataSink& sink);
  void answer_whole(const Job& job, httplib::DataSink& sink);
  MetricsSnapshot snapshot();
  std::string new_id(const char* prefix);
};

std::string ModelServer::State::new_id(const char* prefix) {
  std::lock_guard lock(counts_lock);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(ids()));
  return std::string(prefix) + hex;
}

void ModelServer::State::reject(httplib::Response& res, const ApiError& error) {
  {
    std::lock_guard lock(counts_lock);
    ++counts.requests_rejected;
  }
  send_json(res, error.status, error_body(error));
}

bool ModelServer::State::authorised(const httplib::Request& req, httplib::Response& res) {
  if (options.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + options.api_key) return true;
  reject(res, ApiError{401, "a valid API key is needed: send \"Authorization: Bearer KEY\" (coli serve --api-key)",
                       "authentication_error", "invalid_api_key", ""});
  return false;
}

// The prompt's tokens (BOS where the tokenizer asks), the end tokens, and a
// prompt that leaves the context no room refused with the numbers.
std::variant<Job, ApiError> ModelServer::State::prepare(const httplib::Request& req, Endpoint endpoint) {
  auto parsed = parse_request(req.body, endpoint, options.defaults);
  if (auto* error = std::get_if<ApiError>(&parsed)) return *error;
  Job job{std::move(std::get<CompletionRequest>(parsed)), {}, {}, {}};
  if (!job.request.seed_given && options.defaults.fresh_seed) {
    std::lock_guard lock(counts_lock);  // the id generator's lock
    job.request.sampling.seed = ids();
  }
  const CompletionRequest& r = job.request;
  std::string text = r.prompt;
  if (endpoint == Endpoint::chat_completions) {
    if (!options.chat_format) return ApiError{400, options.chat_unavailable, "invalid_request_error", "chat_unavailable", "messages"};
    text = render_chat(*options.chat_format, r.messages);
    if (auto turn_end = tokenizer.find_token(chat_turn_end(*options.chat_format))) job.limits.end_tokens.push_back(*turn_end);
  }
  if (!r.prompt_ids.empty()) {
    for (std::int32_t id : r.prompt_ids) {
      if (static_cast<std::uint64_t>(id) >= tokenizer.vocab_size()) {
        return ApiError{400, "'prompt' holds token id " + std::to_string(id) + ", outside the vocabulary of " +
                                 std::to_string(tokenizer.vocab_size()), "invalid_request_error", "", "prompt"};
      }
    }
    job.prompt = r.prompt_ids;
  } else {
    job.prompt = tools::encode_prompt(tokenizer, text, !options.no_bos);
  }
  const int context = generator.context_size();
  if (static_cast<int>(job.prompt.size()) >= context) {
    return ApiError{400, "the prompt is " + std::to_string(job.prompt.size()) + " tokens and the context holds " +
                             std::to_string(context) + " (coli serve --ctx, or the plan's ctx), leaving no room for a reply: "
                             "shorten the prompt or serve with a larger context",
                    "invalid_request_error", "context_length_exceeded", endpoint == Endpoint::completions ? "prompt" : "messages"};
  }
  if (tokenizer.eos_id()) job.limits.end_tokens.push_back(*tokenizer.eos_id());
  job.limits.max_tokens = r.max_tokens;
  job.limits.stop_strings = r.stop;
  job.ids = ResponseIds{new_id(endpoint == Endpoint::completions ? "cmpl-" : "chatcmpl-"),
                        static_cast<std::int64_t>(std::time(nullptr)), options.defaults.model_id};
  return job;
}

// Waits for the model in turn; gives up when the client has gone.
bool ModelServer::State::acquire(const std::function<bool()>& client_still_there) {
  ++queued;
  while (!model_lock.try_lock_for(std::chrono::milliseconds(250))) {
    if (!client_still_there()) {
      --queued;
      std::lock_guard lock(counts_lock);
      ++counts.requests_cancelled;
      return false;
    }
  }
  --queued;
  busy = true;
  return true;
}

void ModelServer::State::release(const Result<tools::GenerationResult>& result) {
  {
    std::lock_guard lock(counts_lock);
    stats = engine.model->stats();
    if (!result) {
      ++counts.requests_failed;
    } else {
      const tools::GenerationResult& r = *result;
      ++(r.stop == tools::StopReason::cancelled ? counts.requests_cancelled : counts.requests);
      counts.prompt_tokens += static_cast<std::uint64_t>(r.prompt_tokens);
      counts.prompt_tokens_reused += static_cast<std::uint64_t>(r.reused_tokens);
      counts.generated_tokens += static_cast<std::uint64_t>(r.generated);
      counts.prefill_seconds += r.prefill_seconds;
      counts.decode_seconds += r.decode_seconds;
      counts.last_prefill_tok_s = (r.prompt_tokens - r.reused_tokens) / std::max(r.prefill_seconds, 1e-9);
      if (r.generated > 1) counts.last_decode_tok_s = (r.generated - 1) / std::max(r.decode_seconds, 1e-9);
    }
  }
  busy = false;
  model_lock.unlock();
}

// Server-sent events: the role, the text as it comes, the finish reason,
// the counts when asked, [DONE]. A failed write means the client went away:
// generation stops at that token.
void ModelServer::State::stream(const Job& job, httplib::DataSink& sink) {
  const Endpoint endpoint = job.request.endpoint;
  auto send = [&](const std::string& event) { return sink.write(event.data(), event.size()); };
  if (!acquire([&] { return send(": waiting for the model\n\n"); })) return;
  bool first = true;
  if (endpoint == Endpoint::chat_completions) {
    send(sse_event(chunk_body(endpoint, job.ids, "", true, std::nullopt)));
    first = false;
  }
  auto result = generator.generate(job.prompt, job.request.sampling, job.limits, [&](const tools::GeneratedPiece& piece) {
    if (piece.text.empty()) return true;
    const bool sent = send(sse_event(chunk_body(endpoint, job.ids, piece.text, first, std::nullopt)));
    first = false;
    return sent;
  });
  release(result);
  if (!result) {
    send(sse_event(error_body(ApiError{500, result.error().message, "server_error", "", ""})));
  } else if (result->stop != tools::StopReason::cancelled) {
    send(sse_event(chunk_body(endpoint, job.ids, "", first, finish_reason(result->stop))));
    if (job.request.include_usage) {
      send(sse_event(chunk_body(endpoint, job.ids, "", false, std::nullopt, Usage{result->prompt_tokens, result->generated})));
    }
  }
  send(std::string(kSseDone));
}

// One JSON body at the end. Until then a space every quarter second (JSON
// allows leading whitespace) tells whether the client is still there.
void ModelServer::State::answer_whole(const Job& job, httplib::DataSink& sink) {
  auto last_probe = Clock::now();
  auto client_still_there = [&] {
    if (Clock::now() - last_probe < std::chrono::milliseconds(250)) return true;
    last_probe = Clock::now();
    return sink.write(" ", 1);
  };
  if (!acquire([&] { return sink.write(" ", 1); })) return;
  auto result = generator.generate(job.prompt, job.request.sampling, job.limits,
                                   [&](const tools::GeneratedPiece&) { return client_still_there(); });
  release(result);
  const json body = !result ? error_body(ApiError{500, result.error().message, "server_error", "", ""})
                            : completion_body(job.request.endpoint, job.ids, result->text, finish_reason(result->stop),
                                              Usage{result->prompt_tokens, result->generated});
  const std::string text = body.dump() + "\n";
  sink.write(text.data(), text.size());
}

void ModelServer::State::complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  if (!authorised(req, res)) return;
  auto prepared = prepare(req, endpoint);
  if (auto* error = std::get_if<ApiError>(&prepared)) return reject(res, *error);
  auto job = std::make_shared<Job>(std::move(std::get<Job>(prepared)));
  const bool streaming = job->request.stream;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(streaming ? "text/event-stream" : "application/json",
                                   [this, job, streaming](std::size_t, httplib::DataSink& sink) {
                                     if (streaming) stream(*job, sink);
                                     else answer_whole(*job, sink);
                                     sink.done();
                                     return true;
                                   });
}

MetricsSnapshot ModelServer::State::snapshot() {
  MetricsSnapshot s;
  {
    std::lock_guard lock(counts_lock);
    s.counts = counts;
    s.expert_hits = stats.expert_hits;
    s.expert_misses = stats.expert_misses;
    s.expert_bytes_read = stats.expert_bytes_read;
    s.kv_cache_bytes = stats.kv_cache_bytes;
    s.dense_bytes = stats.dense_bytes;
    s.expert_cache_bytes = stats.expert_cache_bytes;
  }
  s.queued = queued;
  s.busy = busy;
  s.rss_bytes = process_resident_bytes();
  s.peak_rss_bytes = std::max(process_peak_resident_bytes(), s.rss_bytes);  // getrusage's peak lags the live count
  s.context_size = generator.context_size();
  if (engine.planned) {
    s.planned_ram_bytes = engine.planned->plan.plan.planned_ram_bytes();
    s.planned_margin_bytes = engine.planned->plan.plan.margin.bytes;
    if (engine.planned->plan.speed.available) {
      s.predicted_decode_tok_s = engine.planned->plan.speed.decode_tok_per_s;
      s.predicted_prefill_tok_s = engine.planned->plan.speed.prefill_tok_per_s;
    }
  }
  return s;
}

void ModelServer::State::routes() {
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"status", "ok"}, {"model", options.defaults.model_id}, {"busy", busy.load()}, {"queued", queued.load()}});
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorised(req, res)) send_json(res, 200, models_body(options.defaults.model_id, static_cast<std::int64_t>(std::time(nullptr))));
  });
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorised(req, res)) res.set_content(metrics_page(snapshot()), "text/plain; version=0.0.4");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, Endpoint::completions); });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, Endpoint::chat_completions); });
  // Unknown paths and methods, too-large bodies: OpenAI's error object, not an empty page.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 413 ? "the request body is too large (at most 16 MiB)"
                                                  : "no such endpoint: " + req.method + " " + req.path +
                                                        " (coli serve has /v1/chat/completions, /v1/completions, "
                                                        "/v1/models, /health, /metrics)";
    send_json(res, res.status, error_body(ApiError{res.status, message, "invalid_request_error", "", ""}));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_json(res, 500, error_body(ApiError{500, "internal error", "server_error", "", ""}));
  });
  http.set_payload_max_length(16u << 20);
  // SO_REUSEADDR alone: a restart binds at once, but a port another server
  // listens on is refused (httplib's default SO_REUSEPORT would share it).
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

ModelServer::ModelServer(tools::LoadedEngine& engine, const Tokenizer& tokenizer, ServerOptions options)
    : state_(std::make_unique<State>(engine, tokenizer, std::move(options))) {
  state_->routes();
}

ModelServer::~ModelServer() = default;

Status ModelServer::serve(const std::function<void(int port)>& on_listening) {
  State& s = *state_;
  int port = s.options.port;
  if (port == 0) port = s.http.bind_to_any_port(s.options.host);
  else if (!s.http.bind_to_port(s.options.host, port)) port = -1;
  if (port <= 0) {
    return make_error("cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) +
                      " (in use, or not an address of this machine): choose another with --port/--host");
  }
  on_listening(port);
  if (!s.http.listen_after_bind()) return make_error("the server stopped accepting connections on port " + std::to_string(port));
  return Ok{};
}

void ModelServer::stop() { state_->http.stop(); }

}  // namespace coli::serve
