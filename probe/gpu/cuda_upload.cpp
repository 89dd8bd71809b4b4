#include "gpu/cuda_upload.h"

#include <chrono>
#include <cstring>
#include <exception>

#include "gpu/cuda_probe.h"
#include "measure/stats.h"
#include "coli/base/clock.h"

namespace coli::probe {
namespace {

// The driver API's entry points this measurement calls (types: cuda_probe.h).

struct UploadApi {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemAllocHost)(void**, std::size_t) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, std::size_t) = nullptr;
};

// One device: pinned host block -> device block, timed per copy (synchronous).
std::string measure_device(const UploadApi& api, int ordinal, std::size_t bytes, double seconds,
                           std::vector<UploadBandwidthPoint>& points) {
  CUdevice device = 0;
  char name[256] = {};
  if (api.cuDeviceGet(&device, ordinal) != 0) return "cuDeviceGet failed";
  api.cuDeviceGetName(name, sizeof name - 1, device);
  CUcontext context = nullptr;
  if (api.cuDevicePrimaryCtxRetain(&context, device) != 0 || api.cuCtxSetCurrent(context) != 0) return "no context";
  void* host = nullptr;
  CUdeviceptr target = 0;
  std::string problem;
  if (api.cuMemAllocHost(&host, bytes) != 0) problem = "cuMemAllocHost failed";
  else if (api.cuMemAlloc(&target, bytes) != 0) problem = "cuMemAlloc failed";
  if (problem.empty()) {
    std::memset(host, 0x5a, bytes);
    RepeatPolicy policy;
    policy.max_total = std::chrono::duration<double>(seconds);
    policy.min_total = std::chrono::duration<double>(0.5 * seconds);
    bool failed = false;
    const SampleStats stats = measure_repeatedly([&] {
      const auto start = std::chrono::steady_clock::now();
      if (api.cuMemcpyHtoD(target, host, bytes) != 0) failed = true;
      return static_cast<double>(bytes) / coli::seconds_since(start) / 1e9;
    }, policy);
    if (failed) problem = "cuMemcpyHtoD failed";
    else points.push_back({"cuda", name, ordinal, static_cast<std::uint64_t>(bytes), stats});
  }
  if (target) api.cuMemFree(target);
  if (host) api.cuMemFreeHost(host);
  api.cuCtxSetCurrent(nullptr);
  api.cuDevicePrimaryCtxRelease(device);
  return problem;
}

}  // namespace

CudaUploadResult measure_cuda_uploads(std::size_t block_bytes, double budget_seconds) {
  try {
    const CudaDriverLibrary driver = open_cuda_driver();
    if (!driver.handle) return {"cuda: " + driver.status, {}};
    void* handle = driver.handle;
    const std::string& library = driver.name;
    UploadApi api;
    const bool complete =
        resolve_symbol(handle, api.cuInit, "cuInit") && resolve_symbol(handle, api.cuDeviceGetCount, "cuDeviceGetCount") &&
        resolve_symbol(handle, api.cuDeviceGet, "cuDeviceGet") && resolve_symbol(handle, api.cuDeviceGetName, "cuDeviceGetName") &&
        resolve_symbol(handle, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
        resolve_symbol(handle, api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") &&
        resolve_symbol(handle, api.cuCtxSetCurrent, "cuCtxSetCurrent") && resolve_symbol(handle, api.cuMemAlloc, "cuMemAlloc_v2") &&
        resolve_symbol(handle, api.cuMemFree, "cuMemFree_v2") && resolve_symbol(handle, api.cuMemAllocHost, "cuMemAllocHost_v2") &&
        resolve_symbol(handle, api.cuMemFreeHost, "cuMemFreeHost") && resolve_symbol(handle, api.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    if (!complete) return {"cuda: driver " + library + " lacks an entry point the upload test needs", {}};
    if (const CUresult result = api.cuInit(0); result != 0) return {"cuda: no CUDA device (cuInit: " + cuda_error_name(result) + ")", {}};
    int count = 0;
    if (api.cuDeviceGetCount(&count) != 0 || count <= 0) return {"cuda: no CUDA device", {}};
    CudaUploadResult out;
    std::string failures;
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      const std::string problem = measure_device(api, ordinal, block_bytes, budget_seconds / count, out.points);
      if (!problem.empty()) failures += "; device " + std::to_string(ordinal) + ": " + problem;
    }
    out.status = "cuda: " + std::to_string(out.points.size()) + " of " + std::to_string(count) + " device(s) measured" + failures;
    return out;
  } catch (const std::exception& error) {
    return {std::string("cuda: upload measurement failed (") + error.what() + ")", {}};
  }
}

}  // namespace coli::probe
