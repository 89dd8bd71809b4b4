// Chat prompts in the formats the supported model families were trained on.
// A model's Jinja chat template (tokenizer_config.json "chat_template", GGUF
// tokenizer.chat_template) is recognised by its markers, as llama.cpp does,
// and rendered by this code; a template of another family is refused by
// name rather than guessed.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace coli {

enum class ChatFormat {
  chatml,     // Qwen2/3: "<|im_start|>role\n...<|im_end|>"
  llama3,     // "<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>"
  llama2,     // "[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]"
  mistral,    // Mixtral / Mistral: "[INST] ... [/INST]", the system text before the first user text
  deepseek3,  // DeepSeek V3/R1: "<｜User｜>...<｜Assistant｜>"
};

std::optional<ChatFormat> parse_chat_format(std::string_view name);
std::string_view chat_format_name(ChatFormat format);
std::string known_chat_formats();  // "chatml, llama3, ..." for messages

// The family of a Jinja chat template by its markers; nullopt when none fits.
std::optional<ChatFormat> detect_chat_format(std::string_view jinja);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The prompt for `messages`, ending where the assistant's turn begins. No
// BOS: the tokenizer adds it where the model asks.
std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages);

// The text of the special token that ends an assistant turn: generation
// stops there (it is the EOS of some models, not of others: Qwen's EOS is
// <|endoftext|>, its turns end with <|im_end|>).
std::string_view chat_turn_end(ChatFormat format);

}  // namespace coli
