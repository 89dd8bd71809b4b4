// A fixed register-only loop timed right after the thread slept: does the core run slow after idle?
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <algorithm>
using Clock = std::chrono::steady_clock;
static double work(long n) { double x = 1.0; for (long i = 0; i < n; ++i) x = x * 1.0000001 + 1e-9; return x; }
int main(int argc, char** argv) {
  const long n = std::atol(argv[1]);      // iterations of one chunk
  const double sleep_ms = std::atof(argv[2]);
  const int chunks = 24, reps = 30;
  std::vector<std::vector<double>> t(chunks);
  double sink = 0;
  for (int r = 0; r < reps; ++r) {
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(long(sleep_ms * 1000)));
    for (int c = 0; c < chunks; ++c) { auto t0 = Clock::now(); sink += work(n); t[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count()); }
  }
  for (int c = 0; c < chunks; ++c) { std::sort(t[c].begin(), t[c].end()); std::printf("%5.0f", t[c][reps / 2]); }
  std::printf("   (sleep %.2f ms, sink %g)\n", sleep_ms, sink > 0 ? 1.0 : 0.0);
}
