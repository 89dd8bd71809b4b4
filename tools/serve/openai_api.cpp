#include "openai_api.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace coli::serve {

namespace {

using nlohmann::json;

ApiError field_error(const std::string& field, const std::string& what) {
  return ApiError{400, "'" + field + "' " + what, "invalid_request_error", "", field};
}

// A field's value when present and not null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> read_number(const json& body, const char* name, double& out) {
  const json* value = field(body, name);
  if (!value) return std::nullopt;
  if (!value->is_number()) return field_error(name, "must be a number");
  out = value->get<double>();
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& body, const char* name, std::int64_t low, std::int64_t high, auto& out) {
  const json* value = field(body, name);
  if (!value) return std::nullopt;
  if (!value->is_number_integer() || value->get<std::int64_t>() < low || value->get<std::int64_t>() > high) {
    return field_error(name, "must be an integer from " + std::to_string(low) + " to " + std::to_string(high));
  }
  out = static_cast<std::remove_reference_t<decltype(out)>>(value->get<std::int64_t>());
  return std::nullopt;
}

// Sampling and limits shared by both endpoints (llama-server's extensions
// top_k, min_p, repeat_penalty included).
std::optional<ApiError> read_generation_fields(const json& body, CompletionRequest& request) {
  tools::SamplingOptions& s = request.sampling;
  for (auto [name, target] : {std::pair{"temperature", &s.temperature}, std::pair{"top_p", &s.top_p},
                              std::pair{"min_p", &s.min_p}, std::pair{"repeat_penalty", &s.repeat_penalty}}) {
    if (auto error = read_number(body, name, *target)) return error;
  }
  if (auto error = read_int(body, "top_k", 0, 1 << 24, s.top_k)) return error;
  if (auto error = read_int(body, "seed", INT64_MIN, INT64_MAX, s.seed)) return error;
  request.seed_given = field(body, "seed") != nullptr;
  if (auto error = read_int(body, "max_tokens", 1, 1 << 24, request.max_tokens)) return error;
  if (auto error = read_int(body, "max_completion_tokens", 1, 1 << 24, request.max_tokens)) return error;
  int choices = 1;
  if (auto error = read_int(body, "n", 1, 1, choices); error) {
    return ApiError{400, "'n' must be 1: coli serve generates one choice per request", "invalid_request_error", "", "n"};
  }
  for (const char* penalty : {"frequency_penalty", "presence_penalty"}) {
    double value = 0;
    if (auto error = read_number(body, penalty, value)) return error;
    if (value != 0) return field_error(penalty, "is not supported: use repeat_penalty (llama.cpp's)");
  }
  const json* echo = field(body, "echo");
  if (echo && (!echo->is_boolean() || echo->get<bool>())) return field_error("echo", "is not supported");
  const json* logprobs = field(body, "logprobs");
  if (logprobs && !(logprobs->is_boolean() && !logprobs->get<bool>()) && !(logprobs->is_number() && logprobs->get<double>() == 0)) {
    return field_error("logprobs", "is not supported");
  }
  const json* tools_field = field(body, "tools");
  if (tools_field && !(tools_field->is_array() && tools_field->empty())) return field_error("tools", "(function calling) is not supported");
  if (Status checked = tools::check_sampling(s); !checked) {
    // check_sampling names the command-line option ("--top-p 0 must be ..."): name the request's field instead.
    std::string message = checked.error().message;
    std::string option = message.substr(0, message.find(' '));
    if (option.rfind("--", 0) == 0) {
      std::string name = option.substr(2);
      std::replace(name.begin(), name.end(), '-', '_');
      if (name == "repeat_last_n") return ApiError{400, message, "invalid_request_error", "", ""};
      return field_error(name, message.substr(option.size() + 1));
    }
    return ApiError{400, message, "invalid_request_error", "", ""};
  }
  return std::nullopt;
}

std::optional<ApiError> read_stream_fields(const json& body, CompletionRequest& request) {
  if (const json* stream = field(body, "stream")) {
    if (!stream->is_boolean()) return field_error("stream", "must be true or false");
    request.stream = stream->get<bool>();
  }
  if (const json* options = field(body, "stream_options")) {
    const json* usage = options->is_object() ? field(*options, "include_usage") : nullptr;
    if (!options->is_object() || (usage && !usage->is_boolean())) {
      return field_error("stream_options", "must be an object like {\"include_usage\": true}");
    }
    request.include_usage = usage && usage->get<bool>();
  }
  const json* stop = field(body, "stop");
  if (!stop) return std::nullopt;
  if (stop->is_string()) {
    request.stop.push_back(stop->get<std::string>());
  } else if (stop->is_array() && stop->size() <= 16) {
    for (const json& item : *stop) {
      if (!item.is_string()) return field_error("stop", "must be a string or a list of up to 16 strings");
      request.stop.push_back(item.get<std::string>());
    }
  } else {
    return field_error("stop", "must be a string or a list of up to 16 strings");
  }
  return std::nullopt;
}

bool all_token_ids(const json& list) {
  if (!list.is_array() || list.empty()) return false;
  for (const json& item : list) {
    if (!item.is_number_integer() || item.get<std::int64_t>() < 0 || item.get<std::int64_t>() > INT32_MAX) return false;
  }
  return true;
}

// "prompt": a string, token ids, or a list of one of either.
std::optional<ApiError> read_prompt(const json& body, CompletionRequest& request) {
  const json* prompt = field(body, "prompt");
  if (!prompt) return field_error("prompt", "is required");
  const json* one = prompt;
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) one = &(*prompt)[0];
  else if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    return field_error("prompt", "holds several prompts: coli serve takes one prompt per request");
  }
  if (one->is_string()) {
    request.prompt = one->get<std::string>();
    if (request.prompt.empty()) return field_error("prompt", "is empty");
    return std::nullopt;
  }
  if (!all_token_ids(*one)) return field_error("prompt", "must be a string or a non-empty list of token ids");
  for (const json& id : *one) request.prompt_ids.push_back(id.get<std::int32_t>());
  return std::nullopt;
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts.
std::optional<std::string> text_content(const json& content) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return std::nullopt;
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part.at("type") != "text" || !part.contains("text") || !part.at("text").is_string()) {
      return std::nullopt;
    }
    text += part.at("text").get<std::string>();
  }
  return text;
}

std::optional<ApiError> read_messages(const json& body, CompletionRequest& request) {
  const json* messages = field(body, "messages");
  if (!messages || !messages->is_array() || messages->empty()) return field_error("messages", "must be a non-empty list");
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object() || !message.contains("role") || !message.at("role").is_string()) {
      return field_error(where, "must be an object with a \"role\"");
    }
    std::string role = message.at("role").get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant") {
      return field_error(where + ".role", "is '" + role + "': coli serve takes system, user and assistant messages");
    }
    const auto content = text_content(message.contains("content") ? message.at("content") : json());
    if (!content) return field_error(where + ".content", "must be a string or a list of text parts");
    request.messages.push_back({role, *content});
  }
  if (request.messages.back().role == "assistant") {
    return field_error("messages", "ends with an assistant message: the last must be the user's (or the system's)");
  }
  return std::nullopt;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_request(std::string_view body_text, Endpoint endpoint,
                                                        const ApiDefaults& defaults) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return ApiError{400, "the request body is not valid JSON", "invalid_request_error", "", ""};
  if (!body.is_object()) return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", ""};
  if (const json* model = field(body, "model")) {
    if (!model->is_string()) return field_error("model", "must be a string");
    const std::string name = model->get<std::string>();
    if (!name.empty() && name != defaults.model_id) {
      return ApiError{404, "the model '" + name + "' is not served here; this server serves '" + defaults.model_id + "' (GET /v1/models)",
                      "invalid_request_error", "model_not_found", "model"};
    }
  }
  CompletionRequest request;
  request.endpoint = endpoint;
  request.sampling = defaults.sampling;
  request.max_tokens = defaults.max_tokens;
  auto error = endpoint == Endpoint::completions ? read_prompt(body, request) : read_messages(body, request);
  if (!error) error = read_generation_fields(body, request);
  if (!error) error = read_stream_fields(body, request);
  if (error) return *error;
  return request;
}

std::string finish_reason(tools::StopReason reason) {
  return reason == tools::StopReason::max_tokens || reason == tools::StopReason::context_full ? "length" : "stop";
}

json error_body(const ApiError& error) {
  return {{"error",
           {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? json() : json(error.param)},
            {"code", error.code.empty() ? json() : json(error.code)}}}};
}

namespace {

json usage_body(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json envelope(const char* object, const ResponseIds& ids) {
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
}

}  // namespace

json completion_body(Endpoint endpoint, const ResponseIds& ids, const std::string& text, const std::string& finish,
                     const Usage& usage) {
  const bool chat = endpoint == Endpoint::chat_completions;
  json body = envelope(chat ? "chat.completion" : "text_completion", ids);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  body["choices"] = json::array({choice});
  body["usage"] = usage_body(usage);
  return body;
}

json chunk_body(Endpoint endpoint, const ResponseIds& ids, const std::string& text, bool first,
                const std::optional<std::string>& finish, const std::optional<Usage>& usage) {
  const bool chat = endpoint == Endpoint::chat_completions;
  json body = envelope(chat ? "chat.completion.chunk" : "text_completion", ids);
  if (usage) {  // the last chunk of stream_options.include_usage: counts, no choice
    body["choices"] = json::array();
    body["usage"] = usage_body(*usage);
    return body;
  }
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish ? json(*finish) : json()}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  body["choices"] = json::array({choice});
  return body;
}

std::string sse_event(const json& body) { return "data: " + body.dump() + "\n\n"; }

json models_body(const std::string& model_id, std::int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "coli"}}})}};
}

}  // namespace coli::serve
