// BPE within one word: start from one symbol per byte and repeatedly merge
// the adjacent pair with the lowest rank (leftmost first on ties), as HF's
// BPE model does. A min-heap of candidate pairs keeps this O(n log n); stale
// entries (a side already merged away) are skipped when popped.
#include <queue>

#include "byte_level.h"
#include "tokenizer_data.h"

namespace coli::bpe {
namespace {

struct Symbol {
  std::int32_t id;
  std::int32_t prev;  // index of the left neighbour, -1 at the start
  std::int32_t next;  // index of the right neighbour, -1 at the end
};

struct Candidate {
  std::int32_t rank;
  std::int32_t left;   // symbol index of the pair's left side
  std::int32_t left_id;
  std::int32_t right_id;
  std::int32_t merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

using CandidateHeap = std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>>;

void push_pair(const TokenizerData& data, const std::vector<Symbol>& symbols, std::int32_t left,
               CandidateHeap& heap) {
  if (left < 0) return;
  const std::int32_t right = symbols[left].next;
  if (right < 0) return;
  const auto it = data.merges.find(merge_key(symbols[left].id, symbols[right].id));
  if (it != data.merges.end()) heap.push({it->second.rank, left, symbols[left].id, symbols[right].id, it->second.merged});
}

}  // namespace

void merge_word(const TokenizerData& data, std::string_view word, std::vector<std::int32_t>& out) {
  if (word.empty()) return;
  if (word.size() == 1) {
    out.push_back(data.byte_token[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (data.ignore_merges) {
    const auto whole = data.id_of_text.find(encode_byte_level(word));
    if (whole != data.id_of_text.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  const auto n = static_cast<std::int32_t>(word.size());
  std::vector<Symbol> symbols(word.size());
  for (std::int32_t i = 0; i < n; ++i) {
    symbols[i] = {data.byte_token[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  CandidateHeap heap;
  for (std::int32_t i = 0; i + 1 < n; ++i) push_pair(data, symbols, i, heap);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.left];
    if (left.id != top.left_id || left.next < 0) continue;  // left side changed or was absorbed
    Symbol& right = symbols[left.next];
    if (right.id != top.right_id) continue;                 // right side changed
    left.id = top.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.id = -1;  // absorbed: any pending pair starting here is now stale
    push_pair(data, symbols, left.prev, heap);
    push_pair(data, symbols, top.left, heap);
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace coli::bpe
