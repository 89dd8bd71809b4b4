// Decode tokens after a prompt, each timed with its expert misses: mean token time by miss count,
// for the first 16 tokens and for the rest (steady). Args: MODEL THREADS CAP STEPS [REPS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>
#include "coli/runtime/moe_model.h"
using Clock = std::chrono::steady_clock;
using namespace coli;
int main(int argc, char** argv) {
  if (argc < 5) { std::fprintf(stderr, "usage: MODEL THREADS CAP STEPS [REPS]\n"); return 2; }
  runtime::ModelOptions o;
  o.threads = std::atoi(argv[2]);
  o.cache_capacity = std::atoi(argv[3]);
  const int steps = std::atoi(argv[4]), reps = argc > 5 ? std::atoi(argv[5]) : 10;
  auto model = runtime::MoeModel::load(argv[1], o);
  if (!model) { std::fprintf(stderr, "%s\n", model.error().message.c_str()); return 1; }
  const int vocab = model->vocab_size();
  std::vector<std::int32_t> prompt(512);
  for (int i = 0; i < 512; ++i) prompt[i] = (i * 7919 + 13) % vocab;
  std::vector<float> logits(vocab);
  struct Acc { double us = 0; long n = 0; };
  std::map<std::pair<int, long>, Acc> by;  // (steady?, misses) -> time
  for (int rep = 0; rep < reps; ++rep) {
    model->reset();
    (void)model->forward(prompt, 0, logits);
    model->reset();
    std::int32_t next = (rep * 31 + 990) % vocab;
    for (int i = 0; i < steps; ++i) {
      const auto m0 = model->stats().expert_misses;
      const auto t0 = Clock::now();
      (void)model->forward(std::span(&next, 1), i, logits);
      int best = 0; for (int v = 1; v < vocab; ++v) if (logits[v] > logits[best]) best = v; next = best;
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      Acc& a = by[{i >= 16, static_cast<long>(model->stats().expert_misses - m0)}];
      a.us += us, ++a.n;
    }
  }
  for (auto& [k, a] : by) std::printf("%s misses %ld: %6ld tokens, %8.1f us\n", k.first ? "steady" : "first16", k.second, a.n, a.us / a.n);
}
