#include "coli/planner/cache_replay.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <mutex>
#include <numeric>
#include <span>
#include <tuple>
#include <vector>

#include "coli/base/text.h"
#include "coli/experts/round_planner.h"
#include "coli/experts/slot_policy.h"

namespace coli::planner {
namespace {

std::size_t at(int index) { return static_cast<std::size_t>(index); }

// One layer's policy, with the history's pins, as ExpertStore builds it.
std::optional<experts::SlotPolicy> layer_policy(const experts::UsageHistory& history, int layer, int cap,
                                                const std::vector<int>& pins) {
  experts::ExpertCacheConfig config;
  config.layer = layer;
  config.n_experts = history.key().n_experts;
  config.top_k = history.key().top_k;
  config.cap = cap;
  config.pins = pins;
  config.expert_bytes = 1;  // the replay moves no bytes
  auto policy = experts::SlotPolicy::create(config);
  if (!policy) return std::nullopt;
  return std::move(*policy);
}

void count_round(std::vector<double>& rounds_missing, std::size_t misses) {
  if (rounds_missing.size() <= misses) rounds_missing.resize(misses + 1, 0.0);
  rounds_missing[misses] += 1;
}

// A layer's experts by when the current pass last ran them, for their LRU
// stack distance: the other experts run since (n_experts: not yet this pass).
class PassRecency {
 public:
  explicit PassRecency(int n_experts) : last_(at(n_experts), kNever) {}
  void new_pass() { std::fill(last_.begin(), last_.end(), kNever), clock_ = 0; }
  std::size_t experts() const { return last_.size(); }
  // The distance of `expert` now, which it then resets (it runs).
  std::size_t run(int expert) {
    std::int64_t& last = last_[at(expert)];
    const std::int64_t before = last;
    last = clock_++;
    if (before == kNever) return last_.size();
    return static_cast<std::size_t>(std::count_if(last_.begin(), last_.end(), [&](std::int64_t t) { return t > before; })) - 1;
  }

 private:
  static constexpr std::int64_t kNever = -1;
  std::vector<std::int64_t> last_;
  std::int64_t clock_ = 0;
};

// Each distinct expert of a full round's routings, in id order (as a
// resident layer's slots run), counted at its rows, and at its rows and
// stack distance.
void count_expert_rows(std::span<const int> round_ids, PassRecency& recency, std::vector<int>& rows_of_expert,
                       std::vector<double>& expert_rows, std::vector<std::vector<double>>& reuse) {
  std::vector<int> distinct(round_ids.begin(), round_ids.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (const int id : round_ids) ++rows_of_expert[at(id)];
  for (const int id : distinct) {
    const auto rows = at(rows_of_expert[at(id)]);
    rows_of_expert[at(id)] = 0;
    count_round(expert_rows, rows);
    if (reuse.size() <= rows) reuse.resize(rows + 1);
    std::vector<double>& by_distance = reuse[rows];
    by_distance.resize(recency.experts() + 1, 0.0);  // distances 0..n-1, then first uses
    by_distance[recency.run(id)] += 1;
  }
}

// values[place] += value, growing the list with zeros.
void add_at(std::vector<double>& values, std::size_t place, double value) {
  if (values.size() <= place) values.resize(place + 1, 0.0);
  values[place] += value;
}

// Where a run of single-token passes is: its kind (by its first pass's
// position) and each token's place in it. A pass begins a new run after a
// prompt, or where its position does not follow the pass before it (a new
// context: llama-bench's next tg test); unknown positions follow.
class DecodeRunTracker {
 public:
  // Before each pass, in order: `tokens` at first position `start`.
  void next_pass(int tokens, int start) {
    const bool follows = tokens == 1 && previous_tokens_ == 1 &&
                         (start == experts::kUnknownStart || previous_start_ == experts::kUnknownStart ||
                          start == previous_start_ + 1);
    place_ = follows ? place_ + 1 : 0;
    if (tokens == 1 && !follows) {
      kind_ = start == experts::kUnknownStart ? DecodeStart::any : start == 0 ? DecodeStart::fresh : DecodeStart::in_context;
      context_ = start;
    }
    previous_tokens_ = tokens, previous_start_ = start;
  }
  std::size_t place() const { return place_; }
  DecodeStart kind() const { return kind_; }
  int context() const { return context_; }  // the tokens before the run (its first position)

 private:
  int previous_tokens_ = 0, previous_start_ = experts::kUnknownStart, context_ = experts::kUnknownStart;
  std::size_t place_ = 0;
  DecodeStart kind_ = DecodeStart::any;
};

// A decode token's misses at one layer into every kind of run it belongs to.
void count_decode(CacheReplay& out, const DecodeRunTracker& run, std::size_t misses, bool first_layer) {
  const bool in_context = run.kind() == DecodeStart::in_context;
  for (DecodeCounts* counts : {&out.decode_runs, run.kind() == DecodeStart::fresh ? &out.fresh_decode_runs
                                                 : in_context                     ? &out.in_context_decode_runs
                                                                                  : nullptr,
                               in_context ? &out.in_context_runs_after[run.context()] : nullptr}) {
    if (counts == nullptr) continue;
    counts->places.add_misses(run.place(), static_cast<double>(misses));
    if (first_layer) counts->places.add_tokens(run.place(), 1.0);
    count_round(counts->rounds_missing, misses);
  }
}

// A prompt round's misses: by its place, and, for a full round, its batch, expert rows and their reuse.
void count_prompt_round(CacheReplay& out, std::span<const int> round_ids, const experts::RoundPlan& plan, int first,
                        int tokens, bool first_layer, std::vector<int>& rows_of_expert, PassRecency& recency) {
  const std::size_t loads = plan.loads.size();
  out.prompt_misses += static_cast<double>(loads);
  const auto place = at(first / out.round_tokens);
  out.prompt_rounds.add_misses(place, static_cast<double>(loads));
  if (first_layer) out.prompt_rounds.add_tokens(place, tokens);
  if (tokens != out.round_tokens) return;
  out.full_rounds += 1;
  out.full_round_distinct += plan.distinct;
  count_round(out.prompt_rounds_missing, loads);
  count_expert_rows(round_ids, recency, rows_of_expert, out.prompt_expert_rows, out.prompt_expert_reuse);
}

// One pass through `policy`: each single-token pass a round, each longer
// one in rounds of out.round_tokens tokens; counted into `out` when `count`.
bool replay_layer(const experts::RoutingTrace& trace, int n_experts, int layer, experts::SlotPolicy& policy, bool count,
                  CacheReplay& out) {
  const auto ids = trace.layer(layer);
  const auto k = at(trace.top_k());
  const auto passes = trace.pass_tokens();
  const auto starts = trace.pass_starts();
  const int round = out.round_tokens;
  std::vector<int> rows_of_expert(at(n_experts), 0);
  PassRecency recency(n_experts);
  std::size_t token = 0;
  DecodeRunTracker run;
  for (std::size_t i = 0; i < passes.size(); ++i) {
    const int pass = passes[i];
    run.next_pass(pass, starts[i]);
    recency.new_pass();  // between two passes at a layer the rest of the model ran
    for (int first = 0; first < pass; first += round) {
      const int tokens = std::min(round, pass - first);
      const auto round_ids = ids.subspan((token + at(first)) * k, at(tokens) * k);
      auto plan = policy.begin_round(round_ids);
      if (!plan) return false;
      policy.end_round();
      if (!count) continue;
      if (pass == 1) {
        count_decode(out, run, plan->loads.size(), layer == 0);
      } else {
        count_prompt_round(out, round_ids, *plan, first, tokens, layer == 0, rows_of_expert, recency);
      }
    }
    if (count && layer == 0) (pass == 1 ? out.decode_tokens : out.prompt_tokens) += pass;
    token += at(pass);
  }
  return true;
}

// FNV-1a over the trace's passes and ids: what a replay's result depends on
// besides the cache shape (the pins come from the counts, hashed too).
std::uint64_t trace_digest(const experts::UsageHistory& history) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  auto add = [&](std::uint64_t value) { hash = (hash ^ value) * 0x100000001b3ULL; };
  const experts::RoutingTrace& trace = history.trace();
  for (const int tokens : trace.pass_tokens()) add(static_cast<std::uint64_t>(tokens));
  for (const int start : trace.pass_starts()) add(static_cast<std::uint64_t>(static_cast<std::int64_t>(start)));
  for (int layer = 0; layer < trace.n_layers(); ++layer) {
    for (const int id : trace.layer(layer)) add(static_cast<std::uint64_t>(id));
    for (const double count : history.layer_counts(layer)) add(static_cast<std::uint64_t>(count * 1024.0));
  }
  return hash;
}

std::optional<CacheReplay> replay(const experts::UsageHistory& history, int cap, int pins, int requested_round_tokens) {
  const experts::RoutingTrace& trace = history.trace();
  const int layers = history.key().n_layers;
  if (trace.empty() || trace.n_layers() != layers || cap < 1) return std::nullopt;
  auto layer_pins = experts::pins_for_every_layer(history, std::max(0, pins));
  if (!layer_pins) return std::nullopt;
  std::vector<experts::CacheShape> shapes;
  for (const auto& p : *layer_pins) shapes.push_back({history.key().n_experts, history.key().top_k, cap, static_cast<int>(p.size())});
  auto rounds = experts::RoundPlanner::create(shapes);
  if (!rounds) return std::nullopt;
  CacheReplay out;
  out.layers = layers;
  out.round_tokens = rounds->tokens_per_round(std::max(1, requested_round_tokens));
  const int n = history.key().n_experts;
  for (int layer = 0; layer < layers; ++layer) {
    auto policy = layer_policy(history, layer, cap, (*layer_pins)[at(layer)]);
    if (!policy || !replay_layer(trace, n, layer, *policy, false, out) || !replay_layer(trace, n, layer, *policy, true, out))
      return std::nullopt;
  }
  return out;
}

// A plan is predicted on every thread set and a sweep on every grid point,
// mostly with the same cache shape; a replay of a 48-layer, 2048-token trace
// takes ~80 ms, so results are kept per (trace, cap, pins, round). Pure: the
// same inputs give the same result with or without the memo.
std::optional<CacheReplay> memoized_replay(const experts::UsageHistory& history, int cap, int pins, int round) {
  using Key = std::tuple<std::uint64_t, int, int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::optional<CacheReplay>> memo;
  const Key key{trace_digest(history), history.key().n_experts, history.key().top_k, cap, pins, round};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto found = memo.find(key); found != memo.end()) return found->second;
  }
  auto result = replay(history, cap, pins, round);
  const std::lock_guard<std::mutex> lock(mutex);
  if (memo.size() >= 256) memo.clear();
  memo.emplace(key, result);
  return result;
}

}  // namespace

void PlaceCounts::add_misses(std::size_t place, double count) { add_at(misses, place, count); }
void PlaceCounts::add_tokens(std::size_t place, double count) {
  add_at(tokens, place, count);
  if (misses.size() < tokens.size()) misses.resize(tokens.size(), 0.0);
}

double PlaceCounts::total_tokens() const { return std::accumulate(tokens.begin(), tokens.end(), 0.0); }

namespace {

// Misses a decode token of a `tokens`-token run makes at one layer, from
// one group of traced runs: each token at its place's rate, places past the
// group's longest run at the rate of the later half of its places (the
// runs settled); tokens < 1: the group's mean.
double run_misses_per_layer_token(const PlaceCounts& places, int layers, int tokens) {
  const double traced = places.total_tokens();
  const double mean = std::accumulate(places.misses.begin(), places.misses.end(), 0.0) / (traced * layers);
  if (tokens <= 0) return mean;
  double later_misses = 0, later_tokens = 0;
  for (std::size_t place = std::max<std::size_t>(1, places.tokens.size() / 2); place < places.tokens.size(); ++place)
    later_misses += places.misses[place], later_tokens += places.tokens[place];
  const double settled = later_tokens > 0 ? later_misses / (later_tokens * layers) : mean;
  double misses = 0;
  for (std::size_t place = 0; place < static_cast<std::size_t>(tokens); ++place)
    misses += places.seen(place) ? places.per_layer_token(place, layers) : settled;
  return misses / tokens;
}

}  // namespace

double CacheReplay::PricedRuns::tokens() const {
  double sum = 0;
  for (const auto& [counts, weight] : groups) sum += counts->places.total_tokens();
  return sum;
}

CacheReplay::PricedRuns CacheReplay::decode_runs_of(DecodeRun run) const {
  if (run.start == DecodeStart::any) return {{{&decode_runs, 1.0}}, true, ""};
  if (run.start == DecodeStart::in_context && run.context > 0 && !in_context_runs_after.empty()) {
    const auto above = in_context_runs_after.lower_bound(run.context);  // the first context >= the run's
    const std::string own = std::to_string(run.context);
    if (above != in_context_runs_after.end() && above->first == run.context)
      return {{{&above->second, 1.0}}, false, " of " + own + " tokens, as this run's"};
    if (above != in_context_runs_after.begin() && above != in_context_runs_after.end()) {
      const auto below = std::prev(above);
      const double w_above = std::log(static_cast<double>(run.context) / below->first) /
                             std::log(static_cast<double>(above->first) / below->first);
      return {{{&below->second, 1.0 - w_above}, {&above->second, w_above}},
              false,
              " of " + std::to_string(below->first) + " and " + std::to_string(above->first) + " tokens (this run's " + own +
                  " between them, weighted " + format_fixed(1.0 - w_above, 2) + " and " + format_fixed(w_above, 2) +
                  " by log ratio)"};
    }
    const auto nearest = above == in_context_runs_after.end() ? std::prev(above) : above;
    return {{{&nearest->second, 1.0}}, false, " of " + std::to_string(nearest->first) + " tokens (nearest this run's " + own + ")"};
  }
  const DecodeCounts& own = run.start == DecodeStart::fresh ? fresh_decode_runs : in_context_decode_runs;
  if (own.places.total_tokens() > 0) return {{{&own, 1.0}}, false, ""};
  return {{{&decode_runs, 1.0}}, true, ""};
}

double CacheReplay::misses_of(const PricedRuns& priced, int tokens) const {
  double misses = 0;  // each group's own prediction for the run, weighted
  for (const auto& [counts, weight] : priced.groups) misses += weight * run_misses_per_layer_token(counts->places, layers, tokens);
  return misses;
}

std::optional<double> CacheReplay::decode_misses_per_layer_token(DecodeRun run) const {
  if (decode_tokens <= 0 || layers <= 0) return std::nullopt;
  return misses_of(decode_runs_of(run), run.tokens);
}

std::vector<double> CacheReplay::scaled_to(std::vector<double> out, double misses) {
  double mean = 0, missing = 0;  // misses a round, and the share of rounds that missed any
  for (std::size_t m = 1; m < out.size(); ++m) mean += static_cast<double>(m) * out[m], missing += out[m];
  if (mean <= 0) return out;
  const double scale = std::min(misses / mean, 1.0 / missing);
  for (std::size_t m = 1; m < out.size(); ++m) out[m] *= scale;
  out[0] = std::max(0.0, 1.0 - missing * scale);
  return out;
}

std::vector<double> CacheReplay::decode_batches(DecodeRun run) const {
  const PricedRuns priced = decode_runs_of(run);
  std::vector<double> out;  // the groups' clusterings, weighted
  for (const auto& [counts, weight] : priced.groups) {
    const std::vector<double> own = shares(counts->rounds_missing);
    if (out.size() < own.size()) out.resize(own.size(), 0.0);
    for (std::size_t m = 0; m < own.size(); ++m) out[m] += weight * own[m];
  }
  if (decode_tokens <= 0 || layers <= 0) return out;
  return scaled_to(std::move(out), misses_of(priced, run.tokens));
}

std::vector<double> CacheReplay::prompt_batches(int tokens) const {
  std::vector<double> out = shares(prompt_rounds_missing);
  const auto misses = prompt_misses_per_layer_token(tokens);
  if (!misses || tokens <= 0 || round_tokens <= 0) return out;
  const double rounds = std::ceil(static_cast<double>(tokens) / round_tokens);
  return scaled_to(std::move(out), *misses * tokens / rounds);
}

std::optional<double> CacheReplay::prompt_misses_per_layer_token() const {
  if (prompt_tokens <= 0 || layers <= 0) return std::nullopt;
  return prompt_misses / (prompt_tokens * layers);
}

std::optional<double> CacheReplay::prompt_misses_per_layer_token(int tokens) const {
  const auto mean = prompt_misses_per_layer_token();
  if (!mean || tokens <= 0 || round_tokens <= 0) return mean;
  double misses = 0;  // per layer, over the prompt
  int left = tokens;
  for (std::size_t place = 0; left > 0; ++place) {
    const int in_round = std::min(left, round_tokens);
    misses += in_round * (prompt_rounds.seen(place) ? prompt_rounds.per_layer_token(place, layers) : *mean);
    left -= in_round;
  }
  return misses / tokens;
}

std::optional<double> CacheReplay::distinct_per_round() const {
  if (full_rounds <= 0) return std::nullopt;
  return full_round_distinct / full_rounds;
}

double CacheReplay::reused_share(const std::vector<std::vector<double>>& reuse, int rows, double within) {
  if (rows < 0 || at(rows) >= reuse.size()) return 0.0;
  const std::vector<double>& by_distance = reuse[at(rows)];
  const double all = std::accumulate(by_distance.begin(), by_distance.end(), 0.0);
  double reused = 0;
  // The last place holds first uses (distance n_experts), never within.
  for (std::size_t d = 0; d + 1 < by_distance.size() && static_cast<double>(d) <= within; ++d) reused += by_distance[d];
  return all > 0 ? reused / all : 0.0;
}

std::vector<double> CacheReplay::shares(const std::vector<double>& rounds_missing) {
  const double rounds = std::accumulate(rounds_missing.begin(), rounds_missing.end(), 0.0);
  if (rounds <= 0) return {};
  std::vector<double> out;
  for (const double count : rounds_missing) out.push_back(count / rounds);
  return out;
}

std::string CacheReplay::describe(int cap, int pins) const {
  return "the usage history's routing trace (" + format_fixed(prompt_tokens + decode_tokens, 0) + " tokens: " +
         format_fixed(prompt_tokens, 0) + " in prompts, " + format_fixed(decode_tokens, 0) +
         " generated) replayed through the engine's cache (cap " + std::to_string(cap) + ", " + std::to_string(pins) +
         " pins, rounds of " + std::to_string(round_tokens) + " tokens) after a warming pass";
}

std::string CacheReplay::decode_runs_text(DecodeRun run) const {
  if (run.start == DecodeStart::any) return {};
  const std::string kind = run.start == DecodeStart::fresh ? "that start a fresh context" : "that follow their own context";
  const PricedRuns used = decode_runs_of(run);
  if (!used.all_runs)
    return "; priced by the trace's decode runs " + kind + used.of + " (" + format_fixed(used.tokens(), 0) + " tokens)";
  const bool positions = fresh_decode_runs.places.total_tokens() + in_context_decode_runs.places.total_tokens() > 0;
  return "; the trace has no decode runs " + kind +
         (positions ? "" : " (it keeps no positions: a history before format 8)") + ": priced by all its runs";
}

std::optional<CacheReplay> replay_expert_cache(const experts::UsageHistory& history, int cap, int pins,
                                               int requested_round_tokens) {
  if (history.trace().empty()) return std::nullopt;
  return memoized_replay(history, cap, pins, requested_round_tokens);
}

}  // namespace coli::planner
