// Why a generation ended (tools/generation.h), on its own so the API layer
// of coli serve names it without the engine.
#pragma once

#include <string_view>

namespace coli::tools {

enum class StopReason {
  end_token,     // EOS or the chat turn's end (not shown)
  stop_string,   // a stop string (not shown)
  max_tokens,    // the token limit
  context_full,  // the KV cache's last position
  cancelled,     // the caller's callback said stop (a client went away)
};
// "end_token", "stop_string", ...
inline std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::end_token: return "end_token";
    case StopReason::stop_string: return "stop_string";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::context_full: return "context_full";
    case StopReason::cancelled: return "cancelled";
  }
  return "unknown";
}

}  // namespace coli::tools
