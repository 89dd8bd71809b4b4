// Attention on the OLMoE-1B-7B shape (16 heads, 16 KV heads, head_dim 128):
// the engine's attention before issue 13 (attention_by_position: f32
// [position][kv width] cache, double scores, threads over heads) against
// forward::attention over a KvCache in f32 and f16.
//   decode/DEPTH: one token over DEPTH cached positions of one layer;
//   prefill/512: a 512-token prompt's causal attention in one layer (old:
//     token by token, as the engine did; new: one batched call).
// Layers rotate so KV streams from DRAM as in decode (>= 1 GiB of KV in the
// rotation, at most 512 layers: a server Xeon's L3 holds 320 MB, and a
// smaller rotation timed the L3, not the cache's stream). Time is per layer: x16 for a token of
// the whole model. Threads: every hardware thread (--benchmark_filter and
// OMP_NUM_THREADS as usual).
//
//   coli_attention_bench [--benchmark_filter=decode] ...   (Google Benchmark flags)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <random>
#include <vector>

#include "coli/forward/attention.h"
#include "coli/forward/kv_cache.h"
#include "coli/forward/ops.h"

namespace coli::forward {
namespace {

constexpr int kHeads = 16, kKvHeads = 16, kHeadDim = 128, kWidth = kKvHeads * kHeadDim;
constexpr std::uint64_t kRotationBytes = 1ull << 30;

int threads() { return omp_get_max_threads(); }

int layers_for(int positions, KvType type) {
  const std::uint64_t per_layer = kv_cache_bytes(1, kKvHeads, kHeadDim, static_cast<std::uint64_t>(positions), type);
  return static_cast<int>(std::clamp<std::uint64_t>((kRotationBytes + per_layer - 1) / per_layer, 1, 512));
}

std::vector<float> random_values(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

// The old layout: per layer, k and v as [position][kv width] f32.
struct OldCache {
  std::vector<std::vector<float>> k, v;
  OldCache(int layers, int positions) {
    for (int l = 0; l < layers; ++l) {
      k.push_back(random_values(static_cast<std::size_t>(positions) * kWidth, 2 * l));
      v.push_back(random_values(static_cast<std::size_t>(positions) * kWidth, 2 * l + 1));
    }
  }
};

KvCache new_cache(int layers, int positions, KvType type) {
  KvCache cache(layers, kKvHeads, kHeadDim, positions, type);
  const std::vector<float> k = random_values(kWidth, 1), v = random_values(kWidth, 2);
  for (int l = 0; l < layers; ++l) {
    for (int p = 0; p < positions; ++p) cache.store(l, p, k, v);
  }
  return cache;
}

void report(benchmark::State& state, std::uint64_t kv_bytes_per_call) {
  state.counters["threads"] = threads();
  state.counters["KV_bytes/s"] = benchmark::Counter(static_cast<double>(kv_bytes_per_call) * static_cast<double>(state.iterations()),
                                                    benchmark::Counter::kIsRate);
}

void decode_old(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0)), layers = layers_for(depth, KvType::f32);
  const OldCache cache(layers, depth);
  const std::vector<float> q = random_values(kHeads * kHeadDim, 9);
  std::vector<float> out(q.size());
  int layer = 0;
  for (auto _ : state) {
    attention_by_position(q, cache.k[static_cast<std::size_t>(layer)], cache.v[static_cast<std::size_t>(layer)], depth, kHeads,
                          kKvHeads, kHeadDim, out, threads());
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % layers;
  }
  report(state, kv_cache_bytes(1, kKvHeads, kHeadDim, static_cast<std::uint64_t>(depth), KvType::f32));
}

void decode_new(benchmark::State& state, KvType type) {
  const int depth = static_cast<int>(state.range(0)), layers = layers_for(depth, type);
  const KvCache cache = new_cache(layers, depth, type);
  const std::vector<float> q = random_values(kHeads * kHeadDim, 9);
  std::vector<float> out(q.size());
  int layer = 0;
  for (auto _ : state) {
    attention(cache, layer, q, 1, depth - 1, kHeads, out, threads());
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % layers;
  }
  report(state, kv_cache_bytes(1, kKvHeads, kHeadDim, static_cast<std::uint64_t>(depth), type));
}

void prefill_old(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0));
  const OldCache cache(1, tokens);
  const std::vector<float> q = random_values(static_cast<std::size_t>(tokens) * kHeads * kHeadDim, 9);
  std::vector<float> out(q.size());
  const std::size_t stride = static_cast<std::size_t>(kHeads) * kHeadDim;
  for (auto _ : state) {
    for (int t = 0; t < tokens; ++t) {
      attention_by_position(std::span(q).subspan(t * stride, stride), cache.k[0], cache.v[0], t + 1, kHeads, kKvHeads,
                            kHeadDim, std::span(out).subspan(t * stride, stride), threads());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

void prefill_new(benchmark::State& state, KvType type) {
  const int tokens = static_cast<int>(state.range(0));
  const KvCache cache = new_cache(1, tokens, type);
  const std::vector<float> q = random_values(static_cast<std::size_t>(tokens) * kHeads * kHeadDim, 9);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    attention(cache, 0, q, tokens, 0, kHeads, out, threads());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

void depths(benchmark::internal::Benchmark* b) { b->Arg(512)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime(); }

BENCHMARK(decode_old)->Name("decode/old_f32")->Apply(depths);
BENCHMARK_CAPTURE(decode_new, f32, KvType::f32)->Name("decode/new_f32")->Apply(depths);
BENCHMARK_CAPTURE(decode_new, f16, KvType::f16)->Name("decode/new_f16")->Apply(depths);
BENCHMARK(prefill_old)->Name("prefill/old_f32")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(prefill_new, f32, KvType::f32)->Name("prefill/new_f32")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(prefill_new, f16, KvType::f16)->Name("prefill/new_f16")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace coli::forward

BENCHMARK_MAIN();
