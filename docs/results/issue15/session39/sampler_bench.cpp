#include "sampler.h"
#include <chrono>
#include <cstdio>
#include <random>
using namespace coli::tools;
int main() {
  for (int vocab : {4096, 151936}) {
    std::vector<float> logits(vocab);
    std::mt19937 r(1); std::normal_distribution<float> n(0, 3);
    for (auto& l : logits) l = n(r);
    for (int k : {0, 40}) for (double t : {0.0, 0.7}) {
      SamplingOptions o; o.temperature = t; o.top_k = k; o.top_p = 0.95;
      Sampler s(o);
      const int reps = vocab > 10000 ? 200 : 2000;
      auto t0 = std::chrono::steady_clock::now();
      long sum = 0;
      for (int i = 0; i < reps; ++i) sum += *s.pick(logits);
      double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps * 1e6;
      std::printf("vocab %6d top_k %2d T %.1f: %8.1f us a token (%ld)\n", vocab, k, t, us, sum % 7);
    }
  }
}
