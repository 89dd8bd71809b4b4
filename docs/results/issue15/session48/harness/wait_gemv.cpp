// Cost of a memory pass right after the thread blocked on a condition variable that another thread
// signals after SLEEP_US (an I/O completion), against the same pass back to back. Args: BYTES SLEEP_US
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>
#include <algorithm>
#include <fcntl.h>
#include <unistd.h>
#include <cstring>
static const int RB = getenv("RB") ? atoi(getenv("RB")) : 8192;
using Clock = std::chrono::steady_clock;
int main(int argc, char** argv) {
  const std::size_t bytes = std::atol(argv[1]);
  const int sleep_us = std::atoi(argv[2]);
  const char* file = argc > 3 ? argv[3] : nullptr;
  int fd = file ? open(file, O_RDONLY | O_DIRECT) : -1;
  void* rb = nullptr; posix_memalign(&rb, 4096, RB);
  off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0; unsigned seed = 1;
  std::vector<float> buf(bytes / 4, 1.0f);
  std::mutex m; std::condition_variable cv; bool go = false, req = false, quit = false;
  std::thread io([&] {
    std::unique_lock l(m);
    while (true) {
      cv.wait(l, [&] { return req || quit; });
      if (quit) return;
      req = false; l.unlock();
      if (fd >= 0) { seed = seed * 1103515245u + 12345u; off_t at = (off_t)((seed >> 8) % (size / RB - 1)) * RB; if (pread(fd, rb, RB, at) != RB) std::printf("read failed\n"); }
      else std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      l.lock(); go = true; cv.notify_all();
    }
  });
  std::vector<unsigned short> w(bytes / 2, 0x3f80); std::vector<float> x(1024, 0.5f); auto pass = [&] { float s = 0; for (std::size_t r = 0; r + 1024 <= w.size(); r += 1024) { float d = 0; for (int j = 0; j < 1024; ++j) { unsigned u = (unsigned)w[r + j] << 16; float f; std::memcpy(&f, &u, 4); d += f * x[j]; } s += d; } return s; };
  double sink = 0;
  std::vector<double> b2b, after[3];
  for (int r = 0; r < 200; ++r) {
    auto t0 = Clock::now(); sink += pass(); b2b.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    { std::unique_lock l(m); req = true; go = false; cv.notify_all(); cv.wait(l, [&] { return go; }); }
    for (int k = 0; k < 3; ++k) { t0 = Clock::now(); sink += pass(); after[k].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count()); }
  }
  { std::lock_guard l(m); quit = true; cv.notify_all(); }
  io.join();
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  std::printf("%zu KiB, wait %d us: back to back %.1f us; after the wait %.1f, %.1f, %.1f us%s\n", bytes >> 10, sleep_us, med(b2b),
              med(after[0]), med(after[1]), med(after[2]), sink > 0 ? "" : "!");
}
