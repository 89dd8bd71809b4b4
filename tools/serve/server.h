// `coli serve`'s HTTP server: the model loaded once, the OpenAI-compatible
// endpoints over cpp-httplib (Debian's libcpp-httplib), one request on the
// model at a time (the others wait in order; /metrics shows how many), a
// request whose client goes away stopped at the next token.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "coli/base/result.h"
#include "coli/tokenizer/chat_template.h"
#include "coli/tokenizer/tokenizer.h"
#include "engine_setup.h"
#include "openai_api.h"

namespace coli::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: a free port, chosen by the kernel
  std::string api_key;  // non-empty: /v1/* and /metrics need "Authorization: Bearer KEY"
  ApiDefaults defaults;
  std::optional<ChatFormat> chat_format;  // nullopt: /v1/chat/completions answers chat_unavailable
  std::string chat_unavailable;           // why (no template, an unrecognised one)
  bool no_bos = false;
};

class ModelServer {
 public:
  // `engine` and `tokenizer` outlive the server.
  ModelServer(tools::LoadedEngine& engine, const Tokenizer& tokenizer, ServerOptions options);
  ~ModelServer();
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;

  // Binds host:port, calls `on_listening(port)` (the port chosen when 0),
  // and serves until stop(). Errors: the address cannot be bound.
  Status serve(const std::function<void(int port)>& on_listening);
  // From any thread: ends serve() once the requests in flight have ended.
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace coli::serve
