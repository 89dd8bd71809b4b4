// Harness: the float GEMV of a small model's lm_head (rows x cols bf16),
// timed back to back (the probe's cached point) and with a token's other
// work between calls (the engine's decode), on a pinned team.
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>
#include <omp.h>
#include "coli/forward/ops.h"
#include "cpu/thread_placement.h"
using Clock = std::chrono::steady_clock;
static double us_since(Clock::time_point s) { return std::chrono::duration<double, std::micro>(Clock::now() - s).count(); }
int main(int argc, char** argv) {
  if (argc < 7) { std::fprintf(stderr, "rows cols threads mode(0 b2b,1 token-like,2 spin gap,3 sleep gap) gap_us src(0 anon,1 file)\n"); return 2; }
  const int rows = std::atoi(argv[1]), cols = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  const int mode = std::atoi(argv[4]), gap_us = std::atoi(argv[5]), src = std::atoi(argv[6]);
  const size_t bytes = size_t(rows) * cols * 2;
  std::vector<int> pus(threads); std::iota(pus.begin(), pus.end(), 0);
  if (threads > 1) if (auto s = coli::kernels::cpu::pin_openmp_team(pus); !s) { std::fprintf(stderr, "pin failed\n"); return 1; }
  char* base;
  if (src == 1) {
    int fd = open("/tmp/lm_gap.bin", O_RDWR | O_CREAT | O_TRUNC, 0644);
    std::vector<char> buf(bytes, 0x3c); if (write(fd, buf.data(), bytes) != (ssize_t)bytes) return 1;
    base = (char*)mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  } else {
    base = (char*)aligned_alloc(1 << 21, (bytes + (1 << 21) - 1) & ~size_t((1 << 21) - 1));
    std::memset(base, 0x3c, bytes);
  }
  // The token's other matrices: 2 layers of q,k,v,o 64x64 f32 + experts, as a tiny model has.
  std::vector<float> small(64 * 256, 0.01f), sy(256), x(cols, 0.5f), y(rows);
  coli::forward::DenseMatrix m{coli::WeightFormat::bf16, rows, cols, base};
  coli::forward::DenseMatrix sm{coli::WeightFormat::f32, 256, 64, small.data()};
  std::vector<double> t;
  volatile float sink = 0;
  for (int i = 0; i < 600; ++i) {
    if (mode == 1) {  // a token's other regions and the greedy scan of the last logits
      for (int r = 0; r < 12; ++r) coli::forward::gemv_dense(sm, std::span<const float>(x).first(64), sy, threads);
      sink = *std::max_element(y.begin(), y.end());
    } else if (mode == 2) {
      auto end = Clock::now() + std::chrono::microseconds(gap_us); while (Clock::now() < end) {}
    } else if (mode == 3) {
      usleep(gap_us);
    }
    auto s = Clock::now();
    coli::forward::gemv_dense(m, x, y, threads);
    if (i >= 100) t.push_back(us_since(s));
  }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  std::printf("rows %d cols %d threads %2d mode %d gap %4d src %d: median %7.1f us (%6.2f GB/s) q1 %7.1f q3 %7.1f\n", rows, cols, threads,
              mode, gap_us, src, med, bytes / med / 1e3, t[t.size() / 4], t[t.size() * 3 / 4]);
  return sink < -1;
}
