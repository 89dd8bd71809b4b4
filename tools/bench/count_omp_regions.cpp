// libcoli_count_omp_regions.so: counts the OpenMP parallel regions and
// barriers a program starts, for docs/benchmarks.md's regions per decode
// token. Preloaded, it sits in front of libgomp's GOMP_parallel (what GCC
// emits for every `#pragma omp parallel`, loops included) and GOMP_barrier
// (an explicit `#pragma omp barrier`; each member of a team counts once) and
// prints both counts to stderr when the program exits:
//   LD_PRELOAD=build/tools/bench/libcoli_count_omp_regions.so coli-decode-bench ... -n 2
// Run it at two token counts: the difference over the extra tokens is per token.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<long> regions{0}, barriers{0};

// The next definition of `name` (libgomp's), looked up once.
template <class Function>
Function* next_definition(const char* name) {
  void* found = dlsym(RTLD_NEXT, name);
  if (!found) {
    std::fprintf(stderr, "count_omp_regions: %s not found: is the program linked with libgomp?\n", name);
    std::abort();
  }
  return reinterpret_cast<Function*>(found);
}

struct Report {
  ~Report() { std::fprintf(stderr, "omp regions: %ld, barrier calls: %ld\n", regions.load(), barriers.load()); }
} report;

}  // namespace

extern "C" {

void GOMP_parallel(void (*fn)(void*), void* data, unsigned threads, unsigned flags) {
  using Function = void(void (*)(void*), void*, unsigned, unsigned);
  static Function* const real = next_definition<Function>("GOMP_parallel");
  ++regions;
  real(fn, data, threads, flags);
}

void GOMP_barrier() {
  using Function = void();
  static Function* const real = next_definition<Function>("GOMP_barrier");
  ++barriers;
  real();
}

}  // extern "C"
