// The generation loop coli run and coli serve share: stop strings held back
// until they cannot match, and on the tiny model (f32 KV, greedy) every way
// a generation ends, and a prompt that extends the previous one running only
// its new part yet producing the tokens a fresh run produces.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine_test_support.h"
#include "generation.h"

namespace coli::tools {
namespace {

TEST(StopStringFilter, HoldsBackWhatCouldStartAStopStringAndCutsBeforeIt) {
  StopStringFilter filter({"</s>", "\n\n"});
  EXPECT_EQ(filter.push("Hello <"), "Hello ");  // "<" may begin "</s>"
  EXPECT_EQ(filter.push("b>"), "<b>");           // it did not
  EXPECT_EQ(filter.push(" end</"), " end");
  EXPECT_FALSE(filter.matched());
  EXPECT_EQ(filter.push("s> more"), "");
  ASSERT_TRUE(filter.matched());
  EXPECT_EQ(*filter.matched(), "</s>");
  EXPECT_EQ(filter.push("after"), "");
  EXPECT_EQ(filter.flush(), "");
}

TEST(StopStringFilter, TheEarliestStopWinsAndTheRestIsFlushedAtTheEnd) {
  StopStringFilter first({"cd", "bc"});
  EXPECT_EQ(first.push("abcd"), "a");
  EXPECT_EQ(*first.matched(), "bc");
  StopStringFilter none({"xyz", ""});  // an empty stop string never matches
  EXPECT_EQ(none.push("abx"), "ab");
  EXPECT_EQ(none.flush(), "x");
  StopStringFilter no_stops({});
  EXPECT_EQ(no_stops.push("text"), "text");
}

struct Fixture {
  fs::path container = converted_fixture("tiny-demo", WeightFormat::f32);
  runtime::MoeModel model = load(256);
  static runtime::MoeModel load(int context) {
    runtime::ModelOptions options = f32_kv_options();
    options.max_context = context;
    auto model = runtime::MoeModel::load(converted_fixture("tiny-demo", WeightFormat::f32), options);
    EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
    return std::move(*model);
  }
};

const std::vector<std::int32_t> kPrompt = {15496, 995, 11, 428, 318};  // "Hello world, this is" (GPT-2)

// Greedy tokens of one generation; the tokens shown, in order.
std::vector<std::int32_t> tokens_of(Generator& generator, std::span<const std::int32_t> prompt, GenerationLimits limits,
                                    GenerationResult* result = nullptr) {
  std::vector<std::int32_t> shown;
  auto run = generator.generate(prompt, SamplingOptions{0, 1, 1}, limits, [&](const GeneratedPiece& piece) {
    if (piece.token) shown.push_back(*piece.token);
    return true;
  });
  EXPECT_TRUE(run.ok()) << (run.ok() ? "" : run.error().message);
  if (run.ok() && result) *result = *run;
  return shown;
}

TEST(Generator, APromptExtendingThePreviousRunsOnlyItsNewPartAndGeneratesTheSame) {
  Fixture f;
  Generator generator(f.model, nullptr);
  const std::vector<std::int32_t> first = tokens_of(generator, kPrompt, {6, {}, {}});
  ASSERT_EQ(first.size(), 6u);
  // The next request: the prompt, then two of the tokens just generated.
  std::vector<std::int32_t> extended = kPrompt;
  extended.insert(extended.end(), first.begin(), first.begin() + 2);
  GenerationResult reused;
  const std::vector<std::int32_t> continued = tokens_of(generator, extended, {4, {}, {}}, &reused);
  EXPECT_EQ(reused.reused_tokens, static_cast<int>(extended.size()) - 1);
  EXPECT_EQ(continued, std::vector<std::int32_t>(first.begin() + 2, first.end()));
  // A fresh model on the same prompt: the same tokens.
  runtime::MoeModel fresh_model = Fixture::load(256);
  Generator fresh(fresh_model, nullptr);
  GenerationResult cold;
  EXPECT_EQ(tokens_of(fresh, extended, {4, {}, {}}, &cold), continued);
  EXPECT_EQ(cold.reused_tokens, 0);
  // A different prompt after it: nothing of the old one is reused wrongly.
  GenerationResult other;
  const std::vector<std::int32_t> shorter(kPrompt.begin(), kPrompt.begin() + 3);
  const std::vector<std::int32_t> after = tokens_of(generator, shorter, {3, {}, {}}, &other);
  EXPECT_EQ(other.reused_tokens, 2);
  runtime::MoeModel third_model = Fixture::load(256);
  Generator third(third_model, nullptr);
  EXPECT_EQ(tokens_of(third, shorter, {3, {}, {}}), after);
}

TEST(Generator, StopsAtAnEndTokenTheLimitTheFullContextOrWhenTheCallerSays) {
  Fixture f;
  Generator generator(f.model, nullptr);
  const std::vector<std::int32_t> free_run = tokens_of(generator, kPrompt, {5, {}, {}});
  ASSERT_EQ(free_run.size(), 5u);
  // The first token the free run had not shown before (the random model repeats itself).
  std::size_t fresh = free_run.size() - 1;
  while (fresh > 0 && std::find(free_run.begin(), free_run.begin() + static_cast<long>(fresh), free_run[fresh]) != free_run.begin() + static_cast<long>(fresh)) --fresh;
  GenerationResult result;
  EXPECT_EQ(tokens_of(generator, kPrompt, {-1, {free_run[fresh]}, {}}, &result).size(), fresh);  // the end token is not shown
  EXPECT_EQ(result.stop, StopReason::end_token);
  EXPECT_EQ(result.end_token, free_run[fresh]);
  EXPECT_EQ(tokens_of(generator, kPrompt, {3, {}, {}}, &result).size(), 3u);
  EXPECT_EQ(result.stop, StopReason::max_tokens);
  runtime::MoeModel small = Fixture::load(static_cast<int>(kPrompt.size()) + 4);
  Generator tight(small, nullptr);
  // Positions prompt..ctx-1 take the generated tokens; the last one shown needs no position.
  EXPECT_EQ(tokens_of(tight, kPrompt, {-1, {}, {}}, &result).size(), 5u);
  EXPECT_EQ(result.stop, StopReason::context_full);
  int shown = 0;
  auto cancelled = generator.generate(kPrompt, SamplingOptions{0, 1, 1}, {-1, {}, {}},
                                      [&](const GeneratedPiece&) { return ++shown < 2; });
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->stop, StopReason::cancelled);
  EXPECT_EQ(cancelled->generated, 2);
}

TEST(Generator, RefusesWhatCannotRun) {
  Fixture f;
  Generator generator(f.model, nullptr);
  auto keep = [](const GeneratedPiece&) { return true; };
  EXPECT_FALSE(generator.generate({}, SamplingOptions{0, 1, 1}, {}, keep).ok());
  auto stops = generator.generate(kPrompt, SamplingOptions{0, 1, 1}, {2, {}, {"x"}}, keep);
  ASSERT_FALSE(stops.ok());
  EXPECT_NE(stops.error().message.find("tokenizer"), std::string::npos);
  const std::vector<std::int32_t> too_long(300, 11);
  auto long_prompt = generator.generate(too_long, SamplingOptions{0, 1, 1}, {2, {}, {}}, keep);
  ASSERT_FALSE(long_prompt.ok());
  EXPECT_NE(long_prompt.error().message.find("300 tokens"), std::string::npos) << long_prompt.error().message;
}

TEST(Generator, AStopStringEndsTheTextBeforeIt) {
  Fixture f;
  auto tokenizer = Tokenizer::from_file(fs::path(COLI_FIXTURES_DIR) / "tokenizer" / "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  Generator generator(f.model, &*tokenizer);
  const std::vector<std::int32_t> prompt = tokenizer->encode("Hello world");
  auto free_run = generator.generate(prompt, SamplingOptions{0, 1, 1}, {6, {}, {}}, [](const GeneratedPiece&) { return true; });
  ASSERT_TRUE(free_run.ok());
  ASSERT_GE(free_run->text.size(), 4u);
  // A stop string from the middle of what the model writes: the text ends just before it.
  const std::string stop = free_run->text.substr(2, 2);
  std::string shown;
  auto stopped = generator.generate(prompt, SamplingOptions{0, 1, 1}, {6, {}, {stop}}, [&](const GeneratedPiece& piece) {
    shown += piece.text;
    return true;
  });
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->stop, StopReason::stop_string);
  EXPECT_EQ(shown, free_run->text.substr(0, free_run->text.find(stop)));
  EXPECT_EQ(stopped->text, shown);
}

}  // namespace
}  // namespace coli::tools
