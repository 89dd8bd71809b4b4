// Unicode Normalization Form C, which Qwen2's tokenizer.json applies before
// pre-tokenisation ("normalizer": {"type": "NFC"}).
#pragma once

#include <string>
#include <string_view>

namespace coli::bpe {

// NFC of `text`. Bytes that are not valid UTF-8 pass through unchanged and
// block composition across them. Text that NFC cannot change (the common
// case) is returned as is after one scan.
std::string to_nfc(std::string_view text);

}  // namespace coli::bpe
