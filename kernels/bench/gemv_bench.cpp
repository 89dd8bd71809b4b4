// CPU GEMV throughput on OLMoE-1B-7B expert shapes (hidden 2048, expert
// width 1024: gate/up 1024x2048, down 2048x1024). 64 experts x 3 matrices
// (~200 MB q4_g64, ~400 MB q8_row) are used in turn, one per iteration, so
// weights stream from DRAM as in decode. Bytes/s counts what a call must read
// (weights + scales + x: gemv_bytes), comparable with the probe's read
// bandwidth. Variants: every one this CPU supports; threads: 1 and all.
//
//   coli_gemv_bench [--benchmark_filter=q4] ...   (Google Benchmark flags)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/gemv_cpu.h"

namespace coli::kernels::cpu {
namespace {

constexpr int kHidden = 2048, kExpertWidth = 1024, kExperts = 64;

// Deterministic, fast filler: the values do not matter for speed, only that
// every byte is written (pages really allocated) and scales are sane.
struct XorShift {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  std::uint64_t next() {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  }
};

template <class Element>
void fill_random(std::vector<Element>& values, XorShift& random) {
  for (Element& value : values) value = static_cast<Element>(random.next() >> 40);
}

struct MatrixShape { int rows, cols; };
constexpr MatrixShape kExpertMatrices[3] = {{kExpertWidth, kHidden}, {kExpertWidth, kHidden}, {kHidden, kExpertWidth}};

const std::vector<Q4G64Matrix>& q4_experts() {
  static const std::vector<Q4G64Matrix> matrices = [] {
    std::vector<Q4G64Matrix> result;
    XorShift random;
    for (int i = 0; i < kExperts * 3; ++i) {
      const auto [rows, cols] = kExpertMatrices[i % 3];
      Q4G64Matrix m{rows, cols, std::vector<std::uint8_t>(static_cast<std::size_t>(rows) * cols / 2),
                    std::vector<std::uint16_t>(static_cast<std::size_t>(rows) * cols / kQ4GroupSize)};
      fill_random(m.nibbles, random);
      for (auto& scale : m.scales) scale = static_cast<std::uint16_t>(0x2000 + random.next() % 0x400);  // ~2^-7
      result.push_back(std::move(m));
    }
    return result;
  }();
  return matrices;
}

const std::vector<Q8RowMatrix>& q8_experts() {
  static const std::vector<Q8RowMatrix> matrices = [] {
    std::vector<Q8RowMatrix> result;
    XorShift random;
    for (int i = 0; i < kExperts * 3; ++i) {
      const auto [rows, cols] = kExpertMatrices[i % 3];
      Q8RowMatrix m{rows, cols, std::vector<std::int8_t>(static_cast<std::size_t>(rows) * cols), std::vector<float>(rows)};
      fill_random(m.weights, random);
      for (auto& scale : m.scales) scale = 1e-3f * static_cast<float>(1 + random.next() % 16);
      result.push_back(std::move(m));
    }
    return result;
  }();
  return matrices;
}

std::vector<float> activations(int count) {
  std::vector<float> x(static_cast<std::size_t>(count) * kHidden);
  XorShift random;
  for (float& value : x) value = static_cast<float>(static_cast<std::int64_t>(random.next() >> 44) - (1 << 19)) * 1e-6f;
  return x;
}

// Decode: one token, one matrix per iteration, matrices in turn. With
// `in_cache`, the first gate matrix every time (L2-resident: the compute
// ceiling, for comparison).
template <class Matrix>
void decode(benchmark::State& state, const std::vector<Matrix>& matrices, GemvOptions options, bool in_cache = false) {
  const std::vector<float> x = activations(1);
  std::vector<float> y(kHidden);
  std::size_t index = 0, bytes = 0;
  for (auto _ : state) {
    const Matrix& w = matrices[index];
    if (!in_cache) index = (index + 1) % matrices.size();
    gemv(view_of(w), std::span<const float>(x).first(w.cols), std::span<float>(y).first(w.rows), options);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    bytes += gemv_bytes(w);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

// Prefill: `count` tokens through each matrix; reports tokens/s per matrix
// and weight bytes/s (each weight byte is read once per call).
template <class Matrix>
void prefill(benchmark::State& state, const std::vector<Matrix>& matrices, GemvOptions options, int count) {
  const std::vector<float> x = activations(count);
  std::vector<float> y(static_cast<std::size_t>(count) * kHidden);
  std::size_t index = 0, bytes = 0;
  for (auto _ : state) {
    const Matrix& w = matrices[index];
    index = (index + 1) % matrices.size();
    gemv_batched(view_of(w), std::span<const float>(x).first(static_cast<std::size_t>(count) * w.cols), count,
                 std::span<float>(y).first(static_cast<std::size_t>(count) * w.rows), options);
    benchmark::DoNotOptimize(y.data());
    bytes += gemv_bytes(w);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * count);
}

void register_benchmarks() {
  const int all_threads = omp_get_num_procs();
  std::vector<int> thread_counts{1};
  if (all_threads > 1) thread_counts.push_back(all_threads);
  for (CpuKernelVariant variant : supported_variants()) {
    for (int threads : thread_counts) {
      const GemvOptions options{variant, threads};
      const std::string suffix = "/" + std::string(variant_name(variant)) + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("decode/q4_g64" + suffix).c_str(),
                                   [=](benchmark::State& s) { decode(s, q4_experts(), options); })->UseRealTime();
      benchmark::RegisterBenchmark(("decode/q8_row" + suffix).c_str(),
                                   [=](benchmark::State& s) { decode(s, q8_experts(), options); })->UseRealTime();
    }
  }
  for (CpuKernelVariant variant : supported_variants()) {
    const GemvOptions options{variant, 1};
    const std::string suffix = "/" + std::string(variant_name(variant)) + "/threads:1";
    benchmark::RegisterBenchmark(("in_cache/q4_g64" + suffix).c_str(),
                                 [=](benchmark::State& s) { decode(s, q4_experts(), options, true); })->UseRealTime();
    benchmark::RegisterBenchmark(("in_cache/q8_row" + suffix).c_str(),
                                 [=](benchmark::State& s) { decode(s, q8_experts(), options, true); })->UseRealTime();
  }
  const GemvOptions best{best_supported_variant(), all_threads};
  const std::string suffix = "/" + std::string(variant_name(best.variant)) + "/threads:" + std::to_string(all_threads);
  for (int count : {8, 32}) {
    const std::string tokens = "/tokens:" + std::to_string(count);
    benchmark::RegisterBenchmark(("prefill/q4_g64" + suffix + tokens).c_str(),
                                 [=](benchmark::State& s) { prefill(s, q4_experts(), best, count); })->UseRealTime();
    benchmark::RegisterBenchmark(("prefill/q8_row" + suffix + tokens).c_str(),
                                 [=](benchmark::State& s) { prefill(s, q8_experts(), best, count); })->UseRealTime();
  }
}

}  // namespace
}  // namespace coli::kernels::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  coli::kernels::cpu::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
