// Session 53 harness: how much of a buffer survives in the last-level cache while this core does
// register-only work for T ms (other tenants of a shared L3 evict it; this core does not).
// Usage: s53-llc-retention BUFFER_MIB L2_SWEEP_MIB. Each line: the buffer's read time (median of 15) after
// touching it, sweeping L2_SWEEP_MIB of private data (the L2 emptied of it) and spinning T ms; the last
// line after a 512 MiB sweep (every cache emptied of it). retained = (cold - t) / (cold - t at 0 ms).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
volatile double sink;
static double read_lines(const std::vector<double>& v) { double s = 0; for (std::size_t i = 0; i < v.size(); i += 8) s += v[i]; return s; }
static void spin_ms(double ms) {
  const auto t = Clock::now();
  double x = 1;
  while (us(t, Clock::now()) < ms * 1000) for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  sink = x;
}
int main(int argc, char** argv) {
  const double mib = argc > 1 ? atof(argv[1]) : 4, l2_mib = argc > 2 ? atof(argv[2]) : 4;
  std::vector<double> buf(static_cast<std::size_t>(mib * (1 << 17))), l2(static_cast<std::size_t>(l2_mib * (1 << 17)) + 8),
      big(512u << 17);
  std::fill(buf.begin(), buf.end(), 1.0), std::fill(l2.begin(), l2.end(), 2.0), std::fill(big.begin(), big.end(), 3.0);
  const std::vector<double> waits{0, 0.5, 1, 2, 5, 10, 20, 50, -1};
  std::vector<double> medians;
  for (double wait : waits) {
    std::vector<double> t;
    for (int r = 0; r < 15; ++r) {
      sink = read_lines(buf);
      if (wait < 0) sink = read_lines(big);
      else sink = read_lines(l2), spin_ms(wait);
      const auto a = Clock::now();
      sink = read_lines(buf);
      t.push_back(us(a, Clock::now()));
    }
    std::sort(t.begin(), t.end());
    medians.push_back(t[7]);
  }
  const double hot = medians.front(), cold = medians.back();
  for (std::size_t i = 0; i < waits.size(); ++i) {
    if (waits[i] < 0) std::printf("after a 512 MiB sweep: %.0f MiB read in %8.1f us\n", mib, medians[i]);
    else std::printf("after %5.1f ms: %.0f MiB read in %8.1f us, retained %5.2f\n", waits[i], mib, medians[i],
                     cold > hot ? std::clamp((cold - medians[i]) / (cold - hot), 0.0, 1.0) : 1.0);
  }
}
