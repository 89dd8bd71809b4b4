#include "cuda/kernel_timer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cuda/pinned.h"

namespace coli::cuda {
namespace {

cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t event_of(void* e) { return static_cast<cudaEvent_t>(e); }

// Runs on the driver's callback thread and holds the stream until collect().
void CUDART_CB wait_at_gate(void* flag) {
  auto* open = static_cast<std::atomic<bool>*>(flag);
  while (!open->load(std::memory_order_acquire)) std::this_thread::yield();
}

}  // namespace

std::unique_ptr<KernelTimer> KernelTimer::from_environment(void* stream) {
  const char* flag = std::getenv("COLI_GPU_PROFILE");
  if (!flag || std::strcmp(flag, "1") != 0) return nullptr;
  return std::unique_ptr<KernelTimer>(new KernelTimer(stream));
}

KernelTimer::~KernelTimer() {
  open_.store(true, std::memory_order_release);
  cudaStreamSynchronize(stream_of(stream_));
  if (!totals_.empty()) std::fprintf(stderr, "%s", report().c_str());
  for (void* e : events_) cudaEventDestroy(event_of(e));
}

bool KernelTimer::record(const std::string& label) {
  if (next_ == events_.size()) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreate(&event) != cudaSuccess) return false;
    events_.push_back(event);
    labels_.emplace_back();
  }
  labels_[next_] = label;
  return cudaEventRecord(event_of(events_[next_++]), stream_of(stream_)) == cudaSuccess;
}

Status KernelTimer::begin() {
  next_ = 0;
  open_.store(false, std::memory_order_release);
  if (Status s = cuda_call("cudaLaunchHostFunc (profile gate)", cudaLaunchHostFunc(stream_of(stream_), wait_at_gate, &open_)); !s) {
    return s;
  }
  if (!record("")) return make_error("cudaEventRecord failed (COLI_GPU_PROFILE)");
  return Ok{};
}

void KernelTimer::launched(const std::string& name) { record(name); }

Status KernelTimer::collect() {
  open_.store(true, std::memory_order_release);
  if (next_ == 0) return Ok{};
  if (Status s = cuda_call("cudaEventSynchronize (profile)", cudaEventSynchronize(event_of(events_[next_ - 1]))); !s) return s;
  for (std::size_t i = 1; i < next_; ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, event_of(events_[i - 1]), event_of(events_[i])) != cudaSuccess) continue;
    Total& t = totals_[labels_[i]];
    t.ms += ms;
    ++t.calls;
  }
  ++steps_;
  return Ok{};
}

std::string KernelTimer::report() const {
  double all = 0;
  for (const auto& [label, t] : totals_) all += t.ms;
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  char line[220];
  std::snprintf(line, sizeof line, "CUDA time by kernel (COLI_GPU_PROFILE=1, %lld uncaptured steps, %.3f ms per step):\n",
                steps_, steps_ > 0 ? all / static_cast<double>(steps_) : 0.0);
  std::string out = line;
  for (const auto& [label, t] : rows) {
    std::snprintf(line, sizeof line, "  %-36s %9.2f ms %5.1f%%  %8lld calls  %8.2f us/call\n", label.c_str(), t.ms,
                  all > 0 ? 100 * t.ms / all : 0, t.calls, t.calls ? t.ms / static_cast<double>(t.calls) * 1e3 : 0);
    out += line;
  }
  return out;
}

}  // namespace coli::cuda
