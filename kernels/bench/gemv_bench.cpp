// CPU GEMV throughput on OLMoE-1B-7B expert shapes (hidden 2048, expert
// width 1024: gate/up 1024x2048, down 2048x1024). Enough experts (at least
// 64, and 4x the largest cache level: server L3s hold 260-300 MB) are used in
// turn that weights stream from DRAM as in decode. Bytes/s counts what a call
// must read (weights + scales + x: gemv_bytes), comparable with the probe's
// read bandwidth. Variants: every one this CPU supports; threads: 1 and all.
//
//   coli_gemv_bench [--benchmark_filter=decode_layer] ...   (Google Benchmark flags)
//   coli_gemv_bench --benchmark_filter=expert_steps          (three regions vs one team)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/gemv_cpu.h"
#include "cpu/parallel_for.h"

namespace coli::kernels::cpu {
namespace {

constexpr int kHidden = 2048, kExpertWidth = 1024;

// Experts in the rotation: >= 64 and >= 4x the largest cache level (all its
// instances), but at most 1/8 of physical memory.
int expert_count(std::size_t bytes_per_expert) {
  std::size_t largest_cache = 0;
  const auto& cpu = benchmark::CPUInfo::Get();
  for (const auto& cache : cpu.caches)
    largest_cache = std::max(largest_cache, static_cast<std::size_t>(cache.size) *
                                                static_cast<std::size_t>(cpu.num_cpus / std::max(cache.num_sharing, 1)));
  const std::size_t memory = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t wanted = std::max<std::size_t>(64, 4 * largest_cache / bytes_per_expert + 1);
  return static_cast<int>(std::max<std::size_t>(8, std::min(wanted, memory / 8 / bytes_per_expert)));
}

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
    const int experts = expert_count(3 * static_cast<std::size_t>(kExpertWidth) * kHidden * 17 / 32);
    for (int i = 0; i < experts * 3; ++i) {
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
    const int experts = expert_count(3 * static_cast<std::size_t>(kExpertWidth) * kHidden);
    for (int i = 0; i < experts * 3; ++i) {
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

// One MoE layer's experts in decode, as the engine runs them: gate and up of
// 8 experts in one call (one fork/join), then their 8 downs; activations are
// quantised once per phase. The 8 experts rotate through all 64.
template <class Matrix, class Job>
void decode_layer(benchmark::State& state, const std::vector<Matrix>& matrices, GemvOptions options) {
  constexpr int kActive = 8;
  const WeightFormat format = std::is_same_v<Matrix, Q4G64Matrix> ? WeightFormat::q4_g64 : WeightFormat::q8_row;
  const std::vector<float> x = activations(1);
  std::vector<float> y(static_cast<std::size_t>(kActive) * 2 * kExpertWidth + kActive * kHidden);
  QuantizedActivations hidden, inner;
  std::size_t first = 0, bytes = 0;
  std::vector<Job> gate_up, down;
  for (auto _ : state) {
    gate_up.clear(), down.clear();
    float* out = y.data();
    hidden.quantize(options.variant, format, std::span(x).first(kHidden), 1, kHidden);
    for (int e = 0; e < kActive; ++e)
      for (int m = 0; m < 2; ++m, out += kExpertWidth) {
        const Matrix& w = matrices[(first + e) * 3 + m];
        gate_up.push_back({view_of(w), &hidden, std::span(out, kExpertWidth)});
        bytes += gemv_bytes(w);
      }
    gemv_quantized_many(std::span<const Job>(gate_up), options.threads);
    inner.quantize(options.variant, format, std::span<const float>(y).first(kExpertWidth), 1, kExpertWidth);
    for (int e = 0; e < kActive; ++e, out += kHidden) {
      const Matrix& w = matrices[(first + e) * 3 + 2];
      down.push_back({view_of(w), &inner, std::span(out, kHidden)});
      bytes += gemv_bytes(w);
    }
    gemv_quantized_many(std::span<const Job>(down), options.threads);
    benchmark::DoNotOptimize(y.data());
    first = (first + kActive) % (matrices.size() / 3 / kActive * kActive);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

// The fixed cost of one decode token's 8 experts as the engine runs them,
// on small in-cache experts (gate/up 128x256, down 256x128) so the steps'
// synchronisation is what is timed: gate/up, SwiGLU and its quantisation per
// expert, down, either as three parallel regions (`team` false, the engine
// before issue 13's cpu-decode work) or as one team meeting at two barriers
// (team_steps, CpuBackend::ffn_quantized now).
void expert_steps(benchmark::State& state, GemvOptions options, bool team) {
  constexpr int kActive = 8, kIn = 256, kWidth = 128;
  static const std::vector<Q4G64Matrix> gate_up = [] {
    std::vector<Q4G64Matrix> m;
    for (int i = 0; i < 2 * kActive; ++i) m.push_back(quantize_q4_g64(activations(kWidth * kIn / kHidden), kWidth, kIn));
    return m;
  }();
  static const std::vector<Q4G64Matrix> down = [] {
    std::vector<Q4G64Matrix> m;
    for (int i = 0; i < kActive; ++i) m.push_back(quantize_q4_g64(activations(kIn * kWidth / kHidden), kIn, kWidth));
    return m;
  }();
  const std::vector<float> one_token = activations(1), x(one_token.begin(), one_token.begin() + kIn);
  std::vector<float> gate_out(2 * kActive * kWidth), y(kActive * kIn);
  QuantizedActivations in;
  std::vector<QuantizedActivations> hidden(kActive);
  auto swiglu = [&](std::size_t e) {
    float* g = gate_out.data() + 2 * e * kWidth;
    for (int j = 0; j < kWidth; ++j) g[j] = g[j] / (1.0f + std::exp(-g[j])) * g[kWidth + j];
    hidden[e].fill(std::span<const float>(g, kWidth));
  };
  for (auto _ : state) {
    in.quantize(options.variant, WeightFormat::q4_g64, x, 1, kIn);
    std::vector<Q4GemvJob> first, second;
    for (int e = 0; e < kActive; ++e) {
      hidden[e].shape(options.variant, WeightFormat::q4_g64, 1, kWidth);
      for (int m = 0; m < 2; ++m)
        first.push_back({view_of(gate_up[2 * e + m]), &in, std::span(gate_out).subspan((2 * e + m) * kWidth, kWidth)});
      second.push_back({view_of(down[e]), &hidden[e], std::span(y).subspan(e * kIn, kIn)});
    }
    if (team) {
      GemvTeamWork gate_up_work(std::move(first)), down_work(std::move(second));
      const std::function<void()> steps[] = {[&] { gate_up_work.share(); },
                                             [&] { for_each_in_team(kActive, swiglu, StepCost::unequal_steps); },
                                             [&] { down_work.share(); }};
      team_steps(options.threads, steps);
    } else {
      gemv_quantized_many(std::span<const Q4GemvJob>(first), options.threads);
      parallel_for(kActive, options.threads, true, swiglu, StepCost::unequal_steps);
      gemv_quantized_many(std::span<const Q4GemvJob>(second), options.threads);
    }
    benchmark::DoNotOptimize(y.data());
  }
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

// Every supported variant for decode; the selected one for the rest.
void register_benchmarks(CpuKernelVariant selected) {
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
      benchmark::RegisterBenchmark(("decode_layer/q4_g64" + suffix).c_str(), [=](benchmark::State& s) {
        decode_layer<Q4G64Matrix, Q4GemvJob>(s, q4_experts(), options);
      })->UseRealTime();
      benchmark::RegisterBenchmark(("decode_layer/q8_row" + suffix).c_str(), [=](benchmark::State& s) {
        decode_layer<Q8RowMatrix, Q8GemvJob>(s, q8_experts(), options);
      })->UseRealTime();
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
  // Fixed cost of a call (activation quantisation, OpenMP fork/join): a
  // 64-row matrix, small enough that the weights do not matter.
  for (int threads : thread_counts) {
    const GemvOptions options{selected, threads};
    const std::string suffix = "/" + std::string(variant_name(options.variant)) + "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(("call_overhead/q4_g64_64x2048" + suffix).c_str(), [=](benchmark::State& s) {
      static const std::vector<Q4G64Matrix> small{quantize_q4_g64(std::vector<float>(64 * kHidden, 1.0f), 64, kHidden)};
      decode(s, small, options);
    })->UseRealTime();
  }
  // One decode token's experts: three regions against one team.
  for (int threads : thread_counts) {
    const GemvOptions options{selected, threads};
    const std::string suffix = "/" + std::string(variant_name(options.variant)) + "/threads:" + std::to_string(threads);
    for (const bool team : {false, true}) {
      benchmark::RegisterBenchmark(("expert_steps/" + std::string(team ? "team" : "regions") + suffix).c_str(),
                                   [=](benchmark::State& s) { expert_steps(s, options, team); })->UseRealTime();
    }
  }
  // Prefill: 8 tokens (a lightly used expert), 64 (an average expert of a
  // 512-token OLMoE prefill: 512 * 8 / 64) and 512 (a dense projection).
  for (int threads : thread_counts) {
    const GemvOptions options{selected, threads};
    const std::string suffix = "/" + std::string(variant_name(options.variant)) + "/threads:" + std::to_string(threads);
    for (int count : {8, 64, 512}) {
      const std::string tokens = "/tokens:" + std::to_string(count);
      benchmark::RegisterBenchmark(("prefill/q4_g64" + suffix + tokens).c_str(),
                                   [=](benchmark::State& s) { prefill(s, q4_experts(), options, count); })->UseRealTime();
      benchmark::RegisterBenchmark(("prefill/q8_row" + suffix + tokens).c_str(),
                                   [=](benchmark::State& s) { prefill(s, q8_experts(), options, count); })->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace coli::kernels::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The variant the engine would use here (COLI_CPU_KERNEL or the best).
  const auto selected = coli::kernels::cpu::selected_variant();
  if (!selected) {
    std::fprintf(stderr, "coli_gemv_bench: %s\n", selected.error().message.c_str());
    return 1;
  }
  benchmark::AddCustomContext("coli_cpu_kernel", std::string(coli::kernels::cpu::variant_name(*selected)));
  coli::kernels::cpu::register_benchmarks(*selected);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
