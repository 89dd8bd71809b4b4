// Where the CUDA decoder's time goes: with COLI_GPU_PROFILE=1 every token's
// step runs uncaptured with a CUDA event after each launch, and the time
// between consecutive events is summed per kernel name; the table goes to
// stderr when the decoder is destroyed (as the Vulkan decoder's profile does).
// The stream is held at a gate until the whole step is queued, so the
// kernels run back to back as in the graph and the host's launch time does
// not show up as kernel time.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "cuda/cuda_step.h"

namespace coli::cuda {

class KernelTimer final : public LaunchObserver {
 public:
  // Null unless COLI_GPU_PROFILE=1.
  static std::unique_ptr<KernelTimer> from_environment(void* stream);
  ~KernelTimer() override;
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

  // Before a step's first launch: the gate, then the first event.
  Status begin();
  void launched(const std::string& name) override;
  // Opens the gate, waits for the step and adds its kernel times.
  Status collect();
  std::string report() const;

 private:
  explicit KernelTimer(void* stream) : stream_(stream) {}
  struct Total {
    double ms = 0;
    long long calls = 0;
  };
  void* stream_;
  std::vector<void*> events_;        // cudaEvent_t, reused step after step
  std::vector<std::string> labels_;  // of events_[1..next_)
  std::size_t next_ = 0;
  std::atomic<bool> open_{false};
  std::map<std::string, Total> totals_;
  long long steps_ = 0;
  bool record(const std::string& label);
};

}  // namespace coli::cuda
