// The model container: a streamed write reads back exactly, and damaged or
// foreign files are refused with the file named and what to do.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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
  fs::path write_sample(const std::string& name = "model.coli", const std::vector<RuntimeFile>& runtime = {}) {
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
    for (const RuntimeFile& file : runtime) EXPECT_TRUE(writer->add_runtime_file(file.name, file.bytes).ok()) << file.name;
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

std::uint64_t u64_at(const std::string& bytes, std::size_t at) {
  std::uint64_t value = 0;
  std::memcpy(&value, bytes.data() + at, 8);
  return value;
}
void put_u64(std::string& bytes, std::size_t at, std::uint64_t value) { std::memcpy(bytes.data() + at, &value, 8); }

// What a hostile writer can do: edit the index and seal it again (trailer
// offset, size and checksum right), so only the reader's bounds stand between it and the engine.
std::function<void(std::string&)> resealed(const std::function<void(nlohmann::json&)>& edit) {
  return [edit](std::string& bytes) {
    const std::size_t trailer = bytes.size() - 32;
    const std::uint64_t offset = u64_at(bytes, trailer);
    nlohmann::json index = nlohmann::json::parse(bytes.substr(offset, u64_at(bytes, trailer + 8)));
    edit(index);
    const std::string text = index.dump();
    const std::string magic = bytes.substr(trailer + 24);
    bytes.resize(offset);
    bytes += text;
    std::string seal(32, '\0');
    put_u64(seal, 0, offset);
    put_u64(seal, 8, text.size());
    put_u64(seal, 16, XXH3_64bits(text.data(), text.size()));
    seal.replace(24, 8, magic);
    bytes += seal;
  };
}

TEST_F(ContainerTest, DamagedFilesAreRefusedWithTheReason) {
  const fs::path good = write_sample();
  const fs::path bad = dir_ / "damaged.coli";
  expect_refused(good, bad, [](std::string& b) { b.resize(b.size() - 100); }, "truncated");
  expect_refused(good, bad, [](std::string& b) { b.resize(b.size() / 2); }, "truncated");
  expect_refused(good, bad, [](std::string& b) { b[0] = 'X'; }, "not a coli container");
  expect_refused(good, bad, [](std::string& b) { b[8] = 9; }, "format version 9, newer than this build");
  expect_refused(good, bad, [](std::string& b) { b.resize(100); }, "too small");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["experts"]["record_stride"] = 16385; }), "stride");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["tensors"][0]["dtype"] = "Q99"; }),
                 "index field tensors[model.norm.weight].dtype: unknown dtype 'Q99' (valid: F32, BF16, F16, Q8_ROW, Q4_G64)");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j.erase("tensors"); }), "index field tensors is missing");
}

// Format 2 added the checksums: a version 1 file is refused with the advice to convert again.
TEST_F(ContainerTest, AnOldFormatVersionIsRefusedWithAdvice) {
  const fs::path good = write_sample();
  expect_refused(good, dir_ / "v1.coli", [](std::string& b) { b[8] = 1; }, "format version 1, which has no checksums");
  expect_refused(good, dir_ / "v1.coli", [](std::string& b) { b[8] = 1; }, "convert the model again with `coli convert`");
}

// Any byte of the index or the header changed is caught at open, before the JSON is trusted.
TEST_F(ContainerTest, IndexAndHeaderDamageIsCaughtAtOpen) {
  const fs::path good = write_sample();
  const fs::path bad = dir_ / "damaged.coli";
  expect_refused(good, bad, [](std::string& b) { b[b.find("\"record_stride\":16384") + 16] = '2'; }, "does not match its checksum");
  expect_refused(good, bad, [](std::string& b) { b[b.find("olmoe")] = 'x'; }, "does not match its checksum");
  expect_refused(good, bad, [](std::string& b) { b[b.size() - 16] ^= 1; }, "does not match its checksum");  // the stored checksum
  expect_refused(good, bad, [](std::string& b) { b[b.find("{\"architecture\"") - 3] ^= 1; }, "checksum table does not match");
  expect_refused(good, bad, [](std::string& b) { b[12] = 1; }, "reserved bytes");
  expect_refused(good, bad, [](std::string& b) { b[4000] = 1; }, "reserved bytes");
}

// Sizes, counts and offsets that wrap 64-bit arithmetic: before, a trailer
// size that wrapped aborted with std::length_error, and a layer offset near
// 2^64 or a shape product past 2^64 was accepted (the run printed zeros).
TEST_F(ContainerTest, SizesThatWrapAreRefusedBeforeAllocating) {
  const fs::path good = write_sample();
  const fs::path bad = dir_ / "hostile.coli";
  expect_refused(good, bad,
                 [](std::string& b) {  // offset + size + trailer wraps to exactly the file size
                   const std::size_t trailer = b.size() - 32;
                   put_u64(b, trailer + 8, ~std::uint64_t{0} - 99);
                   put_u64(b, trailer, b.size() - 32 + 100);
                 },
                 "passes the 64 MiB bound");
  expect_refused(good, bad,
                 [](std::string& b) {
                   const std::size_t trailer = b.size() - 32;
                   put_u64(b, trailer, u64_at(b, trailer) + 4096);  // in bounds, but not ending at the trailer
                 },
                 "do not end at the trailer");
  static constexpr std::uint64_t kNear2To64 = ~std::uint64_t{0} - 4095;  // 2^64 - 4096: aligned
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["experts"]["layer_offsets"][1] = kNear2To64; }),
                 "expert layer 1 (offset 18446744073709547520) runs past the data region");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["tensors"][0]["offset"] = ~std::uint64_t{0} - 7; }),
                 "tensor model.norm.weight (offset 18446744073709551608, 16 bytes) lies outside the data region");
  // (2^62 + 1) * 4 wraps to 4: the 16 bytes of four floats.
  expect_refused(good, bad,
                 resealed([](nlohmann::json& j) { j["tensors"][0]["shape"] = {(std::uint64_t{1} << 62) + 1, 4}; }),
                 "a shape product that overflows");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["experts"]["parts"][0]["rows"] = -1; }),
                 "index field experts.parts[0].rows is not a whole number >= 0");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["experts"]["experts"] = 1ull << 33; }),
                 "index field experts.experts is 8589934592, above 4294967295");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["checksums"]["count"] = 6; }),
                 "index field checksums.count is 6, not one per tensor and expert record");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["checksums"]["offset"] = ~std::uint64_t{0} - 15; }),
                 "the checksum table (index field checksums: offset 18446744073709551600, 7 entries) does not end where the index starts");
}

// The files a container carries for running (its tokenizer and configs)
// come back byte for byte; the writer takes only the names coli knows, each
// once, and the reader checks the index's entries as it checks the rest.
TEST_F(ContainerTest, RuntimeFilesComeBackAndTheirIndexEntriesAreChecked) {
  std::string binary;
  for (int b = 0; b < 256; ++b) binary += static_cast<char>(b);
  const fs::path good = write_sample("carried.coli", {{"tokenizer.gguf", binary}, {"generation_config.json", R"({"eos_token_id": 2})"}});
  auto reader = ContainerReader::open(good);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  ASSERT_NE(reader->index().find_runtime_file("tokenizer.gguf"), nullptr);
  EXPECT_EQ(reader->index().find_runtime_file("tokenizer.gguf")->bytes, binary);
  EXPECT_EQ(reader->index().find_runtime_file("generation_config.json")->bytes, R"({"eos_token_id": 2})");
  EXPECT_EQ(reader->index().find_runtime_file("tokenizer.json"), nullptr);
  EXPECT_TRUE(ContainerReader::open(write_sample("plain.coli"))->index().runtime_files.empty());  // optional

  auto writer = ContainerWriter::create(dir_ / "refused.coli");
  ASSERT_TRUE(writer.ok());
  const Status unknown = writer->add_runtime_file("run.sh", "#!/bin/sh");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("'run.sh' is not a runtime file"), std::string::npos) << unknown.error().message;
  ASSERT_TRUE(writer->add_runtime_file("tokenizer.json", "{}"));
  const Status twice = writer->add_runtime_file("tokenizer.json", "{}");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("added twice"), std::string::npos);

  const fs::path bad = dir_ / "hostile.coli";
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["runtime_files"][0]["name"] = "run.sh"; }),
                 "index field runtime_files[0].name 'run.sh' is not a runtime file coli knows");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["runtime_files"][1]["base64"] = "e30*"; }),
                 "index field runtime_files[1].base64 is not base64 of");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["runtime_files"][0]["bytes"] = 255; }),
                 "index field runtime_files[0].base64 is not base64 of 255 bytes");
  expect_refused(good, bad, resealed([](nlohmann::json& j) { j["runtime_files"][1]["name"] = "tokenizer.gguf"; }),
                 "index field runtime_files[1] repeats tokenizer.gguf");
}

// A directory or an endless device is refused at once, never read forever.
TEST_F(ContainerTest, OnlyRegularFilesAreOpened) {
  auto directory = ContainerReader::open(dir_);
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.error().message.find("is a directory"), std::string::npos) << directory.error().message;
  auto endless = ContainerReader::open("/dev/zero");
  ASSERT_FALSE(endless.ok());
  EXPECT_NE(endless.error().message.find("/dev/zero is not a regular file"), std::string::npos) << endless.error().message;
  const fs::path fifo = dir_ / "fifo.coli";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pipe = ContainerReader::open(fifo);  // without a writer, a blocking open would wait forever
  ASSERT_FALSE(pipe.ok());
  EXPECT_NE(pipe.error().message.find("is not a regular file"), std::string::npos) << pipe.error().message;
}

TEST_F(ContainerTest, VerifyNamesTheDamagedRecordsAndTensors) {
  const fs::path good = write_sample();
  auto reader = ContainerReader::open(good);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto summary = reader->verify_checksums();
  ASSERT_TRUE(summary.ok()) << summary.error().message;
  EXPECT_EQ(summary->tensors, 1u);
  EXPECT_EQ(summary->records, 6u);
  EXPECT_EQ(summary->bytes, reader->data_end() - kAlignment);  // every byte of the data region

  std::string bytes = *read_text_file(good);
  const std::uint64_t record = reader->index().experts.record_offset(1, 2);
  bytes[record + 100] ^= 0x40;
  bytes[4096 + 2000] = 1;  // the norm tensor's padding: unused, but covered
  const fs::path bad = dir_ / "bad-records.coli";
  ASSERT_TRUE(write_file_atomically(bad, bytes).ok());
  auto damaged = ContainerReader::open(bad);
  ASSERT_TRUE(damaged.ok()) << "data damage is found by verify, not at open: " << damaged.error().message;
  auto verified = damaged->verify_checksums();
  ASSERT_FALSE(verified.ok());
  const std::string& message = verified.error().message;
  EXPECT_NE(message.find("2 of 7 checksummed extents"), std::string::npos) << message;
  EXPECT_NE(message.find("expert record: layer 1 (model layer 1), expert 2 (bytes " + std::to_string(record)), std::string::npos) << message;
  EXPECT_NE(message.find("tensor model.norm.weight (bytes 4096..8192)"), std::string::npos) << message;
}

// An index whose extents leave bytes unchecked (or check them twice) is refused by verify.
TEST_F(ContainerTest, VerifyRefusesBytesCoveredByNoChecksum) {
  const fs::path good = write_sample();
  const fs::path bad = dir_ / "gap.coli";
  std::string bytes = *read_text_file(good);
  resealed([](nlohmann::json& j) { j["experts"]["layer_offsets"][1] = j["experts"]["layer_offsets"][0]; })(bytes);
  ASSERT_TRUE(write_file_atomically(bad, bytes).ok());
  auto reader = ContainerReader::open(bad);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto verified = reader->verify_checksums();
  ASSERT_FALSE(verified.ok());
  EXPECT_NE(verified.error().message.find("are covered by no checksum or by two"), std::string::npos) << verified.error().message;
}

TEST_F(ContainerTest, MissingFileNamesThePath) {
  auto reader = ContainerReader::open(dir_ / "nope.coli");
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.error().message.find("nope.coli"), std::string::npos);
}

}  // namespace
}  // namespace coli::container
