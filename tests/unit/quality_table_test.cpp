// The quality file coli perplexity --record writes and coli-plan --quality
// reads: a round trip, a representation measured again replaces the old
// figures, and broken files are refused naming the field.
#include <gtest/gtest.h>

#include <string>

#include "coli/planner/quality.h"

namespace coli::planner {
namespace {

QualityEntry entry(WeightFormat experts, DenseFormat dense, double kld) {
  return QualityEntry{experts, dense, kld, 10 * kld, 0.9, 35.5, 35.0, 9779, "heldout.txt"};
}

TEST(QualityTable, RoundTripsAndReplacesARepresentationMeasuredAgain) {
  QualityTable table{"model-x", {}};
  table.record(entry(WeightFormat::q4_g64, DenseFormat::source, 0.02));
  table.record(entry(WeightFormat::q8_row, DenseFormat::q8_row, 0.0015));
  table.record(entry(WeightFormat::q4_g64, DenseFormat::source, 0.03));  // measured again
  ASSERT_EQ(table.entries.size(), 2u);
  auto parsed = parse_quality_json(quality_to_json(table), "q.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->model_identity, "model-x");
  const QualityEntry* q4 = parsed->find(WeightFormat::q4_g64, DenseFormat::source);
  ASSERT_NE(q4, nullptr);
  EXPECT_DOUBLE_EQ(q4->kld_mean, 0.03);
  EXPECT_EQ(q4->tokens, 9779u);
  EXPECT_EQ(q4->text, "heldout.txt");
  EXPECT_EQ(parsed->find(WeightFormat::q4_g64, DenseFormat::q8_row), nullptr);
}

TEST(QualityTable, RefusesBrokenFilesNamingTheField) {
  auto error_of = [](const std::string& text) {
    auto parsed = parse_quality_json(text, "q.json");
    return parsed.ok() ? std::string("accepted") : parsed.error().message;
  };
  EXPECT_NE(error_of("not json").find("q.json is not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"schema_version": 2})").find("schema_version must be 1"), std::string::npos);
  EXPECT_NE(error_of(R"({"schema_version": 1, "entries": []})").find("model_identity"), std::string::npos);
  const std::string head = R"({"schema_version": 1, "model_identity": "m", "entries": [)";
  const std::string good = R"("kld_p99": 0, "top1_agreement": 1, "perplexity": 1, "base_perplexity": 1, "tokens": 5)";
  EXPECT_NE(error_of(head + R"({"experts": "q3", "dense": "source", "kld_mean": 0, )" + good + "}]}").find("entries[0].experts"),
            std::string::npos);
  EXPECT_NE(error_of(head + R"({"experts": "q4_g64", "dense": "source", "kld_mean": -1, )" + good + "}]}").find("entries[0].kld_mean"),
            std::string::npos);
  EXPECT_NE(error_of(head + R"({"experts": "q4_g64", "dense": "source", "kld_mean": 0, "kld_p99": 0, "top1_agreement": 2,
      "perplexity": 1, "base_perplexity": 1, "tokens": 5}]})").find("top1_agreement must be in [0, 1]"), std::string::npos);
  EXPECT_EQ(error_of(head + R"({"experts": "q4_g64", "dense": "q8_row", "kld_mean": 0.5, )" + good + "}]}"), "accepted");
}

}  // namespace
}  // namespace coli::planner
