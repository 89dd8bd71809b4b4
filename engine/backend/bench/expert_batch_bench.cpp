// The CPU backend's expert batch at a resident prompt's shape: OLMoE's
// experts (hidden 2048, width 1024, q4_g64 or q8_row), 512 tokens routed
// top-8 over 64 experts (4096 rows, 64 an expert, with the engine's
// weighted sums), staged in chunks of kCpuExpertStagingBytes (the engine's) or all
// at once (staging 0), on each thread count. Reports multiply-adds per
// second: compare the two stagings in one run, on one machine.
//
//   coli_expert_batch_bench [--benchmark_filter=q4] ...   (Google Benchmark flags)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "coli/backend/backend.h"
#include "coli/container/container.h"
#include "cpu/cpu_backend.h"

namespace coli::backend {
namespace {

constexpr int kHidden = 2048, kWidth = 1024, kExperts = 64, kTopK = 8, kTokens = 512;

// 64 expert records of random weights whose scales are all small and finite.
struct Experts {
  container::ExpertLayout layout;
  std::unique_ptr<experts::SlotStorage> storage;
};

Experts make_experts(Backend& backend, WeightFormat format) {
  Experts out;
  out.layout = container::single_layer_expert_layout(format, kHidden, kWidth, kExperts);
  auto storage = backend.create_slot_storage(kExperts, out.layout.record_stride, container::kAlignment);
  if (!storage) std::abort();
  out.storage = std::move(*storage);
  std::mt19937 rng(3);
  std::vector<std::byte> bytes(out.layout.record_bytes);
  for (int e = 0; e < kExperts; ++e) {
    for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0x77);  // int8 weights and nibbles of either sign
    for (const container::ExpertPart& part : out.layout.parts) {
      std::byte* scales = bytes.data() + part.scales_offset;
      if (format == WeightFormat::q4_g64) {
        const std::uint16_t half = 0x1C00;  // binary16 2^-8
        for (std::size_t i = 0; i < part.rows * part.cols / 64; ++i) std::memcpy(scales + 2 * i, &half, 2);
      } else {
        const float scale = 1.0f / 256;
        for (std::size_t i = 0; i < part.rows; ++i) std::memcpy(scales + 4 * i, &scale, 4);
      }
    }
    if (!backend.upload(*out.storage, e, bytes)) std::abort();
  }
  return out;
}

// Each token's top-8 of 64 experts (a fixed shuffle), its rows token-major.
struct Routing {
  std::vector<ExpertRow> rows;
  std::vector<WeightedOutput> sums;
};
Routing make_routing() {
  Routing r;
  std::mt19937 rng(7);
  std::vector<int> order(kExperts);
  for (int t = 0; t < kTokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int k = 0; k < kTopK; ++k) {
      const int row = t * kTopK + k;
      r.rows.push_back({order[static_cast<std::size_t>(k)], t, row});
      r.sums.push_back({t, row, 1.0f / kTopK});
    }
  }
  return r;
}

// Args: threads, staging MiB (0: the whole batch at once), format (0 q4_g64, 1 q8_row).
void prompt_batch(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const WeightFormat format = state.range(2) == 0 ? WeightFormat::q4_g64 : WeightFormat::q8_row;
  auto made = create_backend({.kind = BackendKind::cpu, .name = "cpu", .cpu_kernel = "", .threads = threads});
  if (!made) {
    state.SkipWithError(made.error().message.c_str());
    return;
  }
  auto* cpu = dynamic_cast<CpuBackend*>(made->get());
  cpu->set_staging_bytes(state.range(1) == 0 ? std::numeric_limits<std::size_t>::max()
                                             : static_cast<std::size_t>(state.range(1)) << 20);
  const Experts experts = make_experts(**made, format);
  const Routing routing = make_routing();
  std::vector<float> in(static_cast<std::size_t>(kTokens) * kHidden), out(routing.rows.size() * kHidden),
      sum_into(static_cast<std::size_t>(kTokens) * kHidden, 0.0f);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : in) v = normal(rng);
  const ExpertBatch batch{experts.storage.get(), &experts.layout, in, out, routing.rows, routing.sums, sum_into};
  for (auto _ : state) {
    cpu->expert_ffn_batch(batch);
    benchmark::DoNotOptimize(sum_into.data());
  }
  const double macs = 3.0 * kHidden * kWidth * static_cast<double>(routing.rows.size());
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] = benchmark::Counter(kTokens, benchmark::Counter::kIsIterationInvariantRate);
}

void thread_counts(benchmark::internal::Benchmark* b) {
  std::vector<int> counts = {1};
  for (int t = 2; t <= omp_get_max_threads(); t *= 2) counts.push_back(t);
  if (counts.back() != omp_get_max_threads()) counts.push_back(omp_get_max_threads());
  for (int format : {0, 1})
    for (int threads : counts)
      for (long staging : {static_cast<long>(kCpuExpertStagingBytes >> 20), 0L}) b->Args({threads, staging, format});
  b->ArgNames({"threads", "staging_mib", "q8"})->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(prompt_batch)->Apply(thread_counts);

}  // namespace
}  // namespace coli::backend

BENCHMARK_MAIN();
