#include "coli/experts/routing_trace.h"

#include <algorithm>
#include <string>

namespace coli::experts {
namespace {

std::size_t at(int index) { return static_cast<std::size_t>(index); }

constexpr std::uint64_t kWindowsHeld = 3;  // two windows before a trim, and one pass of at most a window

}  // namespace

Result<RoutingTrace> RoutingTrace::create(int n_layers, int top_k, int max_tokens) {
  if (n_layers < 1 || top_k < 1 || max_tokens < 1)
    return make_error("routing trace: n_layers, top_k and max_tokens must be >= 1");
  return RoutingTrace(n_layers, top_k, max_tokens);
}

RoutingTrace::RoutingTrace(int n_layers, int top_k, int max_tokens)
    : top_k_(top_k), max_tokens_(max_tokens), seen_(at(n_layers), 0), ids_(at(n_layers)) {}

std::uint64_t RoutingTrace::bytes_held(int n_layers, int top_k, int max_tokens) {
  const std::uint64_t tokens = kWindowsHeld * static_cast<std::uint64_t>(std::max(0, max_tokens));
  // Per token: its layers' ids; at most one pass a token, each a count and a first position.
  return tokens * sizeof(int) * (static_cast<std::uint64_t>(std::max(0, n_layers)) * static_cast<std::uint64_t>(std::max(0, top_k)) + 2);
}

bool RoutingTrace::open_pass_complete() const {
  const std::size_t want = at(passes_total_) * at(top_k_);
  return std::all_of(ids_.begin(), ids_.end(), [&](const std::vector<int>& ids) { return ids.size() == want; });
}

void RoutingTrace::drop_open_pass() {
  passes_total_ -= passes_.back();
  passes_.pop_back();
  starts_.pop_back();
  const std::size_t keep = at(passes_total_) * at(top_k_);
  for (std::vector<int>& ids : ids_) ids.resize(std::min(ids.size(), keep));
  open_ = false;
}

void RoutingTrace::begin_pass(int tokens, int first_position) {
  if (open_ && !open_pass_complete()) drop_open_pass();
  open_ = false;
  // Trimmed in steps of a window, so a long session pays one move per window of tokens.
  if (const int over = this->tokens() - max_tokens_; over > max_tokens_) drop_front(over);
  if (tokens < 1 || ids_.empty()) return;
  // A recording trace holds its most from the start (bytes_held), so its
  // memory is what the plan priced and never moves.
  const std::size_t most = kWindowsHeld * at(max_tokens_);
  if (passes_.capacity() < most) {
    passes_.reserve(most);
    starts_.reserve(most);
    for (std::vector<int>& ids : ids_) ids.reserve(most * at(top_k_));
  }
  skip_ = std::max(0, tokens - max_tokens_);
  passes_.push_back(tokens - skip_);
  starts_.push_back(first_position < 0 ? kUnknownStart : first_position + skip_);
  passes_total_ += tokens - skip_;
  std::fill(seen_.begin(), seen_.end(), 0);
  open_ = true;
}

void RoutingTrace::record(int layer, std::span<const int> experts) {
  if (!open_ || layer < 0 || layer >= n_layers()) return;
  if (seen_[at(layer)]++ < skip_) return;  // beyond the window already
  ids_[at(layer)].insert(ids_[at(layer)].end(), experts.begin(), experts.end());
}

int RoutingTrace::tokens() const {
  const bool last_incomplete = open_ && !open_pass_complete();
  return passes_total_ - (last_incomplete ? passes_.back() : 0);
}

std::span<const int> RoutingTrace::pass_tokens() const {
  const bool last_incomplete = open_ && !open_pass_complete();
  return std::span<const int>(passes_).first(passes_.size() - (last_incomplete ? 1 : 0));
}

std::span<const int> RoutingTrace::pass_starts() const { return std::span<const int>(starts_).first(pass_tokens().size()); }

std::span<const int> RoutingTrace::layer(int layer) const {
  if (layer < 0 || layer >= n_layers()) return {};
  return std::span<const int>(ids_[at(layer)]).first(at(tokens()) * at(top_k_));
}

void RoutingTrace::drop_front(int tokens) {
  int left = tokens;
  std::size_t whole = 0;
  while (whole < passes_.size() && left >= passes_[whole]) left -= passes_[whole++];
  passes_.erase(passes_.begin(), passes_.begin() + static_cast<std::ptrdiff_t>(whole));
  starts_.erase(starts_.begin(), starts_.begin() + static_cast<std::ptrdiff_t>(whole));
  if (left > 0 && !passes_.empty()) {
    passes_.front() -= left;
    if (starts_.front() != kUnknownStart) starts_.front() += left;  // its first tokens cut
  }
  passes_total_ = std::max(0, passes_total_ - tokens);
  const auto ids = static_cast<std::ptrdiff_t>(at(tokens) * at(top_k_));
  for (std::vector<int>& layer_ids : ids_) layer_ids.erase(layer_ids.begin(), layer_ids.begin() + std::min<std::ptrdiff_t>(ids, static_cast<std::ptrdiff_t>(layer_ids.size())));
}

RoutingTrace RoutingTrace::window() const {
  RoutingTrace out(n_layers(), top_k_, max_tokens_);
  const auto passes = pass_tokens();
  out.passes_.assign(passes.begin(), passes.end());
  out.starts_.assign(pass_starts().begin(), pass_starts().end());
  out.passes_total_ = tokens();
  for (int l = 0; l < n_layers(); ++l) out.ids_[at(l)].assign(layer(l).begin(), layer(l).end());
  if (const int over = out.tokens() - max_tokens_; over > 0) out.drop_front(over);
  return out;
}

Status RoutingTrace::append(const RoutingTrace& newer) {
  if (newer.n_layers() != n_layers() || newer.top_k_ != top_k_)
    return make_error("routing trace: cannot append a trace of " + std::to_string(newer.n_layers()) + " layers x top_k " +
                      std::to_string(newer.top_k_) + " to one of " + std::to_string(n_layers()) + " x " +
                      std::to_string(top_k_));
  RoutingTrace joined = window();
  const auto passes = newer.pass_tokens();
  joined.passes_.insert(joined.passes_.end(), passes.begin(), passes.end());
  joined.starts_.insert(joined.starts_.end(), newer.pass_starts().begin(), newer.pass_starts().end());
  joined.passes_total_ += newer.tokens();
  for (int l = 0; l < n_layers(); ++l) {
    const auto ids = newer.layer(l);
    joined.ids_[at(l)].insert(joined.ids_[at(l)].end(), ids.begin(), ids.end());
  }
  *this = joined.window();
  return Ok{};
}

Status RoutingTrace::assign(std::vector<int> pass_tokens, std::vector<std::vector<int>> layer_ids,
                            std::vector<int> pass_starts) {
  if (layer_ids.size() != ids_.size())
    return make_error("routing trace: ids for " + std::to_string(layer_ids.size()) + " layers, the model has " +
                      std::to_string(ids_.size()));
  long long total = 0;
  for (const int t : pass_tokens) {
    if (t < 1) return make_error("routing trace: a pass of " + std::to_string(t) + " tokens (each pass has at least one)");
    total += t;
  }
  if (total > max_tokens_)
    return make_error("routing trace: " + std::to_string(total) + " tokens, more than the window of " +
                      std::to_string(max_tokens_));
  for (std::size_t l = 0; l < layer_ids.size(); ++l) {
    if (layer_ids[l].size() != static_cast<std::size_t>(total) * at(top_k_))
      return make_error("routing trace: layer " + std::to_string(l) + " has " + std::to_string(layer_ids[l].size()) +
                        " expert ids, its passes' " + std::to_string(total) + " tokens x top_k " + std::to_string(top_k_) +
                        " need " + std::to_string(total * top_k_));
  }
  if (pass_starts.empty()) pass_starts.assign(pass_tokens.size(), kUnknownStart);
  if (pass_starts.size() != pass_tokens.size())
    return make_error("routing trace: " + std::to_string(pass_starts.size()) + " first positions for " +
                      std::to_string(pass_tokens.size()) + " passes (one each)");
  for (const int start : pass_starts)
    if (start < kUnknownStart) return make_error("routing trace: a first position of " + std::to_string(start) + " (at least 0, or -1: not recorded)");
  passes_ = std::move(pass_tokens);
  starts_ = std::move(pass_starts);
  passes_total_ = static_cast<int>(total);
  ids_ = std::move(layer_ids);
  open_ = false;
  return Ok{};
}

}  // namespace coli::experts
