// A fixed read of a buffer (sum of floats) timed right after the thread slept: L3/DRAM after idle.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <algorithm>
using Clock = std::chrono::steady_clock;
int main(int argc, char** argv) {
  const std::size_t bytes = std::atol(argv[1]);
  const double sleep_ms = std::atof(argv[2]);
  std::vector<float> buf(bytes / 4, 1.0f);
  const int chunks = 16, reps = 30;
  std::vector<std::vector<double>> t(chunks);
  double sink = 0;
  for (int r = 0; r < reps; ++r) {
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(long(sleep_ms * 1000)));
    for (int c = 0; c < chunks; ++c) { auto t0 = Clock::now(); float s = 0; for (std::size_t i = 0; i < buf.size(); i += 16) s += buf[i]; sink += s; t[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count()); }
  }
  for (int c = 0; c < chunks; ++c) { std::sort(t[c].begin(), t[c].end()); std::printf("%6.0f", t[c][reps / 2]); }
  std::printf("   (%zu KiB, sleep %.2f ms%s)\n", bytes >> 10, sleep_ms, sink > 0 ? "" : "!");
}
