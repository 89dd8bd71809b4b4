#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "coli/base/stream_prefetch.h"
#include "coli/base/weight_memory.h"

namespace coli {
namespace {

constexpr std::uintptr_t kTwoMiB = std::uintptr_t{2} << 20;

TEST(WeightMemory, StartsOnA2MiBBoundaryZeroedAndWritable) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, std::size_t{3} << 20, (std::size_t{5} << 20) + 123}) {
    auto memory = WeightMemory::allocate(bytes, "test weights");
    ASSERT_TRUE(memory) << memory.error().message;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(memory->data()) % kTwoMiB, 0u) << bytes;
    EXPECT_EQ(memory->size(), bytes);
    EXPECT_EQ(memory->data()[0], std::byte{0});
    EXPECT_EQ(memory->data()[bytes - 1], std::byte{0});
    memory->data()[bytes - 1] = std::byte{7};
    EXPECT_EQ(memory->data()[bytes - 1], std::byte{7});
  }
}

TEST(WeightMemory, ZeroBytesIsEmptyAndMovesHandOverTheMapping) {
  auto empty = WeightMemory::allocate(0, "nothing");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->data(), nullptr);
  auto memory = WeightMemory::allocate(1 << 20, "test weights");
  ASSERT_TRUE(memory);
  std::byte* data = memory->data();
  WeightMemory moved = std::move(*memory);
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(memory->data(), nullptr);
  EXPECT_EQ(memory->size(), 0u);
}

TEST(WeightMemory, AbsurdSizesAreAnErrorNamingWhatWasAsked) {
  auto memory = WeightMemory::allocate(SIZE_MAX - 5, "the model's dense weights");
  ASSERT_FALSE(memory);
  EXPECT_NE(memory.error().message.find("the model's dense weights"), std::string::npos) << memory.error().message;
}

TEST(WeightMemory, TransparentHugePageModeIsOneTheKernelNames) {
  const std::string mode = transparent_huge_page_mode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unknown") << mode;
}

}  // namespace
}  // namespace coli

namespace coli {
namespace {

// COLI_PREFETCH_BYTES: a plain number up to 1 MiB is taken as is (0 turns
// prefetching off); anything else keeps the default, so the kernels still run.
TEST(StreamPrefetch, TakesPlainByteCountsAndOtherwiseKeepsTheDefault) {
  EXPECT_EQ(stream_prefetch_bytes_from(nullptr), kDefaultStreamPrefetchBytes);
  EXPECT_EQ(stream_prefetch_bytes_from(""), kDefaultStreamPrefetchBytes);
  EXPECT_EQ(stream_prefetch_bytes_from("0"), 0u);
  EXPECT_EQ(stream_prefetch_bytes_from("2048"), 2048u);
  EXPECT_EQ(stream_prefetch_bytes_from("1048576"), std::size_t{1} << 20);
  EXPECT_EQ(stream_prefetch_bytes_from("1048577"), kDefaultStreamPrefetchBytes);
  EXPECT_EQ(stream_prefetch_bytes_from("4k"), kDefaultStreamPrefetchBytes);
  EXPECT_EQ(stream_prefetch_bytes_from("-1"), kDefaultStreamPrefetchBytes);
}

}  // namespace
}  // namespace coli
