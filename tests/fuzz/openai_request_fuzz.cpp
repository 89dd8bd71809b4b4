// coli serve's request bodies (tools/serve/openai_api.cpp): whatever a client
// sends to /v1/completions or /v1/chat/completions is parsed into a request
// or a 4xx error, never a crash.
#include "fuzz_file.h"
#include "openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  coli::serve::ApiDefaults defaults;
  defaults.model_id = "demo";
  defaults.sampling = coli::tools::SamplingOptions{0.7, 0.9, 1};
  const std::string_view body = coli::fuzz::as_text(data, size);
  (void)coli::serve::parse_request(body, coli::serve::Endpoint::completions, defaults);
  (void)coli::serve::parse_request(body, coli::serve::Endpoint::chat_completions, defaults);
  return 0;
}
