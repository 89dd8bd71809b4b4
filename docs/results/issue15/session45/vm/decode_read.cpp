// One O_DIRECT read through the engine's I/O pool, as a decode miss does it:
// between reads the (pinned) OpenMP team runs a token's GEMV work.
#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>
#include "io_pool.h"
#include "coli/forward/ops.h"
#include "cpu/thread_placement.h"
using Clock = std::chrono::steady_clock;
int main(int argc, char** argv) {
  const char* path = argv[1];
  const std::size_t block = std::atoi(argv[2]);
  const int threads = std::atoi(argv[3]);
  const int mode = std::atoi(argv[4]);  // 0 back to back, 1 team GEMV between reads, 2 team GEMV, unpinned
  const int rows = std::atoi(argv[5]);  // GEMV rows of 64 bf16 between reads
  int fd = open(path, O_RDONLY | O_DIRECT);
  off_t size = lseek(fd, 0, SEEK_END);
  coli::runtime::IoPool pool(4);
  std::vector<int> pus(threads); std::iota(pus.begin(), pus.end(), 0);
  if (mode != 2 && threads > 1) (void)coli::kernels::cpu::pin_openmp_team(pus);
  void* buf; if (posix_memalign(&buf, 4096, block)) return 1;
  std::vector<std::uint16_t> w(std::size_t(rows) * 64, 0x3c3c);
  std::vector<float> x(64, 0.5f), y(rows);
  coli::forward::DenseMatrix m{coli::WeightFormat::bf16, rows, 64, w.data()};
  std::mt19937_64 rng(1);
  std::vector<double> lat, work, first, later;
  for (int i = 0; i < 400; ++i) {
    auto w0 = Clock::now();
    if (mode == 1 || mode == 2) for (int k = 0; k < 4; ++k) {
      auto g0 = Clock::now();
      coli::forward::gemv_dense(m, x, y, threads);
      (k == 0 ? first : later).push_back(std::chrono::duration<double, std::micro>(Clock::now() - g0).count());
    }
    if (mode == 3 || mode == 5) { auto end = Clock::now() + std::chrono::microseconds(rows); while (Clock::now() < end) {} }
    if (mode == 4) usleep(rows);
    work.push_back(std::chrono::duration<double, std::micro>(Clock::now() - w0).count());
    std::uint64_t off = rng() % (size / block) * block;
    auto t0 = Clock::now();
    auto f = mode >= 5 ? pool.submit([] { return coli::Status(coli::Ok{}); }) : pool.submit([&] { return coli::runtime::pread_full(fd, off, std::span<std::byte>((std::byte*)buf, block), block, "x"); });
    f.get();
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(lat.begin(), lat.end()); std::sort(work.begin(), work.end());
  printf("block %zu threads %d mode %d rows %d: read median %.1f us p10 %.1f p90 %.1f; work between %.1f us\n", block, threads, mode, rows,
         lat[200], lat[40], lat[360], work[200]);
  if (!first.empty()) { std::sort(first.begin(), first.end()); std::sort(later.begin(), later.end());
    printf("  gemv right after the read %.1f us, the later ones %.1f us\n", first[first.size()/2], later[later.size()/2]); }
}
