// `coli run --chat`: the model's chat format (an override, or its template
// recognised) and the prompt text for a system and a user message.
#pragma once

#include <filesystem>
#include <string>

#include "coli/base/result.h"
#include "coli/tokenizer/chat_template.h"
#include "coli/tokenizer/tokenizer.h"

namespace coli::tools {

// --chat-template NAME when given; else the model's Jinja template (the
// tokenizer's GGUF key, the container's carried tokenizer_config.json, or
// tokenizer_config.json beside the container) by its markers. Errors say
// which template was found (or that none was) and how to name a format.
Result<ChatFormat> chat_format_for(const std::filesystem::path& model, const Tokenizer& tokenizer,
                                   const std::string& override_name);

// The template text of a tokenizer_config.json: "chat_template" as a string,
// or the entry named "default" of a list of {name, template}; "" when none.
std::string chat_template_of_config(const std::string& json_text);

}  // namespace coli::tools
