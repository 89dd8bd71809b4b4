#include "sampler.h"
#include <cstdio>
#include <random>
using namespace coli::tools;
int main() {
  unsigned long h = 1469598103934665603ul;
  for (int vocab : {4096, 151936}) for (int k : {1, 20, 40}) for (double minp : {0.0, 0.05}) {
    SamplingOptions o; o.temperature = 0.7; o.top_k = k; o.top_p = 0.95; o.min_p = minp; o.seed = 42;
    Sampler s(o);
    std::mt19937 r(7); std::normal_distribution<float> n(0, 3);
    std::vector<float> logits(vocab);
    for (int i = 0; i < 300; ++i) { for (auto& l : logits) l = std::round(n(r) * 4) / 4; h = (h ^ *s.pick(logits)) * 1099511628211ul; }
  }
  std::printf("%lx\n", h);
}
