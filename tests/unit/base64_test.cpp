#include "coli/base/base64.h"

#include <gtest/gtest.h>

namespace coli {
namespace {

TEST(Base64, EncodesRfc4648Vectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
}

TEST(Base64, RoundTripsEveryByte) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  for (std::size_t cut = 0; cut < 4; ++cut) {
    const std::string part = bytes.substr(cut);
    EXPECT_EQ(base64_decode(base64_encode(part)), part);
  }
}

TEST(Base64, RefusesMalformedText) {
  EXPECT_FALSE(base64_decode("Zg="));       // not a multiple of 4
  EXPECT_FALSE(base64_decode("Zm9v!A=="));  // outside the alphabet
  EXPECT_FALSE(base64_decode("Zg==Zm9v"));  // padding in the middle
  EXPECT_FALSE(base64_decode("Z==="));      // three padding characters
  EXPECT_FALSE(base64_decode("Zm=v"));      // padding before data
  EXPECT_EQ(base64_decode("Zm9vYg=="), "foob");
}

}  // namespace
}  // namespace coli
