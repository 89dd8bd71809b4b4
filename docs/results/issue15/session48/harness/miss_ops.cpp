// Decode tokens after a prompt with op timing on: each op's mean time per token,
// grouped by the token's misses (first 16 tokens and the rest). Args: MODEL THREADS CAP STEPS [REPS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sys/resource.h>
#include <future>
#include <fcntl.h>
#include <unistd.h>
#include <cstring>
#include <vector>
#include "coli/runtime/moe_model.h"
using Clock = std::chrono::steady_clock;
using namespace coli;
int main(int argc, char** argv) {
  if (argc < 5) { std::fprintf(stderr, "usage: MODEL THREADS CAP STEPS [REPS]\n"); return 2; }
  runtime::ModelOptions o;
  o.threads = std::atoi(argv[2]);
  o.cache_capacity = std::atoi(argv[3]);
  o.op_timing = true;
  if (std::getenv("IO_THREADS")) o.io_threads = std::atoi(std::getenv("IO_THREADS"));
  if (std::getenv("BUFFERED")) o.direct_io = false;
  if (std::getenv("PUS")) o.compute_pus = *CpuSet::parse(std::getenv("PUS"));
  const int steps = std::atoi(argv[4]), reps = argc > 5 ? std::atoi(argv[5]) : 10;
  auto model = runtime::MoeModel::load(argv[1], o);
  if (!model) { std::fprintf(stderr, "%s\n", model.error().message.c_str()); return 1; }
  const int vocab = model->vocab_size();
  std::vector<std::int32_t> prompt(512);
  for (int i = 0; i < 512; ++i) prompt[i] = (i * 7919 + 13) % vocab;
  std::vector<float> logits(vocab);
  struct Acc { double us = 0, fma = 0, flt = 0, csw = 0, icsw = 0; long n = 0; std::array<double, runtime::kOpCount> op{}; };
  std::map<std::pair<int, long>, Acc> by;
  long prev = 0;
  const int fd = ::open(argv[1], O_RDONLY | O_DIRECT);
  void* rb = nullptr; if (posix_memalign(&rb, 4096, 1 << 20)) return 1;
  const int extra = std::getenv("EXTRA_READ") ? std::atoi(std::getenv("EXTRA_READ")) : 0;
  for (int rep = 0; rep < reps; ++rep) {
    model->reset();
    (void)model->forward(prompt, 0, logits);
    model->reset();
    std::int32_t next = (rep * 31 + 990) % vocab;
    for (int i = 0; i < steps; ++i) {
      const bool extra_read = extra > 0 && i % 2 == 1;
      if (extra_read) {
        auto f = std::async(std::launch::async, [&] { return ::pread(fd, rb, extra, 4096 * (1 + i % 64)); });
        if (f.get() != extra) std::printf("short read\n");
      }
      rusage r0; getrusage(RUSAGE_SELF, &r0);
      const auto m0 = model->stats().expert_misses;
      model->op_times()->clear();
      const auto t0 = Clock::now();
      (void)model->forward(std::span(&next, 1), i, logits);
      int best = 0; for (int v = 1; v < vocab; ++v) if (logits[v] > logits[best]) best = v; next = best;
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      rusage r1; getrusage(RUSAGE_SELF, &r1);
      const auto f0 = Clock::now();
      float acc[16] = {}; for (int j = 0; j < 16; ++j) acc[j] = j * 0.001f;
      for (int it = 0; it < 200000; ++it) for (int j = 0; j < 16; ++j) acc[j] = acc[j] * 0.9999f + 0.5f;
      float sink = 0; for (float v : acc) sink += v; if (sink == 12345.f) std::printf("x");
      const double fma_us = std::chrono::duration<double, std::micro>(Clock::now() - f0).count();
      const long mis = static_cast<long>(model->stats().expert_misses - m0);
      Acc& a = by[{i >= 16, extra_read ? 100 + mis : mis}];
      prev = mis;
      if (std::getenv("PER_TOKEN")) std::fprintf(stderr, "%d %d %ld %.1f %.1f\n", rep, i, mis, us, 1e6 * model->op_times()->seconds(runtime::Op::lm_head));
      a.us += us, a.fma += fma_us, ++a.n; a.flt += r1.ru_minflt - r0.ru_minflt; a.csw += r1.ru_nvcsw - r0.ru_nvcsw; a.icsw += r1.ru_nivcsw - r0.ru_nivcsw;
      for (std::size_t k = 0; k < runtime::kOpCount; ++k) a.op[k] += 1e6 * model->op_times()->seconds(static_cast<runtime::Op>(k));
    }
  }
  std::printf("%-16s %6s %8s", "group", "tokens", "token");
  for (std::size_t k = 0; k < runtime::kOpCount; ++k) std::printf(" %9.9s", std::string(runtime::op_name(static_cast<runtime::Op>(k))).c_str());
  std::printf("  fma-after\n");
  for (auto& [k, a] : by) {
    std::printf("%-7s misses %ld %6ld %8.1f", k.first ? "steady" : "first16", k.second, a.n, a.us / a.n);
    for (double v : a.op) std::printf(" %9.1f", v / a.n);
    std::printf(" %9.1f flt %.2f csw %.2f icsw %.2f\n", a.fma / a.n, a.flt / a.n, a.csw / a.n, a.icsw / a.n);
  }
}
