#include "chat_prompt.h"

#include <nlohmann/json.hpp>

#include "coli/base/files.h"
#include "coli/container/container.h"

namespace coli::tools {

std::string chat_template_of_config(const std::string& json_text) {
  const nlohmann::json config = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("chat_template")) return "";
  const nlohmann::json& chat = config.at("chat_template");
  if (chat.is_string()) return chat.get<std::string>();
  if (!chat.is_array()) return "";
  for (const nlohmann::json& entry : chat) {
    if (entry.is_object() && entry.contains("name") && entry.at("name") == "default" && entry.contains("template") && entry.at("template").is_string()) {
      return entry.at("template").get<std::string>();
    }
  }
  return "";
}

namespace {

// The model's template and where it came from ("" when none is found).
std::pair<std::string, std::string> model_template(const std::filesystem::path& model, const Tokenizer& tokenizer) {
  if (!tokenizer.chat_template().empty()) return {tokenizer.chat_template(), "the GGUF vocabulary's tokenizer.chat_template"};
  if (auto container = container::ContainerReader::open(model)) {
    if (const auto* config = container->index().find_runtime_file("tokenizer_config.json")) {
      return {chat_template_of_config(config->bytes), model.string() + "'s carried tokenizer_config.json"};
    }
  }
  const std::filesystem::path beside = model.parent_path() / "tokenizer_config.json";
  if (auto text = read_text_file(beside)) return {chat_template_of_config(*text), beside.string()};
  return {"", ""};
}

}  // namespace

Result<ChatFormat> chat_format_for(const std::filesystem::path& model, const Tokenizer& tokenizer,
                                   const std::string& override_name) {
  if (!override_name.empty()) {
    if (auto format = parse_chat_format(override_name)) return *format;
    return make_error("--chat-template '" + override_name + "' is not a chat format coli renders (known: " +
                      known_chat_formats() + ")");
  }
  const auto [jinja, origin] = model_template(model, tokenizer);
  if (jinja.empty()) {
    return make_error("no chat template found for " + model.string() + " (looked in the tokenizer, the container's "
                      "tokenizer_config.json and the one beside it): name one with --chat-template " + known_chat_formats());
  }
  if (auto format = detect_chat_format(jinja)) return *format;
  return make_error("the chat template of " + origin + " is not one coli recognises (known: " + known_chat_formats() +
                    "): name the model's format with --chat-template, or run without --chat");
}

}  // namespace coli::tools
