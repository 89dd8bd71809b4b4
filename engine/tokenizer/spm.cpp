// SentencePiece-style BPE (Llama 2, Mistral, Mixtral): see tokenizer_data.h.
#include <queue>

#include "tokenizer_data.h"
#include "unicode_text.h"

namespace coli::bpe {
namespace {

struct Symbol {
  std::size_t offset, length;  // its bytes in the escaped text
  std::int32_t id;             // -1: no token (written as bytes)
  std::int32_t prev, next;
};

struct Candidate {
  double priority;  // lower first: -score (GGUF) or the merge rank (tokenizer.json)
  std::int32_t left, left_id, right_id, merged;
  bool operator>(const Candidate& o) const { return priority != o.priority ? priority > o.priority : left > o.left; }
};
using CandidateHeap = std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>>;

// The pair starting at `left`, when it may merge: GGUF vocabularies merge
// any pair whose concatenation is a token, by that token's score;
// tokenizer.json ones only their listed merges, by rank.
void push_pair(const TokenizerData& data, const std::string& text, const std::vector<Symbol>& symbols, std::int32_t left,
               CandidateHeap& heap) {
  if (left < 0 || symbols[left].next < 0) return;
  const Symbol& l = symbols[left];
  const Symbol& r = symbols[l.next];
  if (l.id < 0 || r.id < 0) return;
  if (!data.scores.empty()) {
    const auto it = data.id_of_text.find(text.substr(l.offset, l.length + r.length));
    if (it == data.id_of_text.end() || data.kinds[it->second] != TokenKind::kNormal) return;
    heap.push({-static_cast<double>(data.scores[it->second]), left, l.id, r.id, it->second});
    return;
  }
  const auto it = data.merges.find(merge_key(l.id, r.id));
  if (it != data.merges.end()) heap.push({static_cast<double>(it->second.rank), left, l.id, r.id, it->second.merged});
}

std::int32_t token_of(const TokenizerData& data, std::string_view piece) {
  const auto it = data.id_of_text.find(std::string(piece));
  return it == data.id_of_text.end() || data.kinds[it->second] != TokenKind::kNormal ? -1 : it->second;
}

}  // namespace

void encode_spm(const TokenizerData& data, std::string_view text, bool at_start, std::vector<std::int32_t>& out) {
  std::string escaped;
  if (data.add_space_prefix && (at_start || !data.space_prefix_first_only)) escaped += kSentencePieceSpace;
  for (char c : text) escaped += c == ' ' ? kSentencePieceSpace : std::string_view(&c, 1);
  // One symbol per UTF-8 character (an invalid byte is one of its own).
  std::vector<Symbol> symbols;
  for (std::size_t pos = 0; pos < escaped.size();) {
    const std::size_t length = decode_utf8(escaped, pos).length;
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({pos, length, token_of(data, std::string_view(escaped).substr(pos, length)), index - 1,
                       pos + length < escaped.size() ? index + 1 : -1});
    pos += length;
  }
  if (symbols.empty()) return;
  CandidateHeap heap;
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(symbols.size()); ++i) push_pair(data, escaped, symbols, i, heap);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.left];
    if (left.id != top.left_id || left.next < 0) continue;  // stale: the left side changed or was absorbed
    Symbol& right = symbols[left.next];
    if (right.id != top.right_id) continue;
    left.id = top.merged;
    left.length += right.length;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.id = -2;  // absorbed
    push_pair(data, escaped, symbols, left.prev, heap);
    push_pair(data, escaped, symbols, top.left, heap);
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (std::size_t b = s.offset; b < s.offset + s.length; ++b) out.push_back(data.byte_token[static_cast<unsigned char>(escaped[b])]);
  }
}

}  // namespace coli::bpe
