// Per-token decode times after a prompt: where the first tokens' extra goes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include "coli/runtime/moe_model.h"
using Clock = std::chrono::steady_clock;
using namespace coli;
int main(int argc, char** argv) {
  runtime::ModelOptions o;
  o.threads = std::atoi(argv[2]);
  o.cache_capacity = std::atoi(argv[3]);
  const int sleep_ms = std::atoi(argv[4]);
  const int steps = argc > 5 ? std::atoi(argv[5]) : 16;
  auto model = runtime::MoeModel::load(argv[1], o);
  if (!model) { std::fprintf(stderr, "%s\n", model.error().message.c_str()); return 1; }
  const int vocab = model->vocab_size();
  std::vector<std::int32_t> prompt(512);
  for (int i = 0; i < 512; ++i) prompt[i] = (i * 7919 + 13) % vocab;
  std::vector<float> logits(vocab);
  std::vector<double> sum(steps, 0), reads(steps, 0);
  const int reps = 20;
  for (int rep = 0; rep < reps; ++rep) {
    model->reset();
    (void)model->forward(prompt, 0, logits);
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (sleep_ms < 0) {  // stream a 64 MB buffer for |sleep_ms| ms: keeps the memory path busy
      static std::vector<float> buf(16 << 20, 1.0f);
      float acc = 0;
      const auto end = Clock::now() + std::chrono::milliseconds(-sleep_ms);
      while (Clock::now() < end) for (std::size_t i = 0; i < buf.size(); i += 16) acc += buf[i];
      if (acc == 42) std::printf("!");
    }
    model->reset();
    std::int32_t next = (rep * 31 + 990) % vocab;
    for (int i = 0; i < steps; ++i) {
      const auto m0 = model->stats().expert_misses;
      const auto t0 = Clock::now();
      (void)model->forward(std::span(&next, 1), i, logits);
      sum[i] += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      reads[i] += model->stats().expert_misses - m0;
      int best = 0; for (int v = 1; v < vocab; ++v) if (logits[v] > logits[best]) best = v; next = best;
    }
  }
  double total = 0;
  for (int i = 0; i < steps; ++i) { std::printf("%3d %8.1f us  %.2f misses\n", i, sum[i] / reps, reads[i] / reps); total += sum[i] / reps; }
  std::printf("mean %.1f us/token = %.0f tok/s\n", total / steps, 1e6 * steps / total);
}
