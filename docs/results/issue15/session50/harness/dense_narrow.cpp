// The demo model's prompt projections (bf16, 64 x 64) through forward::gemv_dense_many, ns a (token, row):
//   probe:  4 products over 64 tokens, weights cycled from a pool far past the caches (dense_bf16_prefill_narrow);
//   warm4:  the same 4 products over 64 tokens, weights warm;
//   engine: q, k, v (3 products) then o (1) over 128 tokens, warm (attention_pass on a kPassSlice slice).
// Args: THREADS [REPS]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "coli/forward/ops.h"
using namespace coli;
using Clock = std::chrono::steady_clock;
int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2, reps = argc > 2 ? std::atoi(argv[2]) : 2000;
  constexpr int kRows = 64, kCols = 64;
  const std::size_t matrix = kRows * kCols, pool_matrices = (512u << 20) / (matrix * 2);
  std::vector<std::uint16_t> pool(pool_matrices * matrix, 0x3f80), warm(4 * matrix, 0x3f80);
  std::vector<float> x(128 * kCols, 0.5f), y(4 * 128 * kRows);
  std::size_t next = 0;
  auto run = [&](int products, int tokens, bool cold) {
    std::vector<forward::DenseProduct> p;
    for (int m = 0; m < products; ++m) {
      const std::uint16_t* w = cold ? pool.data() + (next++ % pool_matrices) * matrix : warm.data() + m * matrix;
      p.push_back({{WeightFormat::bf16, kRows, kCols, w}, std::span<float>(y).subspan(m * tokens * kRows, tokens * kRows), {}});
    }
    forward::gemv_dense_many(p, std::span<const float>(x).first(tokens * kCols), tokens, threads);
  };
  auto time = [&](auto body, double pairs) {
    std::vector<double> ns;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      body();
      ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / pairs);
    }
    std::sort(ns.begin(), ns.end());
    return ns[ns.size() / 2];
  };
  const double probe = time([&] { run(4, 64, true); }, 4.0 * 64 * kRows);
  const double warm4 = time([&] { run(4, 64, false); }, 4.0 * 64 * kRows);
  const double engine = time([&] { run(3, 128, false); run(1, 128, false); }, 4.0 * 128 * kRows);
  std::printf("threads %d: ns a (token, row): probe %.2f, warm 4x64 %.2f, engine q/k/v + o over 128 %.2f\n", threads, probe, warm4, engine);
}
