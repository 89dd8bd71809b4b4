// safetensors reading: headers, sharded sets, ranged data access, float
// conversion, and the bad-file table (each error names file/tensor and cause).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "unit/test_support.h"
#include "coli/model/safetensors.h"
#include "coli/model/safetensors_writer.h"
#include "coli/model/tensor_data.h"

namespace coli::model {
namespace {
namespace fs = std::filesystem;

using testing_support::Contains;

// A scratch directory for one test.
class TempDir : public testing_support::TempDir {
 public:
  TempDir() : testing_support::TempDir("coli-safetensors") {}
};

void write_raw(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file image from a hand-written header and `data_bytes` zero bytes.
std::string raw_file(const std::string& header, std::size_t data_bytes) {
  std::string image;
  for (int i = 0; i < 8; ++i) image.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return image + header + std::string(data_bytes, '\0');
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::string read_error(const std::string& image) {
  TempDir dir;
  write_raw(dir.path() / "bad.safetensors", image);
  auto file = read_safetensors_header(dir.path() / "bad.safetensors");
  EXPECT_FALSE(file.ok());
  return file.ok() ? "" : file.error().message;
}

TEST(Safetensors, RoundTripsHeaderDataAndMetadata) {
  TempDir dir;
  const fs::path path = dir.path() / "model.safetensors";
  const std::vector<float> f32{1.5f, -2.0f, 3.25f, 0.0f, 8.0f, -0.5f};
  const std::vector<std::uint16_t> f16{0x3C00, 0xC000, 0x7BFF, 0x0001};  // 1, -2, 65504, 2^-24
  const std::vector<std::uint16_t> bf16{0x3F80, 0xBFC0, 0x4120};           // 1, -1.5, 10
  ASSERT_TRUE(write_safetensors(path,
                                {{"a.f32", DType::F32, {2, 3}, bytes_of(f32)},
                                 {"b.f16", DType::F16, {2, 2}, bytes_of(f16)},
                                 {"c.bf16", DType::BF16, {3}, bytes_of(bf16)},
                                 {"d.ids", DType::I64, {2}, {}}},
                                {{"format", "pt"}})
                  .ok());

  auto file = read_safetensors_header(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->metadata.at("format"), "pt");
  ASSERT_EQ(file->tensors.size(), 4u);
  EXPECT_EQ(file->header_size % 8, 0u);  // padded like the reference writer
  const std::uint64_t data_start = 8 + file->header_size;
  EXPECT_EQ(file->tensors[0].name, "a.f32");
  EXPECT_EQ(file->tensors[0].offset, data_start);
  EXPECT_EQ(file->tensors[1].offset, data_start + 24);
  EXPECT_EQ(file->tensors[1].shape, (std::vector<std::uint64_t>{2, 2}));
  EXPECT_EQ(file->tensors[3].dtype, DType::I64);
  EXPECT_EQ(file->tensors[3].bytes, 16u);
  EXPECT_EQ(file->file_size, data_start + 24 + 8 + 6 + 16);

  auto row = read_row_f32(file->tensors[0], 1);
  ASSERT_TRUE(row.ok()) << row.error().message;
  EXPECT_EQ(*row, (std::vector<float>{0.0f, 8.0f, -0.5f}));
  auto halves = read_row_f32(file->tensors[1], 0);
  ASSERT_TRUE(halves.ok());
  EXPECT_EQ(*halves, (std::vector<float>{1.0f, -2.0f}));
  auto halves_row1 = read_row_f32(file->tensors[1], 1);
  ASSERT_TRUE(halves_row1.ok());
  EXPECT_EQ((*halves_row1)[0], 65504.0f);
  EXPECT_EQ((*halves_row1)[1], std::ldexp(1.0f, -24));
  auto brains = read_row_f32(file->tensors[2], 0);
  ASSERT_TRUE(brains.ok());
  EXPECT_EQ(*brains, (std::vector<float>{1.0f, -1.5f, 10.0f}));

  auto mapped = MappedRange::map(file->tensors[0], 12, 12);
  ASSERT_TRUE(mapped.ok()) << mapped.error().message;
  ASSERT_EQ(mapped->bytes().size(), 12u);
  float second_row[3];
  std::memcpy(second_row, mapped->bytes().data(), 12);
  EXPECT_EQ(second_row[2], -0.5f);

  auto outside = read_tensor_bytes(file->tensors[2], 4, 4);
  ASSERT_FALSE(outside.ok());
  EXPECT_TRUE(Contains(outside.error().message, "c.bf16"));
  auto integer_row = read_row_f32(file->tensors[3], 0);
  ASSERT_FALSE(integer_row.ok());
  EXPECT_TRUE(Contains(integer_row.error().message, "I64"));
  EXPECT_TRUE(Contains(read_row_f32(file->tensors[0], 2).error().message, "row 2 is out of range"));
}

TEST(Safetensors, ConvertsHalfPrecisionSpecialValues) {
  EXPECT_EQ(f16_to_f32(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(bf16_to_f32(0xC2F7), -123.5f);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7F80)));
}

TEST(SafetensorsBadInput, FileShorterThanLengthPrefix) {
  EXPECT_TRUE(Contains(read_error("abc"), "file is 3 bytes, shorter than the 8-byte header length"));
}

TEST(SafetensorsBadInput, HeaderLargerThanFile) {
  std::string image = raw_file("{}", 0);
  image[0] = static_cast<char>(0xff);  // claims a 255-byte header in a 10-byte file
  EXPECT_TRUE(Contains(read_error(image), "header length 255 bytes is larger than the file (10 bytes)"));
}

TEST(SafetensorsBadInput, TruncatedData) {
  auto image = build_safetensors({{"w", DType::F32, {4, 4}, {}}});
  ASSERT_TRUE(image.ok());
  const std::string cut = image->substr(0, image->size() - 10);
  const std::string message = read_error(cut);
  EXPECT_TRUE(Contains(message, "tensor 'w': data_offsets [0, 64] run past the end of the file (54 data bytes"));
  EXPECT_TRUE(Contains(message, "re-download"));
}

TEST(SafetensorsBadInput, UnknownDtype) {
  const std::string header = R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})";
  EXPECT_TRUE(Contains(read_error(raw_file(header, 2)),
              "tensor 'w': unknown dtype 'F8_E4M3'; coli reads F32, F16, BF16, I8, U8, I32, I64"));
}

TEST(SafetensorsBadInput, OffsetsDisagreeWithShape) {
  const std::string header = R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}})";
  EXPECT_TRUE(Contains(read_error(raw_file(header, 10)),
              "data_offsets [0, 10] hold 10 bytes but shape [2, 3] x BF16 needs 12 bytes"));
}

TEST(SafetensorsBadInput, OverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_TRUE(Contains(read_error(raw_file(header, 12)), "tensors 'a' and 'b' overlap"));
}

TEST(SafetensorsBadInput, DuplicateTensorName) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_TRUE(Contains(read_error(raw_file(header, 8)), "tensor 'a' is listed twice in the header"));
}

TEST(SafetensorsBadInput, MalformedEntries) {
  EXPECT_TRUE(Contains(read_error(raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4)),
              "end before they begin"));
  EXPECT_TRUE(Contains(read_error(raw_file(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4)),
              "tensor 'w': 'shape' is missing or not a list"));
  EXPECT_TRUE(Contains(read_error(raw_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)),
              "'shape' holds -1, not a non-negative integer"));
  EXPECT_TRUE(Contains(read_error(raw_file(R"({"__metadata__":{"n":1}})", 0)), "__metadata__ 'n' is not a string"));
  EXPECT_TRUE(Contains(read_error(raw_file("[1,2]", 0)), "header is not a JSON object"));
}

TEST(SafetensorsBadInput, BrokenHeaderJsonGivesPosition) {
  const std::string message = read_error(raw_file("{\"w\": {\"dtype\": \"F32\",\n  \"shape\": [1,}}", 0));
  EXPECT_TRUE(Contains(message, "bad.safetensors header:2:"));
  EXPECT_TRUE(Contains(message, "invalid JSON"));
}

class ShardedSet : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(write_safetensors(dir.path() / "model-00001-of-00002.safetensors",
                                  {{"embed", DType::BF16, {4, 2}, {}}, {"norm", DType::F32, {2}, {}}})
                    .ok());
    ASSERT_TRUE(
        write_safetensors(dir.path() / "model-00002-of-00002.safetensors", {{"head", DType::BF16, {4, 2}, {}}}).ok());
  }
  void write_index(const std::string& weight_map) {
    write_raw(dir.path() / "model.safetensors.index.json",
              R"({"metadata": {"total_size": 40}, "weight_map": )" + weight_map + "}");
  }
  TempDir dir;
};

TEST_F(ShardedSet, OpensEveryShardInTheIndex) {
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "norm": "model-00001-of-00002.safetensors",
                  "head": "model-00002-of-00002.safetensors"})");
  auto set = open_safetensors_dir(dir.path());
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->tensors().size(), 3u);
  EXPECT_EQ(set->files().size(), 2u);
  ASSERT_NE(set->find("head"), nullptr);
  EXPECT_EQ(set->find("head")->file.filename(), "model-00002-of-00002.safetensors");
  EXPECT_EQ(set->find("missing"), nullptr);
}

TEST_F(ShardedSet, MissingShardIsNamed) {
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00003-of-00003.safetensors"})");
  auto set = open_safetensors_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(Contains(set.error().message, "shard 'model-00003-of-00003.safetensors' (holding 'head') does not exist"));
  EXPECT_TRUE(Contains(set.error().message, "download is incomplete"));
}

TEST_F(ShardedSet, IndexAndShardsMustAgree) {
  write_index(R"({"embed": "model-00002-of-00002.safetensors", "head": "model-00002-of-00002.safetensors"})");
  auto set = open_safetensors_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(Contains(set.error().message,
              "weight_map puts 'embed' in 'model-00002-of-00002.safetensors', but that shard does not contain it"));
}

TEST_F(ShardedSet, TensorInTwoShardsIsRefused) {
  ASSERT_TRUE(write_safetensors(dir.path() / "extra.safetensors", {{"norm", DType::F32, {2}, {}}}).ok());
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "x": "extra.safetensors"})");
  auto set = open_safetensors_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(Contains(set.error().message, "tensor 'norm' is in both"));
}

TEST_F(ShardedSet, ShardNamesStayInTheDirectory) {
  write_index(R"({"embed": "../model-00001-of-00002.safetensors"})");
  auto set = open_safetensors_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(Contains(set.error().message, "is not a file name in the checkpoint directory"));
}

TEST(SafetensorsDir, EmptyDirectorySaysWhatIsMissing) {
  TempDir dir;
  auto set = open_safetensors_dir(dir.path());
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(Contains(set.error().message, "no model.safetensors or model.safetensors.index.json"));
}

}  // namespace
}  // namespace coli::model
