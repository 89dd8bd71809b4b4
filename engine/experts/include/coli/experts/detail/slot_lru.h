// Intrusive LRU list of slot indices (front = least recently used). Index-based
// rather than std::list iterators so the owning cache stays trivially movable.
// The expert cache keeps *only evictable slots* here: pinned slots never enter
// and leased slots leave for the length of their round, so "take the front"
// can never hand out a slot that is pinned or in use.
#pragma once

#include <cassert>
#include <vector>

namespace coli::experts::detail {

class SlotLru {
 public:
  explicit SlotLru(int slot_count)
      : prev_(static_cast<size_t>(slot_count) + 1, kAbsent), next_(prev_), sentinel_(slot_count) {
    link(sentinel_, sentinel_);
  }

  bool contains(int slot) const { return next_[idx(slot)] != kAbsent; }
  bool empty() const { return next_[idx(sentinel_)] == sentinel_; }
  int size() const { return size_; }
  int front() const {
    assert(!empty());
    return next_[idx(sentinel_)];
  }

  void push_back(int slot) { insert_before(sentinel_, slot); }                  // most recently used
  void push_front(int slot) { insert_before(next_[idx(sentinel_)], slot); }     // evicted next
  void remove(int slot) {
    assert(contains(slot));
    link(prev_[idx(slot)], next_[idx(slot)]);
    prev_[idx(slot)] = next_[idx(slot)] = kAbsent;
    --size_;
  }

  // Slots from least to most recently used.
  std::vector<int> in_order() const {
    std::vector<int> out;
    for (int s = next_[idx(sentinel_)]; s != sentinel_; s = next_[idx(s)]) out.push_back(s);
    return out;
  }

 private:
  static constexpr int kAbsent = -1;
  static size_t idx(int slot) { return static_cast<size_t>(slot); }
  void link(int a, int b) {
    next_[idx(a)] = b;
    prev_[idx(b)] = a;
  }
  void insert_before(int position, int slot) {
    assert(!contains(slot));
    link(prev_[idx(position)], slot);
    link(slot, position);
    ++size_;
  }

  std::vector<int> prev_, next_;
  int sentinel_;
  int size_ = 0;
};

}  // namespace coli::experts::detail
