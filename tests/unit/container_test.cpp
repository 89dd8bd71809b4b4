// The model container: a streamed write reads back exactly, and damaged or
// foreign files are refused with the file named and what to do.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "coli/base/files.h"
#include "coli/container/container.h"

namespace coli::container {
namespace {

namespace fs = std::filesystem;

class ContainerTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("coli_container_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A 2-layer, 3-expert q4_g64 container with one dense tensor; experts
  // hold bytes that encode (layer, expert) so misplaced records show.
  fs::path write_sample(const std::string& name = "model.coli") {
    const fs::path path = dir_ / name;
    auto writer = ContainerWriter::create(path);
    EXPECT_TRUE(writer.ok());
    std::vector<float> norm = {1.0f, 2.0f, 3.0f, 4.0f};
    EXPECT_TRUE(writer->add_tensor("model.norm.weight", WeightFormat::f32, {4}, std::as_bytes(std::span(norm))).ok());
    // gate/up 64x128 (in 128), down 128x64: q4 weights rows*cols/2, scales rows*cols/64*2.
    std::vector<ExpertPart> parts = {{"gate", 64, 128, 0, 4096, 4096, 256},
                                     {"up", 64, 128, 4352, 4096, 8448, 256},
                                     {"down", 128, 64, 8704, 4096, 12800, 256}};
    EXPECT_TRUE(writer->begin_experts(WeightFormat::q4_g64, 2, 3, {0, 1}, parts).ok());
    for (int layer = 0; layer < 2; ++layer) {
      for (int expert = 0; expert < 3; ++expert) {
        std::vector<std::byte> record(13056, std::byte(layer * 16 + expert));
        EXPECT_TRUE(writer->add_expert(record).ok());
      }
    }
    EXPECT_TRUE(writer->finish("olmoe", R"({"model_type": "olmoe"})", "test").ok());
    return path;
  }

  fs::path dir_;
};

TEST_F(ContainerTest, StreamedWriteReadsBack) {
  const fs::path path = write_sample();
  auto reader = ContainerReader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  const ContainerIndex& index = reader->index();
  EXPECT_EQ(index.architecture, "olmoe");
  EXPECT_EQ(index.experts.format, WeightFormat::q4_g64);
  EXPECT_EQ(index.experts.record_bytes, 13056u);
  EXPECT_EQ(index.experts.record_stride, 16384u);
  const TensorEntry* norm = reader->find_tensor("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  std::vector<float> values(4);
  ASSERT_TRUE(reader->read(norm->offset, std::as_writable_bytes(std::span(values))).ok());
  EXPECT_EQ(values[3], 4.0f);
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    for (std::uint32_t expert = 0; expert < 3; ++expert) {
      const std::uint64_t offset = index.experts.record_offset(layer, expert);
      EXPECT_EQ(offset % kAlignment, 0u);
      std::byte first{};
      ASSERT_TRUE(reader->read(offset, std::span(&first, 1)).ok());
      EXPECT_EQ(first, std::byte(layer * 16 + expert));
    }
  }
  // Only the finished file is left: no temporaries.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(ContainerTest, AnUnfinishedWriterLeavesNothing) {
  {
    auto writer = ContainerWriter::create(dir_ / "partial.coli");
    ASSERT_TRUE(writer.ok());
    std::vector<float> data(8, 1.0f);
    ASSERT_TRUE(writer->add_tensor("x", WeightFormat::f32, {8}, std::as_bytes(std::span(data))).ok());
  }  // destroyed without finish(), as after a failed conversion
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(ContainerTest, WriterRefusesRecordsThatDoNotMatchTheLayout) {
  auto writer = ContainerWriter::create(dir_ / "bad.coli");
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->begin_experts(WeightFormat::q8_row, 1, 1, {0}, {{"gate", 2, 2, 0, 4, 4, 8}}).ok());
  std::vector<std::byte> wrong(5);
  auto status = writer->add_expert(wrong);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("expected 12"), std::string::npos) << status.error().message;
  EXPECT_FALSE(writer->finish("olmoe", "{}", "t").ok());  // 0 of 1 records written
}

// Damages a copy of a good container and expects `expected` in the error.
void expect_refused(const fs::path& good, const fs::path& damaged, const std::function<void(std::string&)>& damage,
                    const std::string& expected) {
  std::string bytes = *read_text_file(good);
  damage(bytes);
  ASSERT_TRUE(write_file_atomically(damaged, bytes).ok());
  auto reader = ContainerReader::open(damaged);
  ASSERT_FALSE(reader.ok()) << expected;
  EXPECT_NE(reader.error().message.find(damaged.string()), std::string::npos) << reader.error().message;
  EXPECT_NE(reader.error().message.find(expected), std::string::npos) << reader.error().message;
}

TEST_F(ContainerTest, DamagedFilesAreRefusedWithTheReason) {
  const fs::path good = write_sample();
  const fs::path bad = dir_ / "damaged.coli";
  expect_refused(good, bad, [](std::string& b) { b.resize(b.size() - 100); }, "truncated");
  expect_refused(good, bad, [](std::string& b) { b.resize(b.size() / 2); }, "truncated");
  expect_refused(good, bad, [](std::string& b) { b[0] = 'X'; }, "not a coli container");
  expect_refused(good, bad, [](std::string& b) { b[8] = 9; }, "format version 9, newer than this build");
  expect_refused(good, bad, [](std::string& b) { b.resize(100); }, "too small");
  expect_refused(good, bad,
                 [](std::string& b) {
                   const auto at = b.find("\"record_stride\":16384");
                   ASSERT_NE(at, std::string::npos);
                   b.replace(at, 21, "\"record_stride\":16385");  // same length keeps the trailer valid
                 },
                 "stride");
  expect_refused(good, bad,
                 [](std::string& b) {
                   const auto at = b.find("\"dtype\":\"F32\"");
                   ASSERT_NE(at, std::string::npos);
                   b.replace(at, 13, "\"dtype\":\"Q99\"");
                 },
                 "index field tensors[model.norm.weight].dtype: unknown dtype 'Q99' (valid: F32, BF16, F16, Q8_ROW, Q4_G64)");
  expect_refused(good, bad,
                 [](std::string& b) {
                   const auto at = b.find("\"tensors\"");
                   ASSERT_NE(at, std::string::npos);
                   b[at + 1] = 'T';  // the index no longer has "tensors"
                 },
                 "damaged index");
}

TEST_F(ContainerTest, MissingFileNamesThePath) {
  auto reader = ContainerReader::open(dir_ / "nope.coli");
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.error().message.find("nope.coli"), std::string::npos);
}

}  // namespace
}  // namespace coli::container
