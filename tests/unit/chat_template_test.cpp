// Chat prompts: the families' formats, recognised from template markers,
// and the tokenizer_config.json forms the template comes in.
#include "coli/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <vector>

#include "chat_prompt.h"

namespace coli {
namespace {

const std::vector<ChatMessage> kTurn = {{"system", "Be brief."}, {"user", "Hi"}};

TEST(ChatTemplate, EachFamilyRendersItsFormat) {
  EXPECT_EQ(render_chat(ChatFormat::chatml, kTurn),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatFormat::llama3, kTurn),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi"
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(ChatFormat::llama2, kTurn), "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]");
  EXPECT_EQ(render_chat(ChatFormat::mistral, kTurn), "[INST] Be brief.\n\nHi [/INST]");
  EXPECT_EQ(render_chat(ChatFormat::deepseek3, kTurn),
            "Be brief.<\xEF\xBD\x9CUser\xEF\xBD\x9C>Hi<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>");
  // Earlier turns: the assistant's answers end with the turn's end.
  const std::vector<ChatMessage> two = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  EXPECT_EQ(render_chat(ChatFormat::mistral, two), "[INST] Hi [/INST] Hello</s>[INST] Bye [/INST]");
  EXPECT_EQ(chat_turn_end(ChatFormat::chatml), "<|im_end|>");
  EXPECT_EQ(chat_turn_end(ChatFormat::llama3), "<|eot_id|>");
  EXPECT_EQ(chat_turn_end(ChatFormat::mistral), "</s>");
}

TEST(ChatTemplate, FamiliesAreRecognisedByTheirMarkers) {
  EXPECT_EQ(detect_chat_format("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}"), ChatFormat::chatml);
  EXPECT_EQ(detect_chat_format("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"), ChatFormat::llama3);
  EXPECT_EQ(detect_chat_format("{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"), ChatFormat::mistral);
  EXPECT_EQ(detect_chat_format("{{ '[INST] <<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' }}"), ChatFormat::llama2);
  EXPECT_EQ(detect_chat_format("{{'<\xEF\xBD\x9CUser\xEF\xBD\x9C>' + c}}{{'<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>'}}"), ChatFormat::deepseek3);
  EXPECT_EQ(detect_chat_format("{{ '<start_of_turn>user\\n' }}"), std::nullopt);  // Gemma's: not rendered here
  EXPECT_EQ(parse_chat_format("llama3"), ChatFormat::llama3);
  EXPECT_EQ(parse_chat_format("jinja"), std::nullopt);
  EXPECT_EQ(known_chat_formats(), "chatml, llama3, llama2, mistral, deepseek3");
}

TEST(ChatTemplate, TokenizerConfigHoldsTheTemplateAsAStringOrANamedList) {
  EXPECT_EQ(tools::chat_template_of_config(R"({"chat_template": "<|im_start|>"})"), "<|im_start|>");
  EXPECT_EQ(tools::chat_template_of_config(
                R"({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "[INST]"}]})"),
            "[INST]");
  EXPECT_EQ(tools::chat_template_of_config(R"({"bos_token": "<s>"})"), "");
  EXPECT_EQ(tools::chat_template_of_config("{not json"), "");
}

}  // namespace
}  // namespace coli
