// The OpenAI-compatible HTTP API of `coli serve`, as pure functions: request
// bodies to checked requests (or a 4xx error that names the field), and the
// JSON of responses, stream chunks and errors. No sockets here: server.cpp
// wires these to cpp-httplib; the unit tests drive them directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "coli/tokenizer/chat_template.h"
#include "stop_reason.h"
#include "sampler.h"

namespace coli::serve {

// An error answered with an HTTP status and OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string code;   // e.g. "model_not_found", "context_length_exceeded"; "" = null
  std::string param;  // the request field at fault; "" = null
};

enum class Endpoint { completions, chat_completions };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string prompt;                      // /v1/completions: text ...
  std::vector<std::int32_t> prompt_ids;    // ... or token ids
  std::vector<ChatMessage> messages;       // /v1/chat/completions
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage: a last chunk with the counts
  int max_tokens = -1;                     // < 0: until an end token or the context is full
  tools::SamplingOptions sampling;
  bool seed_given = false;  // "seed" in the request
  std::vector<std::string> stop;
};

// The server's defaults for what a request leaves out, and the model's id.
struct ApiDefaults {
  std::string model_id;
  tools::SamplingOptions sampling;
  int max_tokens = -1;
  // No --seed given to the server: a request without "seed" samples with
  // a fresh one (as OpenAI and llama-server do), not the same draw each time.
  bool fresh_seed = true;
};

// Errors: malformed JSON (400), a field of the wrong type or out of range
// (400, the field named), a model other than the served one (404), n > 1
// (400: one choice per request).
std::variant<CompletionRequest, ApiError> parse_request(std::string_view body, Endpoint endpoint,
                                                        const ApiDefaults& defaults);

// "stop" for an end token or a stop string, "length" for the token limit or
// a full context.
std::string finish_reason(tools::StopReason reason);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// What every response and chunk of one request shares.
struct ResponseIds {
  std::string id;        // "cmpl-..." or "chatcmpl-..."
  std::int64_t created;  // Unix seconds
  std::string model;
};

nlohmann::json error_body(const ApiError& error);
nlohmann::json completion_body(Endpoint endpoint, const ResponseIds& ids, const std::string& text,
                               const std::string& finish, const Usage& usage);
// A stream chunk: text (the chat endpoint's first chunk carries the role),
// or the last one with the finish reason; usage only where given.
nlohmann::json chunk_body(Endpoint endpoint, const ResponseIds& ids, const std::string& text, bool first,
                          const std::optional<std::string>& finish, const std::optional<Usage>& usage = std::nullopt);
// One server-sent event: "data: JSON\n\n" ("data: [DONE]\n\n" ends the stream).
std::string sse_event(const nlohmann::json& body);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

nlohmann::json models_body(const std::string& model_id, std::int64_t created);

}  // namespace coli::serve
