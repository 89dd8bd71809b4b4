// Session 52 harness: what a routed row of 64-wide experts costs in the engine's batch
// (probe::EngineExpertBatch, CpuBackend::expert_ffn_batch) by the tokens it comes with: 8 experts of
// 64 x 64, the probe's narrow point (64 tokens, top-8: 512 rows) against top-2 and top-1 routing of as
// many rows (256 and 512 tokens) and the demo model's shape (512 tokens top-2: 1024 rows).
// Usage: s52-expert-topk THREADS [KERNEL [EVICT_MIB]]: EVICT_MIB read and written between calls
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "measure/engine_expert_batch.h"

using Clock = std::chrono::steady_clock;

static std::vector<std::pair<int, int>> routing(int tokens, int experts, int top_k) {
  std::mt19937 random(7);
  std::vector<std::vector<int>> chosen(tokens);
  std::vector<int> ids(experts);
  for (auto& c : chosen) {
    for (int e = 0; e < experts; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), random);
    c.assign(ids.begin(), ids.begin() + top_k);
  }
  std::vector<std::pair<int, int>> tasks;
  for (int e = 0; e < experts; ++e)
    for (int t = 0; t < tokens; ++t)
      if (std::find(chosen[t].begin(), chosen[t].end(), e) != chosen[t].end()) tasks.emplace_back(t, e);
  return tasks;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const std::string kernel = argc > 2 ? argv[2] : "";
  std::vector<std::byte> pool(64u << 20);
  std::uint32_t state = 12345;  // as probe::WeightPool fills it: bytes 0x30..0x3f (normal scales)
  for (std::byte& b : pool) state = state * 1664525u + 1013904223u, b = static_cast<std::byte>(0x30 | (state >> 28));
  auto batch = coli::probe::EngineExpertBatch::create(coli::WeightFormat::q4_g64, 64, 64, kernel, threads, pool);
  if (!batch) return std::fprintf(stderr, "%s\n", batch.error().message.c_str()), 1;
  struct Shape { int tokens, top_k; const char* what; };
  const Shape shapes[] = {{64, 8, "probe narrow: 64 tok top-8"}, {128, 4, "128 tok top-4"}, {256, 2, "256 tok top-2"},
                          {512, 1, "512 tok top-1"}, {512, 2, "demo: 512 tok top-2"}, {128, 8, "128 tok top-8"}};
  std::vector<float> xs(512 * 64);
  std::mt19937 random(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : xs) x = u(random);
  std::vector<float> evict(static_cast<std::size_t>(argc > 3 ? std::atoi(argv[3]) : 0) << 18);  // MiB
  volatile float evict_sink = 0;
  if (std::getenv("S52_OTHER_AB")) {  // the demo shape after a call of a wide batch (OLMoE's experts), interleaved
    batch->keep_first(8);
    std::vector<std::byte> wide_pool(256u << 20);
    std::uint32_t st = 777;
    for (std::byte& b : wide_pool) st = st * 1664525u + 1013904223u, b = static_cast<std::byte>(0x30 | (st >> 28));
    auto wide = coli::probe::EngineExpertBatch::create(coli::WeightFormat::q4_g64, 2048, 1024, kernel, threads, wide_pool);
    if (!wide) return std::fprintf(stderr, "%s\n", wide.error().message.c_str()), 1;
    std::vector<float> wide_xs(16 * 2048, 0.5f);
    const auto wide_tasks = routing(16, 8, 8);
    const auto tasks = routing(512, 8, 2);
    std::vector<double> with, without;
    const int mode = std::atoi(std::getenv("S52_OTHER_AB"));  // 1: a wide batch; 2: one token on the same 8 experts; 3: 64 tokens top-8
    const auto single_tasks = routing(1, 8, 8), narrow_tasks = routing(64, 8, 8);
    for (int i = 0; i < 300; ++i) {
      const bool other = i % 2;
      if (other && mode == 1) wide->run(wide_tasks, 8, wide_xs, 16);
      if (other && mode == 2) batch->run(single_tasks, 8, xs, 1);
      if (other && mode == 3) batch->run(narrow_tasks, 8, xs, 64);
      const auto t0 = Clock::now();
      batch->run(tasks, 8, xs, 512);
      (other ? with : without).push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(with.begin(), with.end()), std::sort(without.begin(), without.end());
    std::printf("demo shape: median %.1f us after another call (mode %d), %.1f us back to back\n", with[with.size() / 2], mode, without[without.size() / 2]);
    return 0;
  }
  if (std::getenv("S52_EVICT_AB")) {  // the demo shape, calls with and without an 8 MiB sweep before them, interleaved
    batch->keep_first(8);
    const auto tasks = routing(512, 8, 2);
    std::vector<float> big(static_cast<std::size_t>(argc > 3 && std::atoi(argv[3]) > 0 ? std::atoi(argv[3]) : 8) << 18);
    std::vector<double> with, without;
    for (int i = 0; i < 400; ++i) {
      const bool sweep = i % 2;
      if (sweep) { float acc = 0; for (std::size_t j = 0; j < big.size(); j += 16) acc += big[j]++; evict_sink = acc; }
      const auto t0 = Clock::now();
      batch->run(tasks, 8, xs, 512);
      (sweep ? with : without).push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(with.begin(), with.end()), std::sort(without.begin(), without.end());
    std::printf("demo shape: median %.1f us after a sweep of the MiB given, %.1f us back to back\n", with[with.size() / 2], without[without.size() / 2]);
    return 0;
  }
  for (bool kept : {true, false}) {
    batch->keep_first(kept ? 8 : 0);
    std::printf("threads %d, %s\n", threads, kept ? "the same 8 experts every call (cache-warm)" : "the next 8 slots every call (from RAM)");
    for (const Shape& s : shapes) {
      const auto tasks = routing(s.tokens, 8, s.top_k);
      for (int i = 0; i < 50; ++i) batch->run(tasks, 8, xs, s.tokens);
      std::vector<double> us;
      for (int round = 0; round < 30; ++round) {
        double total = 0;
        for (int i = 0; i < 20; ++i) {
          float acc = 0;  // the rest of a pass between two batches: other buffers through the caches
          for (std::size_t j = 0; j < evict.size(); j += 16) acc += evict[j]++;
          evict_sink = acc;
          const auto t0 = Clock::now();
          batch->run(tasks, 8, xs, s.tokens);
          total += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        }
        us.push_back(total / 20);
      }
      std::sort(us.begin(), us.end());
      const double m = us[us.size() / 2];
      std::printf("  %-26s rows %4zu  call %8.2f us  per row %6.3f us  per token %6.3f us\n", s.what, tasks.size(), m,
                  m / tasks.size(), m / s.tokens);
    }
  }
}
