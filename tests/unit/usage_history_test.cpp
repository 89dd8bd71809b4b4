// Usage history: counting, decay, pins, and a file that can be damaged in
// every way without the loader crashing or accepting it.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "coli/base/files.h"
#include "coli/experts/usage_history.h"

namespace coli::experts {
namespace {

const UsageHistoryKey kKey{3, 6, 2, "fnv1a64:00000000deadbeef"};

UsageHistory sample_history() {
  auto history = UsageHistory::create(kKey);
  EXPECT_TRUE(history.ok()) << history.error().message;
  EXPECT_TRUE(history->record(0, std::vector<int>{1, 4, 1, 5}).ok());
  EXPECT_TRUE(history->record(2, std::vector<int>{0, 3}).ok());
  history->add_tokens(3);
  ReuseDistances reuse(kKey.n_layers, kKey.n_experts);
  reuse.record(0, std::vector<int>{1, 4});
  reuse.record(0, std::vector<int>{1, 5});
  EXPECT_TRUE(history->add_reuse(reuse.counts()).ok());
  // A two-token prompt, then one generated token, at each of the 3 layers.
  auto trace = RoutingTrace::create(kKey.n_layers, kKey.top_k);
  EXPECT_TRUE(trace.ok());
  trace->begin_pass(2, 0);
  for (int layer = 0; layer < kKey.n_layers; ++layer) {
    trace->record(layer, std::vector<int>{1, 4});
    trace->record(layer, std::vector<int>{1, 5});
  }
  trace->begin_pass(1, 2);
  for (int layer = 0; layer < kKey.n_layers; ++layer) trace->record(layer, std::vector<int>{0, layer});
  EXPECT_TRUE(history->add_trace(*trace).ok());
  // The run's read rounds: three of one read (6 ms in all; the 1 ms one a
  // generated token's), one of three.
  ReadRounds rounds;
  rounds.record_bytes = 8192, rounds.io_threads = 4, rounds.compute_threads = 2;
  rounds.add(1, 0.001, true), rounds.add(1, 0.002), rounds.add(1, 0.003), rounds.add(3, 0.0045);
  rounds.add_wake(0.25e-4), rounds.add_wake(0.25e-4);  // two waited for their last read: 50 us of wake-ups
  // Generated tokens: two that never waited (1 ms in all), one that waited for one round (0.75 ms less its wait).
  rounds.add_token(1e-3, 0), rounds.add_token(0, 0), rounds.add_token(0.75e-3, 1);
  EXPECT_TRUE(history->set_read_rounds(rounds).ok());
  return std::move(history).value();
}

// A valid checksum for edited text, so content checks behind it are reached.
std::string with_checksum(const std::string& body) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : body) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return body + "checksum fnv1a64:" + hex + "\n";
}

std::string body_of(const std::string& file) { return file.substr(0, file.rfind("checksum ")); }

// `history` as an older version writes it: the version line set to
// `version` and every line from `first_dropped` on left out (what that
// version lacks), before version 8 its trace_starts line too, with a valid
// checksum.
std::string as_version(const UsageHistory& history, int version, const std::string& first_dropped) {
  std::string body = body_of(history.serialize());
  const std::string current = "format_version " + std::to_string(kUsageHistoryVersion);
  body.replace(body.find(current), current.size(), "format_version " + std::to_string(version));
  body.erase(body.find(first_dropped));
  if (const auto starts = body.find("trace_starts "); version < 8 && starts != std::string::npos)
    body.erase(starts, body.find('\n', starts) + 1 - starts);
  return with_checksum(body);
}

void expect_refused(const std::string& text, const std::string& says, const UsageHistoryKey& key = kKey) {
  auto parsed = UsageHistory::parse(text, key, "test.coli_usage");
  ASSERT_FALSE(parsed.ok()) << "accepted a bad file that should say '" << says << "'";
  EXPECT_NE(parsed.error().message.find(says), std::string::npos) << parsed.error().message;
  EXPECT_NE(parsed.error().message.find("test.coli_usage"), std::string::npos) << parsed.error().message;
}

TEST(UsageHistory, CountsRoutingsPerLayerAndExpert) {
  const UsageHistory history = sample_history();
  EXPECT_EQ(history.count(0, 1), 2.0);
  EXPECT_EQ(history.count(0, 4), 1.0);
  EXPECT_EQ(history.count(1, 1), 0.0);
  EXPECT_EQ(history.count(2, 3), 1.0);
  EXPECT_EQ(history.total_tokens(), 3.0);
  UsageHistory copy = history;
  EXPECT_FALSE(copy.record(3, std::vector<int>{0}).ok());
  EXPECT_FALSE(copy.record(0, std::vector<int>{2, 6}).ok());
  EXPECT_EQ(copy.count(0, 2), 0.0);  // a refused record counts nothing
  EXPECT_FALSE(UsageHistory::create({3, 6, 2, "has space"}).ok());
  EXPECT_FALSE(UsageHistory::create({3, 6, 7, "id"}).ok());
  EXPECT_FALSE(UsageHistory::create({0, 6, 2, "id"}).ok());
}

TEST(UsageHistory, SaveLoadRoundTripsExactly) {
  UsageHistory history = sample_history();
  ASSERT_TRUE(history.merge(sample_history(), 0.3).ok());  // non-integer counts
  const auto path = std::filesystem::temp_directory_path() / ("coli_usage_test_" + std::to_string(::getpid())) /
                    "model.coli_usage";
  ASSERT_TRUE(history.save(path).ok());
  auto loaded = UsageHistory::load(path, kKey);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->total_tokens(), history.total_tokens());
  for (int layer = 0; layer < kKey.n_layers; ++layer)
    for (int expert = 0; expert < kKey.n_experts; ++expert)
      EXPECT_EQ(loaded->count(layer, expert), history.count(layer, expert));
  EXPECT_EQ(loaded->serialize(), history.serialize());
  std::filesystem::remove_all(path.parent_path());
  EXPECT_FALSE(UsageHistory::load(path, kKey).ok());  // missing file: an error, not a crash
}

// MODEL.usage, where one may be: nothing there is no history and no error;
// a history there loads; one of another model there is an error naming why.
TEST(UsageHistory, LoadIfPresentTellsAbsentFromUnloadable) {
  const auto dir = std::filesystem::temp_directory_path() / ("coli_usage_present_" + std::to_string(::getpid()));
  const auto path = dir / "model.coli.usage";
  std::filesystem::remove_all(dir);
  auto absent = UsageHistory::load_if_present(path, kKey);
  ASSERT_TRUE(absent.ok()) << absent.error().message;
  EXPECT_FALSE(absent->has_value());
  ASSERT_TRUE(sample_history().save(path).ok());
  auto present = UsageHistory::load_if_present(path, kKey);
  ASSERT_TRUE(present.ok()) << present.error().message;
  ASSERT_TRUE(present->has_value());
  EXPECT_EQ((*present)->serialize(), sample_history().serialize());
  UsageHistoryKey other = kKey;
  other.model_identity = "fnv1a64:00000000feedface";
  auto foreign = UsageHistory::load_if_present(path, other);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().message.find("recorded for another model"), std::string::npos) << foreign.error().message;
  std::filesystem::remove_all(dir);
}

// Mattson's stack: a token's choices are measured against the stack before
// it, then move to its top in their order. An LRU cache of C slots hits the
// routings at distance < C.
TEST(UsageHistory, ReuseDistancesAreLruStackDistancesPerToken) {
  ReuseDistances reuse(2, 4);
  reuse.record(0, std::vector<int>{0, 1});  // first uses: stack 0 1
  reuse.record(0, std::vector<int>{2, 1});  // 2 new, 1 at distance 1: stack 2 1 0
  reuse.record(0, std::vector<int>{0, 2});  // 0 at 2, 2 at 0: stack 0 2 1
  reuse.record(0, std::vector<int>{1, 3});  // 1 at 2, 3 new
  reuse.record(1, std::vector<int>{3});
  const std::vector<std::uint64_t> want{1, 1, 2, 0, 4};  // distances 0..3, then first uses
  EXPECT_EQ(reuse.counts()[0], want);
  EXPECT_EQ(reuse.counts()[1], (std::vector<std::uint64_t>{0, 0, 0, 0, 1}));
  auto history = UsageHistory::create({2, 4, 2, "id"});
  ASSERT_TRUE(history.ok());
  ASSERT_TRUE(history->add_reuse(reuse.counts()).ok());
  ASSERT_TRUE(history->add_reuse(reuse.counts()).ok());
  EXPECT_EQ(history->layer_reuse(0)[2], 4.0);
  EXPECT_EQ(history->layer_reuse(0).size(), 5u);
  EXPECT_TRUE(history->layer_reuse(2).empty());
  EXPECT_FALSE(history->add_reuse({{1, 2, 3}}).ok()) << "another shape is refused";
}

// The recorder keeps last-use times, not the stack: over random tokens of
// 128 experts, top 8, its distances are the stack's, searched as written.
TEST(UsageHistory, ReuseDistancesMatchAnExplicitStack) {
  const int n = 128, k = 8;
  std::mt19937 rng(7);
  ReuseDistances reuse(1, n);
  std::vector<int> stack;  // most recently used first
  std::vector<std::uint64_t> want(n + 1, 0), want_decode(n + 1, 0);
  for (int token = 0; token < 2000; ++token) {
    std::vector<int> experts(n);
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    experts.resize(token % 3 == 0 ? k : k / 2 + token % 5);  // some tokens route fewer
    if (token % 7 == 0) experts.assign(experts.begin(), experts.begin() + 2);
    const bool decode = token % 2 == 1;
    for (int e : experts) {
      const auto at = std::find(stack.begin(), stack.end(), e);
      const auto d = at == stack.end() ? static_cast<std::size_t>(n) : static_cast<std::size_t>(at - stack.begin());
      ++want[d];
      if (decode) ++want_decode[d];
    }
    std::erase_if(stack, [&](int e) { return std::find(experts.begin(), experts.end(), e) != experts.end(); });
    stack.insert(stack.begin(), experts.begin(), experts.end());
    reuse.record(0, experts, decode);
  }
  EXPECT_EQ(reuse.counts()[0], want);
  EXPECT_EQ(reuse.decode_counts()[0], want_decode);
}

// A version 1 file (before reuse distances) loads with none recorded.
TEST(UsageHistory, Version1FilesLoadWithoutReuse) {
  // Without the reuse, decode_reuse, trace and read_rounds lines.
  auto loaded = UsageHistory::parse(as_version(sample_history(), 1, "reuse 0"), kKey);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->count(0, 1), 2.0);
  for (int layer = 0; layer < kKey.n_layers; ++layer)
    for (const double d : loaded->layer_reuse(layer)) EXPECT_EQ(d, 0.0);
}

// Version 3 adds the decode tokens' own reuse distances; version 2 files
// (without them) still load, with none recorded.
TEST(UsageHistory, DecodeReuseRoundTripsAndVersion2FilesLoadWithout) {
  UsageHistory history = sample_history();
  ReuseDistances reuse(kKey.n_layers, kKey.n_experts);
  reuse.record(0, std::vector<int>{1, 2});               // a prompt token: first uses
  reuse.record(0, std::vector<int>{1, 3}, /*decode=*/true);  // 1 at distance 0 (1 then 2 on the stack), 3 a first use
  EXPECT_EQ(reuse.decode_counts()[0][0], 1u);
  EXPECT_EQ(reuse.decode_counts()[0].back(), 1u);
  EXPECT_EQ(reuse.counts()[0].back(), 3u);  // every token counts in the whole-run distances
  ASSERT_TRUE(history.add_decode_reuse(reuse.decode_counts()).ok());
  auto loaded = UsageHistory::parse(history.serialize(), kKey);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->layer_decode_reuse(0)[0], 1.0);
  auto version2 = UsageHistory::parse(as_version(history, 2, "decode_reuse 0"), kKey);
  ASSERT_TRUE(version2.ok()) << version2.error().message;
  for (const double d : version2->layer_decode_reuse(0)) EXPECT_EQ(d, 0.0);
  const auto before = loaded->layer_reuse(0), after = version2->layer_reuse(0);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin(), after.end()));
}

TEST(UsageHistory, MergeDecaysTheOlderRun) {
  UsageHistory old_run = sample_history();
  auto new_run = UsageHistory::create(kKey);
  ASSERT_TRUE(new_run->record(0, std::vector<int>{2, 2}).ok());
  new_run->add_tokens(1);
  ASSERT_TRUE(old_run.merge(*new_run, 0.5).ok());
  EXPECT_DOUBLE_EQ(old_run.count(0, 1), 1.0);  // 2 * 0.5
  EXPECT_DOUBLE_EQ(old_run.count(0, 2), 2.0);  // 0 * 0.5 + 2
  EXPECT_DOUBLE_EQ(old_run.total_tokens(), 2.5);
  ASSERT_TRUE(old_run.merge(*new_run, 0.0).ok());
  EXPECT_EQ(old_run.count(0, 1), 0.0);
  EXPECT_FALSE(old_run.merge(*new_run, 1.5).ok());
  EXPECT_FALSE(old_run.merge(*new_run, -0.1).ok());
  auto other = UsageHistory::create({3, 6, 2, "another-model"});
  EXPECT_FALSE(old_run.merge(*other, 0.5).ok());
  EXPECT_EQ(old_run.count(0, 2), 2.0);  // refused merges change nothing
}

// Version 4 adds the routing trace; version 3 files (without it) still
// load, with an empty trace.
TEST(UsageHistory, TraceRoundTripsAndVersion3FilesLoadWithout) {
  const UsageHistory history = sample_history();
  auto loaded = UsageHistory::parse(history.serialize(), kKey);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(std::vector<int>(loaded->trace().pass_tokens().begin(), loaded->trace().pass_tokens().end()),
            (std::vector<int>{2, 1}));
  const auto layer2 = loaded->trace().layer(2);
  EXPECT_EQ(std::vector<int>(layer2.begin(), layer2.end()), (std::vector<int>{1, 4, 1, 5, 0, 2}));
  auto version3 = UsageHistory::parse(as_version(history, 3, "trace_passes"), kKey);
  ASSERT_TRUE(version3.ok()) << version3.error().message;
  EXPECT_TRUE(version3->trace().empty());
  EXPECT_EQ(version3->count(0, 1), 2.0);
}

// Version 8 adds each pass's first KV position (the 2-token prompt at 0,
// the generated token after it at 2); version 7 files load with none known.
// (A bad trace_starts line: ContentErrorsBehindAValidChecksumAreReported.)
TEST(UsageHistory, TraceStartsRoundTripAndVersion7FilesLoadWithout) {
  const UsageHistory history = sample_history();
  EXPECT_NE(history.serialize().find("\ntrace_passes 2 2 1\ntrace_starts 2 0 2\n"), std::string::npos) << history.serialize();
  auto loaded = UsageHistory::parse(history.serialize(), kKey);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const auto starts = loaded->trace().pass_starts();
  EXPECT_EQ(std::vector<int>(starts.begin(), starts.end()), (std::vector<int>{0, 2}));
  auto version7 = UsageHistory::parse(as_version(history, 7, "read_rounds"), kKey);
  ASSERT_TRUE(version7.ok()) << version7.error().message;
  const auto unknown = version7->trace().pass_starts();
  EXPECT_EQ(std::vector<int>(unknown.begin(), unknown.end()), (std::vector<int>{kUnknownStart, kUnknownStart}));
  EXPECT_EQ(version7->trace().tokens(), 3);
}

// Merging appends the newer run's trace (decay 0: it alone), within the window.
TEST(UsageHistory, MergedTracesFollowEachOther) {
  UsageHistory older = sample_history();
  const UsageHistory newer = sample_history();
  ASSERT_TRUE(older.merge(newer, 0.5).ok());
  EXPECT_EQ(older.trace().tokens(), 6);
  EXPECT_EQ(older.trace().pass_tokens().size(), 4u);
  ASSERT_TRUE(older.merge(newer, 0.0).ok());
  EXPECT_EQ(older.trace().tokens(), 3);
}

TEST(UsageHistory, WholeRoutingCountsAddLikeRecordsAndPinEveryLayer) {
  // kKey: 3 layers x 6 experts. The same routings as counts and as records.
  const std::vector<std::vector<std::uint64_t>> counts = {{0, 2, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 0}, {1, 0, 0, 1, 0, 0}};
  auto from_counts = UsageHistory::create(kKey);
  ASSERT_TRUE(from_counts->add_counts(counts, 3).ok());
  auto recorded = UsageHistory::create(kKey);
  ASSERT_TRUE(recorded->record(0, std::vector<int>{1, 1, 4}).ok());
  ASSERT_TRUE(recorded->record(2, std::vector<int>{0, 3}).ok());
  recorded->add_tokens(3);
  EXPECT_EQ(from_counts->serialize(), recorded->serialize());
  // Counts of another shape are refused and count nothing.
  EXPECT_FALSE(from_counts->add_counts({{1, 1, 1, 1, 1, 1}}, 1).ok());
  EXPECT_FALSE(from_counts->add_counts({{1}, {1}, {1}}, 1).ok());
  EXPECT_EQ(from_counts->serialize(), recorded->serialize());
  auto pins = pins_for_every_layer(*from_counts, 2);
  ASSERT_TRUE(pins.ok());
  EXPECT_EQ(*pins, (std::vector<std::vector<int>>{{1, 4}, {}, {0, 3}}));
  EXPECT_FALSE(pins_for_every_layer(*from_counts, -1).ok());
}

TEST(UsageHistory, PinsAreTheMostUsedExpertsTiesToTheLowerId) {
  auto history = UsageHistory::create(kKey);
  ASSERT_TRUE(history->record(1, std::vector<int>{5, 5, 5, 2, 2, 4, 4, 0}).ok());
  EXPECT_EQ(*pins_from_history(*history, 1, 3), (std::vector<int>{5, 2, 4}));
  EXPECT_EQ(*pins_from_history(*history, 1, 0), std::vector<int>{});
  EXPECT_EQ(*pins_from_history(*history, 1, 99), (std::vector<int>{5, 2, 4, 0}));  // unused experts never pinned
  EXPECT_TRUE(pins_from_history(*history, 0, 4)->empty());
  EXPECT_FALSE(pins_from_history(*history, 3, 1).ok());
  EXPECT_FALSE(pins_from_history(*history, 1, -1).ok());
}

TEST(UsageHistory, ModelIdentityFollowsConfigAndTensorNames) {
  const std::vector<std::string> names = {"a.weight", "b.weight"}, split = {"a.weightb", ".weight"};
  const std::string id = usage_model_identity("{\"x\":1}", names);
  EXPECT_EQ(id.rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(id, usage_model_identity("{\"x\":1}", names));
  EXPECT_NE(id, usage_model_identity("{\"x\":2}", names));
  EXPECT_NE(id, usage_model_identity("{\"x\":1}", split));
}

TEST(UsageHistory, EveryTruncationAndEveryByteFlipIsReported) {
  const std::string file = sample_history().serialize();
  for (std::size_t length = 0; length < file.size(); ++length)
    EXPECT_FALSE(UsageHistory::parse(file.substr(0, length), kKey).ok()) << "accepted a prefix of " << length;
  for (std::size_t i = 0; i < file.size(); ++i) {
    std::string damaged = file;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x04);
    EXPECT_FALSE(UsageHistory::parse(damaged, kKey).ok()) << "accepted a flip at byte " << i;
  }
  expect_refused(file.substr(0, file.size() - 10), "truncated");
  std::string flipped = file;
  flipped[file.find("layer 0") + 8] ^= 0x01;
  expect_refused(flipped, "corrupt");
}

TEST(UsageHistory, ForeignVersionAndOtherModelFilesAreReported) {
  const std::string file = sample_history().serialize();
  expect_refused("", "empty");
  expect_refused("{\"not\": \"a history\"}\n", "not a coli usage history");
  std::string future = file;
  const std::string current = "format_version " + std::to_string(kUsageHistoryVersion);
  future.replace(future.find(current), current.size(), "format_version " + std::to_string(kUsageHistoryVersion + 1));
  expect_refused(future, "format version " + std::to_string(kUsageHistoryVersion + 1));
  expect_refused(file, "another model", {3, 6, 2, "fnv1a64:0000000000000001"});
  expect_refused(file, "n_experts 6, this model has 8", {3, 8, 2, kKey.model_identity});
  expect_refused(file, "n_layers 3, this model has 4", {4, 6, 2, kKey.model_identity});
  expect_refused(file, "top_k 2, this model has 1", {3, 6, 1, kKey.model_identity});
}

TEST(UsageHistory, ContentErrorsBehindAValidChecksumAreReported) {
  const std::string body = body_of(sample_history().serialize());
  ASSERT_TRUE(UsageHistory::parse(with_checksum(body), kKey).ok());  // the helper matches the writer
  const auto edit = [&](const std::string& from, const std::string& to) {
    std::string edited = body;
    edited.replace(edited.find(from), from.size(), to);
    return with_checksum(edited);
  };
  expect_refused(edit("layer 1 0 0", "layer 1 nan 0"), "count of expert 0");
  expect_refused(edit("layer 1 0 0", "layer 1 -1 0"), "count of expert 0");
  expect_refused(edit("layer 1 0 0", "layer 1 0"), "layer line 1 is malformed");
  expect_refused(edit("layer 1 ", "layer 2 "), "layer line 1 is malformed");
  expect_refused(edit("total_tokens 3", "total_tokens lots"), "malformed header");
  expect_refused(edit("layer 2", "layer 3 0 0 0 0 0 0\nlayer 2"), "layer line 2 is malformed");
  const std::string seventeen_sets = [&] {
    std::string lines;
    for (int team = 1; team <= 17; ++team) lines += "read_rounds " + std::to_string(team) + " 8192 4 0\n";
    return lines;
  }();
  expect_refused(edit("read_rounds 2 8192", seventeen_sets + "read_rounds 2 8192"), "expected 14 to 30 layer, reuse, trace and read_rounds lines, found 32");
  expect_refused(edit("reuse 1 0 0", "reuse 1 nan 0"), "reuse line 1: count 0");
  expect_refused(edit("reuse 1 0 0", "reuse 1 0"), "reuse line 1 is malformed");
  expect_refused(edit("decode_reuse 1 0 0", "decode_reuse 1 0"), "decode_reuse line 1 is malformed");
  expect_refused(edit("trace 1 1 4", "trace 1 6 4"), "trace line 1: value 0 is not an integer in 0..5");
  expect_refused(edit("trace 1 1 4", "trace 1 4"), "layer 1 has 5 expert ids");
  expect_refused(edit("trace 1 1 4", "trace 2 1 4"), "trace line 1 is malformed");
  expect_refused(edit("trace_passes 2 2 1", "trace_passes 3 2 1"), "trace_passes line: the first value must count the values");
  expect_refused(edit("trace_passes 2 2 1", "trace_passes 2 2 0"), "a pass of 0 tokens");
  expect_refused(edit("trace_passes 2 2 1", "trace_passes 2 2 9999"), "trace_passes line: value 2");
  expect_refused(edit("trace_starts 2 0 2", "trace_starts 1 0"), "trace_starts line: 1 first positions for 2 passes");
  expect_refused(edit("trace_starts 2 0 2", "trace_starts 2 0 -2"), "trace_starts line: value 2 is not an integer in -1..");
  expect_refused(edit("trace_starts 2 0 2", "trace_starts 3 0 2"), "trace_starts line: the first value must count");
  expect_refused(edit("read_rounds 2 8192 4 3", "read_rounds 2 8192 4 4"), "read_rounds line is malformed");
  expect_refused(edit("read_rounds 2 8192 4 3", "read_rounds 2 8192 4 65"), "read_rounds line is malformed");
  expect_refused(edit("read_rounds 2 8192", "read_rounds 2 -1"), "read_rounds line is malformed");
  expect_refused(edit("read_rounds 2 8192", "read_rounds -2 8192"), "read_rounds line is malformed");
  expect_refused(edit("read_rounds 2 8192", "read_rounds 8192"), "read_rounds line is malformed");
  expect_refused(edit("read_rounds 2 8192", "read_rounds 2 0"), "rounds without a record size");
  expect_refused(edit("read_rounds 2 8192 4 3 3", "read_rounds 2 8192 4 3 x"), "rounds of 1 reads need");
  expect_refused(edit("read_rounds 2 8192 4 3 3 0.006", "read_rounds 2 8192 4 3 3 -0.006"), "rounds of 1 reads need");
  expect_refused(edit("0.0045 2 5e-05", "0.0045 2 -5e-05"), "the waited rounds need");
  expect_refused(edit("0.0045 2 5e-05", "0.0045 x 5e-05"), "the waited rounds need");
  expect_refused(edit("0.0045 2 5e-05 1 1 0.001", "0.0045 2"), "read_rounds line is malformed");
  expect_refused(edit("5e-05 1 1 0.001", "5e-05"), "read_rounds line is malformed");
  expect_refused(edit("5e-05 1 1 0.001", "5e-05 2 1 0.001"), "read_rounds line is malformed");
  expect_refused(edit("5e-05 1 1 0.001", "5e-05 1 x 0.001"), "decode rounds of 1 reads need");
  expect_refused(edit("5e-05 1 1 0.001", "5e-05 1 4 0.001"), "4 decode rounds of 1 reads");
  expect_refused(edit("5e-05 1 1 0.001", "5e-05 1 1 0.007"), "exceed the 3 rounds of that count");
  expect_refused(edit("0.001 2 0.001 1 1 0.00075", "0.001 2 0.001 1 1"), "read_rounds line is malformed");
  expect_refused(edit("0.001 2 0.001 1 1 0.00075", "0.001 2 0.001 1 0 0.00075"), "the generated tokens need");
  expect_refused(edit("0.001 2 0.001 1 1 0.00075", "0.001 2 0.001 1 3 0.00075"), "the generated tokens need");
  expect_refused(edit("0.001 2 0.001 1 1 0.00075", "0.001 2 -0.001 1 1 0.00075"), "the generated tokens need");
}

// Version 5 added the latest run's read rounds (record size, I/O threads,
// rounds and seconds by read count), version 6 one set per compute team,
// version 7 the rounds that waited for their last read and the wake-ups,
// version 9 the generated tokens' rounds apart (version 8's load without),
// version 10 the generated tokens by the rounds they waited for;
// version 4 files (without them) still load, with none, and version 5's one
// set loads with its team unrecorded (0). A merge takes the newer run's
// rounds where it read any, and a run that read nothing leaves the ones
// recorded before.
TEST(UsageHistory, ReadRoundsRoundTripAndTheNewerRunsReplaceTheOlder) {
  const UsageHistory history = sample_history();
  auto loaded = UsageHistory::parse(history.serialize(), kKey);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ASSERT_EQ(loaded->read_round_sets().size(), 1u);
  const ReadRounds& r = loaded->read_round_sets()[0];
  EXPECT_EQ(r.compute_threads, 2);
  EXPECT_EQ(r.record_bytes, 8192u);
  EXPECT_EQ(r.io_threads, 4);
  EXPECT_EQ(r.rounds[1], 3u);
  EXPECT_DOUBLE_EQ(r.seconds[1], 0.006);
  EXPECT_EQ(r.rounds[2], 0u);
  EXPECT_EQ(r.rounds[3], 1u);
  EXPECT_EQ(r.waited, 2u);
  EXPECT_DOUBLE_EQ(r.wake_seconds, 0.5e-4);
  EXPECT_EQ(r.decode_rounds[1], 1u);
  EXPECT_DOUBLE_EQ(r.decode_seconds[1], 0.001);
  EXPECT_EQ(r.decode_rounds[3], 0u);
  EXPECT_EQ(r.calm_tokens, 2u);
  EXPECT_DOUBLE_EQ(r.calm_seconds, 1e-3);
  EXPECT_EQ(r.waiting_tokens, 1u);
  EXPECT_EQ(r.waiting_rounds, 1u);
  EXPECT_DOUBLE_EQ(r.waiting_seconds, 0.75e-3);
  EXPECT_NE(history.serialize().find("\nread_rounds 2 8192 4 3 3 0.006 0 0 1 0.0045 2 5e-05 1 1 0.001 2 0.001 1 1 0.00075\n"),
            std::string::npos)
      << history.serialize();
  // Version 9 kept no generated tokens: none, the rounds as they were.
  const std::string version9 =
      body_of(as_version(history, 9, "read_rounds")) + "read_rounds 2 8192 4 3 3 0.006 0 0 1 0.0045 2 5e-05 1 1 0.001\n";
  auto loaded9 = UsageHistory::parse(with_checksum(version9), kKey);
  ASSERT_TRUE(loaded9.ok()) << loaded9.error().message;
  EXPECT_EQ(loaded9->read_round_sets()[0].decode_rounds[1], 1u);
  EXPECT_EQ(loaded9->read_round_sets()[0].calm_tokens + loaded9->read_round_sets()[0].waiting_tokens, 0u);
  // Version 8 kept no decode rounds apart: none, the rounds as they were.
  const std::string version8 =
      body_of(as_version(history, 8, "read_rounds")) + "read_rounds 2 8192 4 3 3 0.006 0 0 1 0.0045 2 5e-05\n";
  auto loaded8 = UsageHistory::parse(with_checksum(version8), kKey);
  ASSERT_TRUE(loaded8.ok()) << loaded8.error().message;
  EXPECT_EQ(loaded8->read_round_sets()[0].rounds[1], 3u);
  EXPECT_EQ(loaded8->read_round_sets()[0].waited, 2u);
  EXPECT_EQ(loaded8->read_round_sets()[0].decode_rounds[1], 0u);
  // Version 6 recorded no wake-ups: none.
  const std::string version6 = body_of(as_version(history, 6, "read_rounds")) + "read_rounds 2 8192 4 3 3 0.006 0 0 1 0.0045\n";
  auto loaded6 = UsageHistory::parse(with_checksum(version6), kKey);
  ASSERT_TRUE(loaded6.ok()) << loaded6.error().message;
  EXPECT_EQ(loaded6->read_round_sets()[0].waited, 0u);
  EXPECT_EQ(loaded6->read_round_sets()[0].rounds[1], 3u);
  auto version4 = UsageHistory::parse(as_version(history, 4, "read_rounds"), kKey);
  ASSERT_TRUE(version4.ok()) << version4.error().message;
  EXPECT_TRUE(version4->read_round_sets().empty());
  const std::string version5 = body_of(as_version(history, 5, "read_rounds")) + "read_rounds 8192 4 3 3 0.006 0 0 1 0.0045\n";
  auto loaded5 = UsageHistory::parse(with_checksum(version5), kKey);
  ASSERT_TRUE(loaded5.ok()) << loaded5.error().message;
  ASSERT_EQ(loaded5->read_round_sets().size(), 1u);
  EXPECT_EQ(loaded5->read_round_sets()[0].compute_threads, 0) << "version 5 did not record the team";
  EXPECT_EQ(loaded5->read_round_sets()[0].rounds[3], 1u);

  UsageHistory older = sample_history();
  auto newer = UsageHistory::create(kKey);
  ASSERT_TRUE(older.merge(*newer, 0.5).ok());
  EXPECT_EQ(older.read_round_sets()[0].rounds[1], 3u) << "a run that read nothing keeps the rounds before it";
  ReadRounds later;
  later.record_bytes = 8192, later.io_threads = 4, later.compute_threads = 2;
  later.add(2, 0.004);
  ASSERT_TRUE(newer->set_read_rounds(later).ok());
  ASSERT_TRUE(older.merge(*newer, 0.5).ok());
  ASSERT_EQ(older.read_round_sets().size(), 1u);
  EXPECT_EQ(older.read_round_sets()[0].rounds[1], 0u);
  EXPECT_EQ(older.read_round_sets()[0].rounds[2], 1u);
  ReadRounds unsized = later;
  unsized.record_bytes = 0;
  EXPECT_FALSE(newer->set_read_rounds(unsized).ok());
  ReadRounds negative = later;
  negative.seconds[2] = -1;
  EXPECT_FALSE(newer->set_read_rounds(negative).ok());
  ReadRounds negative_wake = later;
  negative_wake.add_wake(-1e-6);
  EXPECT_FALSE(newer->set_read_rounds(negative_wake).ok());
}

// Each compute team (and pool and record size) keeps its own rounds: a run
// beside one team leaves another's, the same team's replaces them, and
// beyond kMaxReadRoundSets the oldest setting goes.
TEST(UsageHistory, ReadRoundsAreKeptPerComputeTeam) {
  UsageHistory history = sample_history();  // team 2
  auto rounds_of = [](int team, double seconds) {
    ReadRounds r;
    r.record_bytes = 8192, r.io_threads = 4, r.compute_threads = team;
    r.add(1, seconds);
    return r;
  };
  auto newer = UsageHistory::create(kKey);
  ASSERT_TRUE(newer->set_read_rounds(rounds_of(1, 0.0006)).ok());
  ASSERT_TRUE(history.merge(*newer, 0.5).ok());
  ASSERT_EQ(history.read_round_sets().size(), 2u);
  EXPECT_EQ(history.read_round_sets()[0].compute_threads, 2);
  EXPECT_EQ(history.read_round_sets()[0].rounds[3], 1u) << "team 2's rounds stay beside team 1's";
  EXPECT_EQ(history.read_round_sets()[1].compute_threads, 1);
  ASSERT_TRUE(history.set_read_rounds(rounds_of(2, 0.0014)).ok());
  ASSERT_EQ(history.read_round_sets().size(), 2u);
  EXPECT_EQ(history.read_round_sets()[1].compute_threads, 2) << "the latest set last";
  EXPECT_DOUBLE_EQ(history.read_round_sets()[1].seconds[1], 0.0014);
  ReadRounds other_pool = rounds_of(2, 0.002);
  other_pool.io_threads = 0;
  ASSERT_TRUE(history.set_read_rounds(other_pool).ok());
  EXPECT_EQ(history.read_round_sets().size(), 3u);

  auto reloaded = UsageHistory::parse(history.serialize(), kKey);
  ASSERT_TRUE(reloaded.ok()) << reloaded.error().message;
  EXPECT_EQ(reloaded->serialize(), history.serialize());
  for (int team = 3; team < 3 + static_cast<int>(UsageHistory::kMaxReadRoundSets); ++team)
    ASSERT_TRUE(history.set_read_rounds(rounds_of(team, 0.001)).ok());
  ASSERT_EQ(history.read_round_sets().size(), UsageHistory::kMaxReadRoundSets);
  EXPECT_EQ(history.read_round_sets()[0].compute_threads, 3) << "the three oldest settings went";
  EXPECT_TRUE(UsageHistory::parse(history.serialize(), kKey).ok());
}

}  // namespace
}  // namespace coli::experts
