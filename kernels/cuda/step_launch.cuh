// Launching a token's step kernels back to back (Programmatic Dependent
// Launch, sm_90 and newer): each step kernel is launched with the
// programmatic-serialisation attribute, so the next kernel's blocks are
// scheduled while this one runs, and every step kernel starts with
// step_kernel_begin(): it lets the next kernel launch, then waits until the
// previous kernel has finished and its writes are visible. The order of
// results is unchanged; what overlaps is the launch and block start-up, a
// few microseconds of the ~10 launches per layer (docs/backends.md).
// COLI_CUDA_PDL=off launches them plainly.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace coli::kernels::cuda::decoder {

__device__ __forceinline__ void step_kernel_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// True when the current device runs programmatic dependent launches (compute
// capability 9.0+) and COLI_CUDA_PDL is not "off"; asked once per device.
inline bool step_overlap() {
  static const bool disabled = [] {
    const char* flag = std::getenv("COLI_CUDA_PDL");
    return flag != nullptr && std::strcmp(flag, "off") == 0;
  }();
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  if (disabled || cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return false;
  if (known[device] == 0) {
    int major = 0;
    const bool asked = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess;
    known[device] = asked && major >= 9 ? 2 : 1;
  }
  return known[device] == 2;
}

// kernel<<<grid, block, 0, stream>>>(args...), with the attribute when step_overlap().
template <typename... Params, typename... Args>
void launch_step(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  if (stream != nullptr && step_overlap()) {  // the legacy default stream (tests) launches plainly
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace coli::kernels::cuda::decoder
