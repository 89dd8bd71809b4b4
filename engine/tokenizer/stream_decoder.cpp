// StreamDecoder: emits only whole UTF-8 characters; a character whose bytes
// are split across tokens waits in pending_ until its last byte arrives.
#include "coli/tokenizer/tokenizer.h"
#include "unicode_text.h"

namespace coli {
namespace {

// How many bytes at the end of `bytes` are the start of a character that is
// not finished yet (0 when the text ends on a character boundary). A lead
// byte that can never be completed does not count: it is let through.
std::size_t unfinished_tail(std::string_view bytes) {
  const std::size_t look_back = std::min<std::size_t>(3, bytes.size());
  for (std::size_t back = 1; back <= look_back; ++back) {
    const auto byte = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const std::uint32_t needed = bpe::utf8_sequence_length(byte);
    return needed > back ? back : 0;
  }
  return 0;
}

}  // namespace

std::string StreamDecoder::push(std::int32_t id) {
  if (skip_special_ && tokenizer_->token_kind(id) == TokenKind::kControl) return {};
  pending_ += tokenizer_->token_bytes(id);
  const std::size_t keep = unfinished_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return ready;
}

std::string StreamDecoder::flush() {
  // pending_ holds at most the start of one character: one U+FFFD for it.
  std::string rest = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return rest;
}

}  // namespace coli
