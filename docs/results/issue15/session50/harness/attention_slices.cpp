// A 512-token prompt's attention (OLMoE's 16 heads of 128, f16 KV) timed three ways, per layer:
//   probe:  one call of 512 tokens on one warm layer, repeated (the tuning phase's attention_prefill);
//   slices: the same layer as the engine cuts it, 4 calls of kPassSlice tokens, warm, repeated;
//   engine: LAYERS layers one after another; per slice the team first writes q (one token a thread at a
//           time, as rotate_and_norm) and stores K and V (as store_kv), then the call: only the calls timed.
// Args: THREADS [REPS] [LAYERS] [HEADS HEAD_DIM]. Prints each way's median ms per layer and the spread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <omp.h>
#include "coli/base/pass_shape.h"
#include "coli/forward/attention.h"
#include "coli/forward/kv_cache.h"
using namespace coli;
using Clock = std::chrono::steady_clock;
constexpr int kTokens = 512;
static int kHeads = 16, kHeadDim = 128, kWidth = kHeads * kHeadDim;
static double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
static void summary(const char* name, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::printf("%-8s median %.3f ms/layer  min %.3f  max %.3f  (n=%zu)\n", name, v[v.size() / 2], v.front(), v.back(), v.size());
}
int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2, reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int layers = argc > 3 ? std::atoi(argv[3]) : 16;
  if (argc > 5) kHeads = std::atoi(argv[4]), kHeadDim = std::atoi(argv[5]), kWidth = kHeads * kHeadDim;
  std::mt19937 random(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> q(static_cast<std::size_t>(kTokens) * kWidth), out(q.size()), kv(q.size());
  for (float& x : q) x = uniform(random);
  for (float& x : kv) x = uniform(random);
  forward::KvCache cache(layers, kHeads, kHeadDim, kTokens, KvType::f16);
  auto store = [&](int layer, int first, int count) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = first; t < first + count; ++t) {
      std::span<const float> row(kv.data() + static_cast<std::size_t>(t) * kWidth, kWidth);
      cache.store(layer, t, row, row);
    }
  };
  auto write_q = [&](int first, int count, float bump) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = first; t < first + count; ++t)
      for (int i = 0; i < kWidth; ++i) q[static_cast<std::size_t>(t) * kWidth + i] += bump;
  };
  for (int l = 0; l < layers; ++l) store(l, 0, kTokens);
  std::vector<double> probe, slices, engine;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    forward::attention(cache, 0, q, kTokens, 0, kHeads, out, threads);
    probe.push_back(ms_since(t0));
    t0 = Clock::now();
    for (int first = 0; first < kTokens; first += kPassSlice)
      forward::attention(cache, 0, std::span<const float>(q).subspan(static_cast<std::size_t>(first) * kWidth, static_cast<std::size_t>(kPassSlice) * kWidth),
                         kPassSlice, first, kHeads, std::span(out).subspan(static_cast<std::size_t>(first) * kWidth, static_cast<std::size_t>(kPassSlice) * kWidth), threads);
    slices.push_back(ms_since(t0));
  }
  for (int r = 0; r < std::max(1, reps / 4); ++r) {
    for (int l = 0; l < layers; ++l) {
      double spent = 0;
      for (int first = 0; first < kTokens; first += kPassSlice) {
        write_q(first, kPassSlice, 1e-3f);
        store(l, first, kPassSlice);
        const auto t0 = Clock::now();
        forward::attention(cache, l, std::span<const float>(q).subspan(static_cast<std::size_t>(first) * kWidth, static_cast<std::size_t>(kPassSlice) * kWidth),
                           kPassSlice, first, kHeads, std::span(out).subspan(static_cast<std::size_t>(first) * kWidth, static_cast<std::size_t>(kPassSlice) * kWidth), threads);
        spent += ms_since(t0);
      }
      engine.push_back(spent);
    }
  }
  std::printf("threads %d, %d tokens, %d heads of %d, f16 KV, %s\n", threads, kTokens, kHeads, kHeadDim,
              forward::attention_isa_name(forward::AttentionIsa::best));
  summary("probe", probe);
  summary("slices", slices);
  summary("engine", engine);
}
