// The expert-read I/O pool: every submitted job completes (also when the pool
// is destroyed with a full queue), errors come back through the futures, and
// a container that loses its expert records after loading makes forward()
// (or the preload) return an error naming the file and offset: not a hang,
// not a crash.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <vector>

#include "coli/backend/backend.h"
#include "coli/container/container.h"
#include "coli/convert/convert.h"
#include "coli/runtime/moe_model.h"
#include "expert_store.h"
#include "io_pool.h"

namespace coli::runtime {
namespace {

namespace fs = std::filesystem;

TEST(IoPool, RunsEveryJobAndReturnsItsStatus) {
  for (int threads : {0, 1, 4}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    IoPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    std::atomic<int> ran{0};
    std::vector<std::future<Status>> done;
    for (int i = 0; i < 64; ++i) {
      done.push_back(pool.submit([&ran, i]() -> Status {
        ++ran;
        if (i % 7 == 3) return make_error("job " + std::to_string(i) + " failed");
        return Ok{};
      }));
    }
    for (int i = 0; i < 64; ++i) {
      Status s = done[static_cast<std::size_t>(i)].get();
      EXPECT_EQ(s.ok(), i % 7 != 3) << i;
      if (!s) {
        EXPECT_EQ(s.error().message, "job " + std::to_string(i) + " failed");
      }
    }
    EXPECT_EQ(ran.load(), 64);
  }
}

TEST(IoPool, NoThreadsRunsOnTheCallersThread) {
  IoPool pool(0);
  std::thread::id ran_on;
  auto done = pool.submit([&]() -> Status {
    ran_on = std::this_thread::get_id();
    return Ok{};
  });
  EXPECT_EQ(done.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(IoPool, DestructionRunsQueuedJobsSoNoFutureIsLeftWaiting) {
  std::atomic<int> ran{0};
  std::vector<std::future<Status>> done;
  {
    IoPool pool(2);
    for (int i = 0; i < 40; ++i) {
      done.push_back(pool.submit([&ran]() -> Status {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++ran;
        return Ok{};
      }));
    }
  }  // most jobs are still queued here
  EXPECT_EQ(ran.load(), 40);
  for (auto& d : done) {
    ASSERT_EQ(d.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    EXPECT_TRUE(d.get().ok());
  }
}

class TempFile {
 public:
  explicit TempFile(std::size_t bytes)
      : path_(fs::temp_directory_path() / ("coli_io_pool_" + std::to_string(::getpid()) + ".bin")) {
    std::vector<char> data(bytes);
    for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 31 + 7);
    FILE* f = std::fopen(path_.c_str(), "wb");
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
  }
  ~TempFile() { fs::remove(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(PreadFull, ReadsAndAcceptsEndOfFileOnlyPastMinBytes) {
  TempFile file(5000);
  UniqueFd fd(::open(file.path().c_str(), O_RDONLY));
  ASSERT_GE(fd.get(), 0);
  std::vector<std::byte> buffer(8192);
  ASSERT_TRUE(pread_full(fd.get(), 0, buffer, 5000, file.path().string()).ok());
  EXPECT_EQ(buffer[4999], static_cast<std::byte>(static_cast<char>(4999 * 31 + 7)));
  const Status short_read = pread_full(fd.get(), 4096, buffer, 4096, file.path().string());
  ASSERT_FALSE(short_read.ok());
  EXPECT_NE(short_read.error().message.find("offset 4096 of " + file.path().string()), std::string::npos)
      << short_read.error().message;
  EXPECT_NE(short_read.error().message.find("unexpected end of file"), std::string::npos);
}

TEST(PreadFull, ClosedDescriptorIsAnError) {
  TempFile file(4096);
  int raw = ::open(file.path().c_str(), O_RDONLY);
  ASSERT_GE(raw, 0);
  ::close(raw);
  std::vector<std::byte> buffer(4096);
  const Status s = pread_full(raw, 0, buffer, 4096, "closed.coli");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("offset 0 of closed.coli"), std::string::npos) << s.error().message;
}

// Expert records cut off after the model loaded: every setting returns the
// read error from forward() (and again on the next call), then shuts down.
TEST(ExpertReads, TruncatedContainerIsAnErrorNotAHang) {
  const fs::path source = fs::path(COLI_FIXTURES_DIR) / "models" / "qwen3_moe";
  const fs::path pristine = fs::temp_directory_path() / ("coli_io_pool_" + std::to_string(::getpid()) + ".coli");
  auto report = convert::convert_model(source, pristine, WeightFormat::f32);
  ASSERT_TRUE(report.ok()) << report.error().message;
  std::uint64_t experts_start = 0, stride = 0;
  {
    auto reader = container::ContainerReader::open(pristine);
    ASSERT_TRUE(reader.ok());
    experts_start = reader->index().experts.layer_offsets[0];
    stride = reader->index().experts.record_stride;
  }
  const fs::path cut = pristine.string() + ".cut";
  const std::vector<std::int32_t> prompt = {1, 5, 9, 13, 17, 21, 25, 29};
  // All records gone, or the first three of layer 0 still readable (a round
  // where some reads land and others fail).
  for (std::uint64_t keep : {std::uint64_t{0}, 3 * stride}) {
    for (int threads : {0, 1, 4}) {
      for (bool direct : {true, false}) {
        SCOPED_TRACE("keep " + std::to_string(keep) + " threads " + std::to_string(threads) + (direct ? " O_DIRECT" : ""));
        fs::copy_file(pristine, cut, fs::copy_options::overwrite_existing);
        ModelOptions options;
        options.cache_capacity = 2;
        options.io_threads = threads;
        options.direct_io = direct;
        auto model = MoeModel::load(cut, options);
        ASSERT_TRUE(model.ok()) << model.error().message;
        fs::resize_file(cut, experts_start + keep);
        std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
        for (int attempt = 0; attempt < 2; ++attempt) {
          const Status s = model->forward(prompt, 0, logits);
          ASSERT_FALSE(s.ok());
          EXPECT_NE(s.error().message.find(cut.string()), std::string::npos) << s.error().message;
          EXPECT_NE(s.error().message.find("bytes at offset "), std::string::npos) << s.error().message;
        }
      }
    }
  }
  fs::remove(cut);
  fs::remove(pristine);
}

// The preload reads every layer's records at once: records cut off after
// the reader opened the container make it return the first failed read in
// layer-then-expert order (expert, layer, file, offset), whatever the I/O
// threads' timing, and leave every round closed (a second preload reports
// the same read, not "a round is open").
TEST(ExpertReads, PreloadOfATruncatedContainerNamesTheFirstFailedRead) {
  const fs::path source = fs::path(COLI_FIXTURES_DIR) / "models" / "qwen3_moe";
  const fs::path pristine = fs::temp_directory_path() / ("coli_preload_" + std::to_string(::getpid()) + ".coli");
  auto report = convert::convert_model(source, pristine, WeightFormat::f32);
  ASSERT_TRUE(report.ok()) << report.error().message;
  container::ExpertLayout layout;
  {
    auto reader = container::ContainerReader::open(pristine);
    ASSERT_TRUE(reader.ok());
    layout = reader->index().experts;
  }
  ASSERT_GE(layout.layers, 2u);
  ASSERT_GE(layout.experts, 4u);
  auto backend = backend::create_backend({.kind = backend::BackendKind::cpu, .name = "cpu", .threads = 1});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  const fs::path cut = pristine.string() + ".cut";
  struct Cut {
    std::uint32_t layer, expert;  // the first record lost
  };
  for (const Cut lost : {Cut{0, 3}, Cut{layout.layers - 1, 1}}) {
    const std::uint64_t offset = layout.record_offset(lost.layer, lost.expert);
    for (int threads : {0, 1, 4}) {
      SCOPED_TRACE("layer " + std::to_string(lost.layer) + " threads " + std::to_string(threads));
      fs::copy_file(pristine, cut, fs::copy_options::overwrite_existing);
      auto reader = container::ContainerReader::open(cut);
      ASSERT_TRUE(reader.ok()) << reader.error().message;
      auto store = ExpertStore::create(*reader, **backend, 2, 0, {}, ExpertIo{threads, true});
      ASSERT_TRUE(store.ok()) << store.error().message;
      fs::resize_file(cut, offset);
      const std::string expected = "reading every expert at load: expert " + std::to_string(lost.expert) +
                                   " of MoE layer " + std::to_string(lost.layer) + ": ";
      for (int attempt = 0; attempt < 2; ++attempt) {
        const Status s = store->load_every_expert();
        ASSERT_FALSE(s.ok());
        EXPECT_EQ(s.error().message.rfind(expected, 0), 0u) << s.error().message;
        EXPECT_NE(s.error().message.find("offset " + std::to_string(offset) + " of " + cut.string()), std::string::npos)
            << s.error().message;
      }
    }
  }
  fs::remove(cut);
  fs::remove(pristine);
}

// Where experts stream, the load reads a chosen set (a usage history's most
// used): those experts are then resident, the reads are neither hits nor
// misses, and a set the cache cannot hold or an id the layer lacks is
// refused before anything is read.
TEST(ExpertReads, PreloadOfAChosenSetLeavesThoseExpertsResident) {
  const fs::path source = fs::path(COLI_FIXTURES_DIR) / "models" / "qwen3_moe";
  const fs::path file = fs::temp_directory_path() / ("coli_preload_set_" + std::to_string(::getpid()) + ".coli");
  auto report = convert::convert_model(source, file, WeightFormat::f32);
  ASSERT_TRUE(report.ok()) << report.error().message;
  auto reader = container::ContainerReader::open(file);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  const container::ExpertLayout layout = reader->index().experts;
  ASSERT_GE(layout.layers, 2u);
  ASSERT_GE(layout.experts, 4u);
  auto backend = backend::create_backend({.kind = backend::BackendKind::cpu, .name = "cpu", .threads = 1});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto store = ExpertStore::create(*reader, **backend, /*top_k=*/2, /*capacity=*/2, {}, ExpertIo{2, true});
  ASSERT_TRUE(store.ok()) << store.error().message;
  ASSERT_TRUE(store->experts_stream());

  const int too_many = static_cast<int>(layout.experts) - 1;
  Status refused = store->load_experts({{0, 1, 2}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "MoE layer 0: 3 experts to read into a cache of 2 slots");
  refused = store->load_experts({{0, 1}, {1, static_cast<int>(layout.experts)}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "MoE layer 1: expert " + std::to_string(layout.experts) + " is not one of its " +
                                         std::to_string(layout.experts));
  EXPECT_EQ(store->bytes_read(), 0u);

  const std::vector<std::vector<int>> chosen = {{too_many, 1}, {2}};
  ASSERT_TRUE(store->load_experts(chosen).ok());
  EXPECT_EQ(store->hits(), 0u);
  EXPECT_EQ(store->misses(), 0u);
  EXPECT_GT(store->bytes_read(), 0u);
  // Layer 0's round of the two preloaded experts reads nothing more; layer 1
  // had one preloaded, so a round of it and another reads one record.
  const std::uint64_t read_at_load = store->bytes_read();
  for (int layer : {0, 1}) {
    const std::vector<int> round = layer == 0 ? chosen[0] : std::vector<int>{2, 3};
    ASSERT_TRUE(store->begin(layer, round).ok());
    for (int e : round) ASSERT_TRUE(store->wait(layer, e).ok());
    store->end(layer);
  }
  EXPECT_EQ(store->hits(), 3u);
  EXPECT_EQ(store->misses(), 1u);
  EXPECT_EQ(store->bytes_read(), read_at_load + read_at_load / 3);
  fs::remove(file);
}

}  // namespace
}  // namespace coli::runtime
