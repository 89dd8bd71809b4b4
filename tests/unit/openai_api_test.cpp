// coli serve's OpenAI-compatible API without sockets: what a request may
// hold and the 4xx each mistake gets (the field named), the defaults a
// request inherits, the response, chunk and error objects clients parse, and
// the /metrics page.
#include <gtest/gtest.h>

#include <string>

#include "metrics_page.h"
#include "openai_api.h"

namespace coli::serve {
namespace {

using nlohmann::json;

ApiDefaults defaults() {
  ApiDefaults d;
  d.model_id = "demo";
  d.sampling = tools::SamplingOptions{0.6, 0.9, 7};
  d.max_tokens = 128;
  return d;
}

CompletionRequest parsed(const std::string& body, Endpoint endpoint = Endpoint::completions) {
  auto result = parse_request(body, endpoint, defaults());
  if (auto* error = std::get_if<ApiError>(&result)) ADD_FAILURE() << body << ": " << error->message;
  return std::holds_alternative<CompletionRequest>(result) ? std::get<CompletionRequest>(result) : CompletionRequest{};
}

ApiError refused(const std::string& body, Endpoint endpoint = Endpoint::completions) {
  auto result = parse_request(body, endpoint, defaults());
  if (!std::holds_alternative<ApiError>(result)) ADD_FAILURE() << body << " was accepted";
  return std::holds_alternative<ApiError>(result) ? std::get<ApiError>(result) : ApiError{};
}

TEST(OpenAiApi, ARequestInheritsTheServersDefaultsAndOverridesThem) {
  const CompletionRequest plain = parsed(R"({"prompt": "Hi"})");
  EXPECT_EQ(plain.prompt, "Hi");
  EXPECT_DOUBLE_EQ(plain.sampling.temperature, 0.6);
  EXPECT_EQ(plain.max_tokens, 128);
  EXPECT_FALSE(plain.stream);
  const CompletionRequest set = parsed(R"({"model": "demo", "prompt": ["Hi"], "temperature": 0, "top_k": 5, "min_p": 0.1,
      "repeat_penalty": 1.1, "seed": 3, "max_tokens": 9, "stream": true, "stream_options": {"include_usage": true},
      "stop": ["\n", "END"], "n": 1, "frequency_penalty": 0, "logprobs": null, "user": "ignored"})");
  EXPECT_DOUBLE_EQ(set.sampling.temperature, 0);
  EXPECT_EQ(set.sampling.top_k, 5);
  EXPECT_DOUBLE_EQ(set.sampling.min_p, 0.1);
  EXPECT_EQ(set.sampling.seed, 3u);
  EXPECT_TRUE(set.seed_given);
  EXPECT_FALSE(plain.seed_given);
  EXPECT_EQ(set.max_tokens, 9);
  EXPECT_TRUE(set.stream);
  EXPECT_TRUE(set.include_usage);
  EXPECT_EQ(set.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(parsed(R"({"prompt": [1, 2, 3]})").prompt_ids, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(parsed(R"({"prompt": [[4, 5]], "max_completion_tokens": 2})").max_tokens, 2);
}

TEST(OpenAiApi, ChatMessagesKeepTheirRolesAndTextParts) {
  const CompletionRequest chat = parsed(R"({"messages": [{"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}, {"role": "user", "content": "Again"}]})", Endpoint::chat_completions);
  ASSERT_EQ(chat.messages.size(), 4u);
  EXPECT_EQ(chat.messages[0].role, "system");
  EXPECT_EQ(chat.messages[1].content, "Hello there");
  EXPECT_EQ(chat.messages[2].content, "");
  EXPECT_EQ(chat.endpoint, Endpoint::chat_completions);
}

TEST(OpenAiApi, EachMistakeGetsA4xxNamingTheField) {
  EXPECT_EQ(refused("{\"prompt\": ").status, 400);
  EXPECT_NE(refused("{\"prompt\": ").message.find("not valid JSON"), std::string::npos);
  EXPECT_NE(refused("[1]").message.find("JSON object"), std::string::npos);
  const ApiError model = refused(R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.code, "model_not_found");
  EXPECT_NE(model.message.find("'demo'"), std::string::npos);
  EXPECT_EQ(refused("{}").param, "prompt");
  EXPECT_EQ(refused(R"({"prompt": ""})").param, "prompt");
  EXPECT_EQ(refused(R"({"prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(refused(R"({"prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(refused(R"({"prompt": "x", "temperature": "hot"})").param, "temperature");
  EXPECT_EQ(refused(R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(refused(R"({"prompt": "x", "max_tokens": 2.5})").param, "max_tokens");
  EXPECT_EQ(refused(R"({"prompt": "x", "n": 2})").param, "n");
  EXPECT_EQ(refused(R"({"prompt": "x", "stop": [1]})").param, "stop");
  EXPECT_EQ(refused(R"({"prompt": "x", "stream": "yes"})").param, "stream");
  EXPECT_EQ(refused(R"({"prompt": "x", "presence_penalty": 0.5})").param, "presence_penalty");
  EXPECT_EQ(refused(R"({"prompt": "x", "echo": true})").param, "echo");
  EXPECT_EQ(refused(R"({"prompt": "x", "logprobs": 3})").param, "logprobs");
  EXPECT_EQ(refused(R"({"prompt": "x", "top_p": 0})").param, "top_p");
  EXPECT_NE(refused(R"({"prompt": "x", "top_p": 0})").message.find("'top_p' 0"), std::string::npos);
  EXPECT_EQ(refused(R"({"prompt": "x", "temperature": -1})").param, "temperature");
  const Endpoint chat = Endpoint::chat_completions;
  EXPECT_EQ(refused(R"({"messages": []})", chat).param, "messages");
  EXPECT_EQ(refused(R"({"messages": [{"content": "x"}]})", chat).param, "messages[0]");
  EXPECT_EQ(refused(R"({"messages": [{"role": "tool", "content": "x"}]})", chat).param, "messages[0].role");
  EXPECT_EQ(refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", chat).param, "messages[0].content");
  EXPECT_EQ(refused(R"({"messages": [{"role": "assistant", "content": "x"}]})", chat).param, "messages");
}

TEST(OpenAiApi, ResponsesAndChunksHaveTheShapesClientsParse) {
  const ResponseIds ids{"chatcmpl-1", 1700000000, "demo"};
  const json whole = completion_body(Endpoint::chat_completions, ids, "Hi!", "stop", Usage{5, 2});
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "Hi!");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(whole["usage"]["total_tokens"], 7);
  const json text = completion_body(Endpoint::completions, ids, "abc", "length", Usage{1, 3});
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "abc");
  const json role = chunk_body(Endpoint::chat_completions, ids, "", true, std::nullopt);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  const json last = chunk_body(Endpoint::chat_completions, ids, "", false, std::string("length"));
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const json usage = chunk_body(Endpoint::completions, ids, "", false, std::nullopt, Usage{4, 4});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(finish_reason(tools::StopReason::stop_string), "stop");
  EXPECT_EQ(finish_reason(tools::StopReason::end_token), "stop");
  EXPECT_EQ(finish_reason(tools::StopReason::context_full), "length");
  const json error = error_body(ApiError{404, "gone", "invalid_request_error", "model_not_found", "model"});
  EXPECT_EQ(error["error"]["message"], "gone");
  EXPECT_EQ(error["error"]["code"], "model_not_found");
  EXPECT_TRUE(error_body(ApiError{400, "x"})["error"]["param"].is_null());
  EXPECT_EQ(models_body("demo", 1)["data"][0]["id"], "demo");
}

TEST(MetricsPage, EveryFigureIsAPrometheusSampleWithHelpAndType) {
  MetricsSnapshot s;
  s.counts.requests = 3;
  s.counts.requests_cancelled = 1;
  s.counts.generated_tokens = 42;
  s.counts.last_decode_tok_s = 12.5;
  s.expert_hits = 3;
  s.expert_misses = 1;
  s.rss_bytes = 1000;
  s.planned_ram_bytes = 2048;
  s.planned_margin_bytes = 100;
  const std::string page = metrics_page(s);
  EXPECT_NE(page.find("# TYPE coli_requests_total counter\ncoli_requests_total 3\n"), std::string::npos) << page;
  EXPECT_NE(page.find("coli_requests_cancelled_total 1\n"), std::string::npos);
  EXPECT_NE(page.find("coli_generated_tokens_total 42\n"), std::string::npos);
  EXPECT_NE(page.find("coli_decode_tokens_per_second 12.5\n"), std::string::npos);
  EXPECT_NE(page.find("coli_expert_hit_rate 0.75\n"), std::string::npos);
  EXPECT_NE(page.find("coli_planned_ram_bytes 2048\n"), std::string::npos);
  EXPECT_EQ(page.find("predicted_decode"), std::string::npos);  // no plan prediction, no line
  s.planned_ram_bytes.reset();
  EXPECT_EQ(metrics_page(s).find("planned_ram"), std::string::npos);
}

}  // namespace
}  // namespace coli::serve
