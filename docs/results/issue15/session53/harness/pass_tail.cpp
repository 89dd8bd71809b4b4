// Session 52 harness: does a prompt pass cost the sum of its parts' medians?
// (1) empty OpenMP regions at a team size: median, mean and tail of single regions, and the median of
//     64-region blocks (a pass enters 65) per region; (2) N prefill passes of a model (cap all): median,
//     mean and tail of the pass times.
// Usage: s52-pass-tail MODEL THREADS PASSES [PROMPT]
#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "coli/planner/plan.h"
#include "measure/engine_expert_batch.h"
#include "coli/container/container.h"
#include <random>
#include "coli/runtime/moe_model.h"
#include "coli/runtime/plan_options.h"

using Clock = std::chrono::steady_clock;
static double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

static void report(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  auto q = [&](double p) { return v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))]; };
  std::printf("%-28s n %6zu  median %9.2f  mean %9.2f  p10 %9.2f  p90 %9.2f  p99 %9.2f  max %9.2f  mean/median %.3f\n", what,
              v.size(), q(0.5), mean, q(0.1), q(0.9), q(0.99), v.back(), mean / q(0.5));
}

int main(int argc, char** argv) {
  if (argc < 4) return std::fprintf(stderr, "usage: %s MODEL THREADS PASSES [PROMPT]\n", argv[0]), 2;
  const int threads = std::atoi(argv[2]), passes = std::atoi(argv[3]), prompt = argc > 4 ? std::atoi(argv[4]) : 512;
  if (std::getenv("S52_FTZ")) {  // flush denormals to zero on every thread of the team (and this one)
    _mm_setcsr(_mm_getcsr() | 0x8040);
#pragma omp parallel num_threads(threads)
    _mm_setcsr(_mm_getcsr() | 0x8040);
    std::printf("FTZ and DAZ on\n");
  }
  volatile float sink = 0;
  auto region = [&] {
#pragma omp parallel num_threads(threads)
    { sink = sink + 0.0f; }
  };
  for (int i = 0; i < 2000; ++i) region();
  std::vector<double> single, block;
  for (int i = 0; i < 20000; ++i) { const auto t = Clock::now(); region(); single.push_back(us_since(t)); }
  for (int b = 0; b < 500; ++b) {
    const auto t = Clock::now();
    for (int i = 0; i < 64; ++i) region();
    block.push_back(us_since(t) / 64);
  }
  std::printf("threads %d\n", threads);
  report("region us (single)", single);
  report("region us (64-block mean)", block);

  auto shape = coli::runtime::MoeModel::read_shape(argv[1]);
  if (!shape) return std::fprintf(stderr, "%s\n", shape.error().message.c_str()), 1;
  coli::planner::Plan plan;
  plan.threads = threads, plan.cap = shape->experts, plan.n_experts = shape->experts, plan.ctx = prompt + 16;
  const coli::runtime::ModelOptions defaults;
  plan.cpu_kernel = "";  // the engine's own choice
  plan.prefill_round_tokens = defaults.prefill_round_tokens, plan.io_threads = defaults.io_threads, plan.direct_io = defaults.direct_io;
  auto options = coli::runtime::options_from_plan(plan, *shape, nullptr);
  if (!options) return std::fprintf(stderr, "%s\n", options.error().message.c_str()), 1;
  const bool batches = std::getenv("S52_BATCHES") != nullptr;  // the engine's expert batches timed (op times)
  options->op_timing = batches;
  auto model = coli::runtime::MoeModel::load(argv[1], *options);
  if (!model) return std::fprintf(stderr, "%s\n", model.error().message.c_str()), 1;
  if (batches) model->op_times()->keep_batches(true);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(prompt));
  for (int i = 0; i < prompt; ++i) ids[static_cast<std::size_t>(i)] = (i * 7919 + 13) % model->vocab_size();
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  std::function<void()> probe_call;  // S52_SAME_PROCESS: the probe's batch of the demo shape, two calls after each pass
  std::vector<double> probe_us;
  std::vector<std::byte> pool;  // the probe batch's records (it keeps a span of them)
  if (std::getenv("S52_SAME_PROCESS")) {  // the probe's batch of the demo model's shape, in this process after the passes
    pool.resize(64u << 20);
    std::uint32_t st = 12345;
    for (std::byte& b : pool) st = st * 1664525u + 1013904223u, b = static_cast<std::byte>(0x30 | (st >> 28));
    if (std::getenv("S52_REAL_WEIGHTS")) {  // the container's layer-0 expert records in slots 0..7
      auto reader = coli::container::ContainerReader::open(argv[1]);
      if (!reader) return std::fprintf(stderr, "%s\n", reader.error().message.c_str()), 1;
      const auto& layout = reader->index().experts;
      std::printf("container records: %llu bytes, stride %llu\n", (unsigned long long)layout.record_bytes, (unsigned long long)layout.record_stride);
      for (std::uint32_t e = 0; e < 8; ++e) {
        auto slot = std::span(pool).subspan(e * layout.record_stride, layout.record_bytes);
        if (auto st2 = reader->read(layout.record_offset(0, e), slot); !st2) return std::fprintf(stderr, "%s\n", st2.error().message.c_str()), 1;
      }
    }
    auto batch = coli::probe::EngineExpertBatch::create(coli::WeightFormat::q4_g64, 64, 64, "", threads, pool);
    std::printf("probe batch records: %llu bytes\n", (unsigned long long)batch->record_bytes());
    if (!batch) return std::fprintf(stderr, "%s\n", batch.error().message.c_str()), 1;
    batch->keep_first(8);
    std::mt19937 random(7);
    std::vector<std::pair<int, int>> tasks;
    std::vector<std::vector<int>> chosen(512);
    for (auto& c : chosen) { std::vector<int> e{0,1,2,3,4,5,6,7}; std::shuffle(e.begin(), e.end(), random); c = {e[0], e[1]}; }
    if (std::getenv("S52_REAL_ROUTING")) {  // the last pass's routing of MoE layer 0, as the engine ran it
      const auto& trace = model->routing_trace();
      const auto ids = trace.layer(0);
      const std::size_t last = ids.size() - 512 * 2;
      for (int t = 0; t < 512; ++t) chosen[t] = {ids[last + 2 * t], ids[last + 2 * t + 1]};
      std::printf("real routing of layer 0: tokens 0-3 -> %d,%d %d,%d %d,%d %d,%d\n", chosen[0][0], chosen[0][1], chosen[1][0], chosen[1][1],
                  chosen[2][0], chosen[2][1], chosen[3][0], chosen[3][1]);
    }
    for (int e = 0; e < 8; ++e) for (int t = 0; t < 512; ++t) if (chosen[t][0] == e || chosen[t][1] == e) tasks.emplace_back(t, e);
    std::vector<float> xs(512 * 64);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& x : xs) x = u(random);
    probe_call = [batch = std::make_shared<coli::probe::EngineExpertBatch>(std::move(*batch)), tasks, xs] { batch->run(tasks, 8, xs, 512); };
  }
  std::vector<double> pass_us;
  const bool ftz_ab = std::getenv("S52_FTZ_AB") != nullptr;  // odd passes with FTZ and DAZ on every thread, even ones without
  const unsigned csr_off = _mm_getcsr() & ~0x8040u;
  std::vector<double> ftz_us, no_ftz_us;
  for (int p = 0; p < passes + 5; ++p) {
    if (ftz_ab) {
      const unsigned csr = p % 2 ? csr_off | 0x8040u : csr_off;
      _mm_setcsr(csr);
#pragma omp parallel num_threads(threads)
      _mm_setcsr(csr);
    }
    model->reset();
    const auto t = Clock::now();
    if (auto s = model->forward(ids, 0, logits); !s) return std::fprintf(stderr, "%s\n", s.error().message.c_str()), 1;
    if (p >= 5) pass_us.push_back(us_since(t));
    if (p >= 5 && ftz_ab) (p % 2 ? ftz_us : no_ftz_us).push_back(pass_us.back());
    for (int c = 0; probe_call && c < 2; ++c) {
      const auto t2 = Clock::now();
      probe_call();
      if (p >= 5) probe_us.push_back(us_since(t2));
    }
  }
  if (probe_call) report("probe batch (demo shape) us", probe_us);
  if (ftz_ab) report("pass us, FTZ and DAZ on", ftz_us), report("pass us, FTZ and DAZ off", no_ftz_us);
  report("prefill pass us", pass_us);
  {
    double sum = 0;
    std::uint64_t hash = 1469598103934665603ull;
    for (float v : logits) { std::uint32_t b; std::memcpy(&b, &v, 4); hash = (hash ^ b) * 1099511628211ull; sum += v; }
    std::printf("last pass logits: sum %.9g hash %016llx\n", sum, (unsigned long long)hash);
  }
  if (batches) {
    std::vector<double> batch_us;
    for (const auto& b : model->op_times()->batches()) batch_us.push_back(b.seconds * 1e6);
    report("expert batch us", batch_us);
  }
  std::printf("prefill tok/s at the median pass %.1f, at the mean %.1f\n", prompt * 1e6 / [&] { auto v = pass_us; std::sort(v.begin(), v.end()); return v[v.size() / 2]; }(),
              prompt * 1e6 / (std::accumulate(pass_us.begin(), pass_us.end(), 0.0) / pass_us.size()));
}
