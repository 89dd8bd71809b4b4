// coli perplexity's arithmetic on rows small enough to check by hand:
// llama-perplexity's windows, the NLL of a token, the KL divergence (0 for a
// model against itself, the closed form for two known distributions), top-1
// agreement and the summary's quantiles.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "perplexity.h"
#include "saved_logits.h"

namespace coli::tools {
namespace {

TEST(Perplexity, WindowsAreLlamaPerplexitysNonOverlappingHalves) {
  const PerplexityWindows w = perplexity_windows(1000, 256);
  EXPECT_EQ(w.count, 3);  // the 232-token tail is left out
  EXPECT_EQ(w.first_scored, 129);
  EXPECT_EQ(w.scored_per_window(), 127);
  EXPECT_EQ(perplexity_windows(100, 256).count, 0);
}

TEST(Perplexity, TheNllOfAUniformRowIsLogOfTheVocabulary) {
  const std::vector<float> uniform(50, 3.0f);
  EXPECT_NEAR(negative_log_likelihood(uniform, 7), std::log(50.0), 1e-12);
  const std::vector<float> sure = {0, 100, 0};
  EXPECT_NEAR(negative_log_likelihood(sure, 1), 0, 1e-12);
}

TEST(Perplexity, KlDivergenceIsZeroAgainstItselfAndTheClosedFormOtherwise) {
  const std::vector<float> row = {1.5f, -2.0f, 0.25f, 3.0f};
  const TokenDivergence self = token_divergence(row, row);
  EXPECT_EQ(self.kld, 0.0);
  EXPECT_TRUE(self.same_top1);
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  const std::vector<float> p = {0, 0};
  const std::vector<float> q = {0, static_cast<float>(std::log(3.0))};
  const TokenDivergence d = token_divergence(p, q);
  EXPECT_NEAR(d.kld, 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);
  const std::vector<float> flipped = {1, 0};
  EXPECT_FALSE(token_divergence(flipped, q).same_top1);
}

TEST(Perplexity, TheSummaryHasTheMeanNllItsExponentialAndTheKldQuantiles) {
  PerplexityTally tally;
  for (int i = 1; i <= 100; ++i) {
    const TokenDivergence divergence{i / 100.0, i % 4 != 0};
    tally.add(std::log(2.0), &divergence, std::log(4.0));
  }
  const nlohmann::json s = tally.summary();
  EXPECT_EQ(s["schema_version"], 1);
  EXPECT_EQ(s["tokens"], 100);
  EXPECT_NEAR(s["perplexity"].get<double>(), 2.0, 1e-12);
  EXPECT_NEAR(s["base_perplexity"].get<double>(), 4.0, 1e-12);
  EXPECT_NEAR(s["kld"]["mean"].get<double>(), 0.505, 1e-12);
  EXPECT_NEAR(s["kld"]["median"].get<double>(), 0.50, 1e-12);
  EXPECT_NEAR(s["kld"]["p99"].get<double>(), 0.99, 1e-12);
  EXPECT_NEAR(s["kld"]["max"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(s["top1_agreement"].get<double>(), 0.75, 1e-12);
  PerplexityTally alone;
  alone.add(1.0);
  EXPECT_FALSE(alone.summary().contains("kld"));
}

TEST(SavedLogits, RoundTripsRowsAndRefusesWhatDoesNotMatchTheHeader) {
  const auto dir = std::filesystem::temp_directory_path() / ("coli_saved_logits_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<std::int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const SavedLogitsHeader header{3, 4, 2, 3, tokens_hash(tokens), "f32", "source"};  // 2 windows x 1 scored row
  auto writer = SavedLogitsWriter::create(dir / "a.logits", header);
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  ASSERT_TRUE(writer->append(std::vector<float>{0.5f, -1, 2}).ok());
  EXPECT_FALSE(writer->commit().ok());  // one row of two: not published
  EXPECT_FALSE(std::filesystem::exists(dir / "a.logits"));
  auto full = SavedLogitsWriter::create(dir / "a.logits", header);
  ASSERT_TRUE(full.ok());
  ASSERT_TRUE(full->append(std::vector<float>{0.5f, -1, 2}).ok());
  ASSERT_TRUE(full->append(std::vector<float>{3, 4, 5}).ok());
  ASSERT_TRUE(full->commit().ok());
  EXPECT_TRUE(is_saved_logits(dir / "a.logits"));
  auto reader = SavedLogitsReader::open(dir / "a.logits");
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  EXPECT_EQ(reader->header().tokens_hash, tokens_hash(tokens));
  EXPECT_NE(tokens_hash(tokens), tokens_hash(std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(reader->header().experts, "f32");
  std::vector<float> row(3);
  ASSERT_TRUE(reader->next(row).ok());
  EXPECT_EQ(row, (std::vector<float>{0.5f, -1, 2}));
  ASSERT_TRUE(reader->next(row).ok());
  EXPECT_EQ(row[2], 5);
  EXPECT_FALSE(reader->next(row).ok());
  std::filesystem::resize_file(dir / "a.logits", std::filesystem::file_size(dir / "a.logits") - 4);
  auto cut = SavedLogitsReader::open(dir / "a.logits");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().message.find("cut off"), std::string::npos);
  std::ofstream(dir / "other.txt") << "{\"vocab\": 3}\n";
  EXPECT_FALSE(is_saved_logits(dir / "other.txt"));
  EXPECT_FALSE(SavedLogitsReader::open(dir / "other.txt").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace coli::tools
