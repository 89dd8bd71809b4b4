#include "coli/tokenizer/chat_template.h"

#include <array>

namespace coli {
namespace {

// U+FF5C FULLWIDTH VERTICAL LINE and U+2581, written as escapes (editors normalise text).
constexpr std::string_view kDeepseekUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
constexpr std::string_view kDeepseekAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";
constexpr std::string_view kDeepseekEnd = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

constexpr std::array<std::pair<std::string_view, ChatFormat>, 5> kNames = {{
    {"chatml", ChatFormat::chatml}, {"llama3", ChatFormat::llama3}, {"llama2", ChatFormat::llama2},
    {"mistral", ChatFormat::mistral}, {"deepseek3", ChatFormat::deepseek3}}};

// The system text and the conversation without it (a system message counts only first).
std::pair<std::string, std::span<const ChatMessage>> split_system(std::span<const ChatMessage> messages) {
  if (!messages.empty() && messages.front().role == "system") return {messages.front().content, messages.subspan(1)};
  return {"", messages};
}

std::string render_inst(ChatFormat format, std::span<const ChatMessage> messages) {
  auto [system, rest] = split_system(messages);
  std::string out;
  bool first_user = true;
  for (const ChatMessage& m : rest) {
    if (m.role == "user") {
      std::string text = m.content;
      if (first_user && !system.empty()) {
        text = format == ChatFormat::llama2 ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + text : system + "\n\n" + text;
      }
      out += "[INST] " + text + " [/INST]";
      first_user = false;
    } else if (m.role == "assistant") {
      out += " " + m.content + "</s>";
    }
  }
  return out;
}

}  // namespace

std::optional<ChatFormat> parse_chat_format(std::string_view name) {
  for (const auto& [known, format] : kNames) {
    if (known == name) return format;
  }
  return std::nullopt;
}

std::string_view chat_format_name(ChatFormat format) {
  for (const auto& [name, known] : kNames) {
    if (known == format) return name;
  }
  return "unknown";
}

std::string known_chat_formats() {
  std::string names;
  for (const auto& [name, format] : kNames) names += (names.empty() ? "" : ", ") + std::string(name);
  return names;
}

std::optional<ChatFormat> detect_chat_format(std::string_view jinja) {
  const auto has = [&](std::string_view marker) { return jinja.find(marker) != std::string_view::npos; };
  if (has("<|im_start|>")) return ChatFormat::chatml;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatFormat::llama3;
  if (has(kDeepseekUser) && has(kDeepseekAssistant)) return ChatFormat::deepseek3;
  if (has("[INST]")) return has("<<SYS>>") ? ChatFormat::llama2 : ChatFormat::mistral;
  return std::nullopt;
}

std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages) {
  std::string out;
  switch (format) {
    case ChatFormat::chatml:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatFormat::llama3:
      for (const ChatMessage& m : messages) out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::deepseek3: {
      auto [system, rest] = split_system(messages);
      out = system;
      for (const ChatMessage& m : rest) {
        if (m.role == "user") out += std::string(kDeepseekUser) + m.content;
        else if (m.role == "assistant") out += std::string(kDeepseekAssistant) + m.content + std::string(kDeepseekEnd);
      }
      return out + std::string(kDeepseekAssistant);
    }
    case ChatFormat::llama2:
    case ChatFormat::mistral:
      return render_inst(format, messages);
  }
  return out;
}

std::string_view chat_turn_end(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml: return "<|im_end|>";
    case ChatFormat::llama3: return "<|eot_id|>";
    case ChatFormat::deepseek3: return kDeepseekEnd;
    case ChatFormat::llama2:
    case ChatFormat::mistral: return "</s>";
  }
  return "";
}

}  // namespace coli
