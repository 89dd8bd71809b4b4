// A parallel region's fork/join right after the calling thread blocked for a
// while (waiting on another thread, as a decode waits for a read), against back to back.
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>
#include "cpu/thread_placement.h"
using Clock = std::chrono::steady_clock;
int main(int argc, char** argv) {
  const int threads = std::atoi(argv[1]), block_us = std::atoi(argv[2]), mode = std::atoi(argv[3]);  // mode 0 sleep, 1 future from thread, 2 spin
  std::vector<int> pus(threads); std::iota(pus.begin(), pus.end(), 0);
  if (threads > 1) (void)coli::kernels::cpu::pin_openmp_team(pus);
  std::vector<double> t;
  volatile double sink = 0;
  for (int i = 0; i < 300; ++i) {
#pragma omp parallel num_threads(threads)
    { sink = sink + omp_get_thread_num(); }
    if (block_us > 0) {
      if (mode == 0) std::this_thread::sleep_for(std::chrono::microseconds(block_us));
      else if (mode == 1) { auto f = std::async(std::launch::async, [&] { std::this_thread::sleep_for(std::chrono::microseconds(block_us)); }); f.get(); }
      else { auto e = Clock::now() + std::chrono::microseconds(block_us); while (Clock::now() < e) {} }
    }
    auto s = Clock::now();
#pragma omp parallel num_threads(threads)
    { sink = sink + omp_get_thread_num(); }
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  std::printf("threads %d block %5d us mode %d: region median %.1f us p10 %.1f p90 %.1f\n", threads, block_us, mode, t[150], t[30], t[270]);
}
