// What `coli convert` must never let through: damage to a converted container
// that nothing notices, and NaN/Inf weights turned silently into a container.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "coli/container/container.h"
#include "coli/convert/convert.h"
#include "coli/model/model_desc.h"
#include "test_support.h"

namespace coli {
namespace {

namespace fs = std::filesystem;

class ConvertTrustTest : public testing::Test {
 protected:

  static fs::path fixture() { return fs::path(COLI_FIXTURES_DIR) / "models" / "olmoe"; }

  // A copy of the olmoe fixture with `value` written over element `element` of tensor `name`.
  fs::path checkpoint_with(const std::string& name, std::uint64_t element, float value) {
    const fs::path copy = dir_ / "checkpoint";
    fs::copy(fixture(), copy, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    auto desc = model::describe_model(copy);
    EXPECT_TRUE(desc.ok()) << desc.error().message;
    for (const model::DescribedTensor& t : desc->tensors) {
      if (t.name != name) continue;
      EXPECT_EQ(t.dtype, model::DType::F32);
      const int fd = ::open(t.file.c_str(), O_WRONLY);
      EXPECT_EQ(::pwrite(fd, &value, 4, static_cast<off_t>(t.offset + element * 4)), 4);
      ::close(fd);
      return copy;
    }
    ADD_FAILURE() << "no tensor " << name << " in the fixture";
    return copy;
  }

  testing_support::TempDir temp_{"coli_convert_trust"};
  const fs::path& dir_ = temp_.path();
};

// 300 single-byte changes at deterministic random positions of a converted
// container: each is refused at open (header, trailer, index checksum, bounds)
// or reported by verify_checksums (`coli run --verify`). Before format 2, 29
// of 300 ran cleanly.
TEST_F(ConvertTrustTest, EveryByteChangeIsRefusedAtOpenOrReportedByVerify) {
  const fs::path container = dir_ / "olmoe.coli";
  auto report = convert::convert_model(fixture(), container, WeightFormat::q4_g64);
  ASSERT_TRUE(report.ok()) << report.error().message;
  const std::uint64_t size = fs::file_size(container);
  const int fd = ::open(container.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::mt19937_64 random(12);
  int refused_at_open = 0, reported_by_verify = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto at = static_cast<off_t>(random() % size);
    unsigned char original = 0;
    ASSERT_EQ(::pread(fd, &original, 1, at), 1);
    const auto damaged = static_cast<unsigned char>(original ^ (1 + random() % 255));  // always a different byte
    ASSERT_EQ(::pwrite(fd, &damaged, 1, at), 1);
    auto reader = container::ContainerReader::open(container);
    if (!reader) {
      ++refused_at_open;
    } else if (!reader->verify_checksums()) {
      ++reported_by_verify;
    } else {
      ADD_FAILURE() << "byte " << at << " changed from " << int{original} << " to " << int{damaged} << " went unnoticed";
    }
    ASSERT_EQ(::pwrite(fd, &original, 1, at), 1);
  }
  ::close(fd);
  EXPECT_EQ(refused_at_open + reported_by_verify, 300);
  EXPECT_GT(reported_by_verify, 0);  // most of the file is weights
  std::printf("%llu-byte container: %d refused at open, %d reported by verify\n", static_cast<unsigned long long>(size),
              refused_at_open, reported_by_verify);
  auto pristine = container::ContainerReader::open(container);  // every byte restored: clean again
  ASSERT_TRUE(pristine.ok()) << pristine.error().message;
  EXPECT_TRUE(pristine->verify_checksums().ok());
}

// Before, NaN and Inf weights were converted silently.
TEST_F(ConvertTrustTest, NaNInADenseTensorIsRefusedWithItsPlace) {
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  const fs::path checkpoint = checkpoint_with(name, 5 * 64 + 3, std::numeric_limits<float>::quiet_NaN());
  const fs::path out = dir_ / "nan.coli";
  auto report = convert::convert_model(checkpoint, out, WeightFormat::q4_g64);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message.find("tensor " + name + " in " + (checkpoint / "model.safetensors").string() +
                                        " holds NaN at element 323 (row 5, column 3)"),
            std::string::npos)
      << report.error().message;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // no temporary left
}

TEST_F(ConvertTrustTest, InfinityInAnExpertIsRefusedWithItsPlace) {
  const std::string name = "model.layers.1.mlp.experts.6.down_proj.weight";
  for (const WeightFormat format : {WeightFormat::q4_g64, WeightFormat::q8_row, WeightFormat::f32}) {
    const fs::path checkpoint = checkpoint_with(name, 64 * 64 - 1, -std::numeric_limits<float>::infinity());
    auto report = convert::convert_model(checkpoint, dir_ / "inf.coli", format);
    ASSERT_FALSE(report.ok()) << name_of(format);
    EXPECT_NE(report.error().message.find("tensor " + name), std::string::npos) << report.error().message;
    EXPECT_NE(report.error().message.find("holds an infinity at element 4095 (row 63, column 63)"), std::string::npos)
        << report.error().message;
  }
}

}  // namespace
}  // namespace coli
