// A 512-token prompt's attention (f16 KV) per layer at several shapes, one call against the engine's
// kPassSlice slices, beside the planner's units of work (prompt_attention_seconds: per slice the longer
// of its (head, query, key) pairs and its largest (KV head, block) item times the team).
// Prints per shape: one-call and sliced medians, each slice's median, and ns per unit.
// Args: THREADS [REPS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "coli/base/pass_shape.h"
#include "coli/forward/attention.h"
#include "coli/forward/kv_cache.h"
using namespace coli;
using Clock = std::chrono::steady_clock;
constexpr int kTokens = 512;
static double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
// The planner's formula for one slice [first, first+n).
static double units(int heads, int kv_heads, int first, int n, int threads) {
  const double group = std::max(1, heads / kv_heads);
  const int per_block = std::max(1, forward::kAttentionRowsPerBlock / static_cast<int>(group));
  const double lb = std::min(per_block, n);
  const double pairs = heads * (double(n) * first + double(n) * (n + 1) / 2);
  const double largest = group * (lb * (first + n) - lb * (lb - 1) / 2);
  return std::max(pairs, largest * threads);
}
int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2, reps = argc > 2 ? std::atoi(argv[2]) : 100;
  struct Shape { int heads, kv_heads, head_dim; const char* name; };
  const Shape shapes[] = {{4, 4, 16, "demo 4x16"}, {16, 16, 16, "narrow 16x16"}, {16, 16, 128, "olmoe 16x128"}, {32, 4, 128, "qwen3 32/4x128"}};
  std::mt19937 random(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (const Shape& s : shapes) {
    const int width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
    std::vector<float> q(static_cast<std::size_t>(kTokens) * width), out(q.size()), kv(static_cast<std::size_t>(kv_width));
    for (float& x : q) x = uniform(random);
    forward::KvCache cache(1, s.kv_heads, s.head_dim, kTokens, KvType::f16);
    for (int t = 0; t < kTokens; ++t) { for (float& x : kv) x = uniform(random); cache.store(0, t, kv, kv); }
    auto call = [&](int first, int n) {
      forward::attention(cache, 0, std::span<const float>(q).subspan(std::size_t(first) * width, std::size_t(n) * width), n, first,
                         s.heads, std::span(out).subspan(std::size_t(first) * width, std::size_t(n) * width), threads);
    };
    const int slices = kTokens / kPassSlice;
    std::vector<double> one, sliced;
    std::vector<std::vector<double>> each(slices);
    for (int r = 0; r < reps + 5; ++r) {
      auto t0 = Clock::now();
      call(0, kTokens);
      const double a = ms_since(t0);
      double total = 0;
      for (int i = 0; i < slices; ++i) {
        t0 = Clock::now();
        call(i * kPassSlice, kPassSlice);
        const double e = ms_since(t0);
        total += e;
        if (r >= 5) each[i].push_back(e);
      }
      if (r >= 5) one.push_back(a), sliced.push_back(total);
    }
    double sliced_units = 0;
    for (int i = 0; i < slices; ++i) sliced_units += units(s.heads, s.kv_heads, i * kPassSlice, kPassSlice, threads);
    const double one_units = units(s.heads, s.kv_heads, 0, kTokens, threads);
    std::printf("%-15s t%-2d one %.4f ms (%.3f ns/unit)  slices %.4f ms (%.3f ns/unit)  ratio %.2f  units ratio %.2f |", s.name, threads,
                median(one), median(one) * 1e6 / one_units, median(sliced), median(sliced) * 1e6 / sliced_units,
                median(sliced) / median(one), sliced_units / one_units);
    for (int i = 0; i < slices; ++i)
      std::printf(" s%d %.4f (%.3f)", i, median(each[i]), median(each[i]) * 1e6 / units(s.heads, s.kv_heads, i * kPassSlice, kPassSlice, threads));
    std::printf("\n");
  }
}
