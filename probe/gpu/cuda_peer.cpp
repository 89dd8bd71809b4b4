#include "gpu/cuda_peer.h"

#include <chrono>
#include <exception>

#include "gpu/cuda_probe.h"
#include "measure/stats.h"
#include "coli/base/clock.h"

namespace coli::probe {
namespace {

// The driver API's entry points this measurement calls (types: cuda_probe.h).
constexpr CUresult kPeerAlreadyEnabled = 704;  // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED

struct PeerApi {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceCanAccessPeer)(int*, CUdevice, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxEnablePeerAccess)(CUcontext, unsigned) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyPeer)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, std::size_t) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
};

// The API with every entry point, or the status saying which is missing.
std::string open_api(PeerApi& api) {
  const CudaDriverLibrary driver = open_cuda_driver();
  if (!driver.handle) return driver.status;
  void* h = driver.handle;
  const bool complete =
      resolve_symbol(h, api.cuInit, "cuInit") && resolve_symbol(h, api.cuDeviceGet, "cuDeviceGet") &&
      resolve_symbol(h, api.cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer") &&
      resolve_symbol(h, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
      resolve_symbol(h, api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease") &&
      resolve_symbol(h, api.cuCtxSetCurrent, "cuCtxSetCurrent") && resolve_symbol(h, api.cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess") &&
      resolve_symbol(h, api.cuMemAlloc, "cuMemAlloc_v2") && resolve_symbol(h, api.cuMemFree, "cuMemFree_v2") &&
      resolve_symbol(h, api.cuMemcpyPeer, "cuMemcpyPeer") && resolve_symbol(h, api.cuCtxSynchronize, "cuCtxSynchronize");
  if (!complete) return "driver " + driver.name + " lacks an entry point the peer test needs";
  if (const CUresult r = api.cuInit(0); r != 0) return "no CUDA device (cuInit: " + cuda_error_name(r) + ")";
  return "";
}

bool can_access(const PeerApi& api, int from, int to) {
  CUdevice a = 0, b = 0;
  int yes = 0;
  return api.cuDeviceGet(&a, from) == 0 && api.cuDeviceGet(&b, to) == 0 && api.cuDeviceCanAccessPeer(&yes, a, b) == 0 && yes;
}

// Both primary contexts held, a's allowed into b's memory, a block on each side.
struct PeerPair {
  const PeerApi& api;
  CUdevice da = 0, db = 0;
  CUcontext ca = nullptr, cb = nullptr;
  CUdeviceptr src = 0, dst = 0;
  std::string problem;

  PeerPair(const PeerApi& peer_api, int a, int b, std::size_t bytes) : api(peer_api) {
    if (api.cuDeviceGet(&da, a) != 0 || api.cuDeviceGet(&db, b) != 0) problem = "cuDeviceGet failed";
    else if (api.cuDevicePrimaryCtxRetain(&ca, da) != 0 || api.cuDevicePrimaryCtxRetain(&cb, db) != 0) problem = "no context";
    else if (api.cuCtxSetCurrent(cb) != 0 || api.cuMemAlloc(&dst, bytes) != 0) problem = "cuMemAlloc on the target failed";
    else if (api.cuCtxSetCurrent(ca) != 0 || api.cuMemAlloc(&src, bytes) != 0) problem = "cuMemAlloc on the source failed";
    else if (const CUresult r = api.cuCtxEnablePeerAccess(cb, 0); r != 0 && r != kPeerAlreadyEnabled) {
      problem = "cuCtxEnablePeerAccess: " + cuda_error_name(r);
    }
  }
  ~PeerPair() {
    if (src && api.cuCtxSetCurrent(ca) == 0) api.cuMemFree(src);
    if (dst && api.cuCtxSetCurrent(cb) == 0) api.cuMemFree(dst);
    api.cuCtxSetCurrent(nullptr);
    if (ca) api.cuDevicePrimaryCtxRelease(da);
    if (cb) api.cuDevicePrimaryCtxRelease(db);
  }
  PeerPair(const PeerPair&) = delete;
  PeerPair& operator=(const PeerPair&) = delete;
};

std::string measure_pair(const PeerApi& api, GpuLink& link, std::size_t bytes, double seconds) {
  PeerPair pair(api, link.a, link.b, bytes);
  if (!pair.problem.empty()) return pair.problem;
  RepeatPolicy policy;
  policy.max_total = std::chrono::duration<double>(seconds);
  policy.min_total = std::chrono::duration<double>(0.5 * seconds);
  bool failed = false;
  const SampleStats stats = measure_repeatedly([&] {
    const auto start = std::chrono::steady_clock::now();
    if (api.cuMemcpyPeer(pair.dst, pair.cb, pair.src, pair.ca, bytes) != 0 || api.cuCtxSynchronize() != 0) failed = true;
    return static_cast<double>(bytes) / coli::seconds_since(start) / 1e9;
  }, policy);
  if (failed) return "cuMemcpyPeer failed";
  link.measured_gbs = stats.median;
  link.source += "+measured";
  return "";
}

}  // namespace

std::string read_peer_access(std::vector<GpuLink>& links) {
  if (links.empty()) return "";
  try {
    PeerApi api;
    if (std::string problem = open_api(api); !problem.empty()) return "peer access not read: " + problem;
    for (GpuLink& link : links) link.peer_access = can_access(api, link.a, link.b) && can_access(api, link.b, link.a);
    return "";
  } catch (const std::exception& error) {
    return std::string("peer access not read (") + error.what() + ")";
  }
}

std::string measure_peer_copies(std::vector<GpuLink>& links, std::size_t block_bytes, double budget_seconds) {
  if (links.empty()) return "peer copies: no pairs";
  try {
    PeerApi api;
    if (std::string problem = open_api(api); !problem.empty()) return "peer copies: " + problem;
    int measured = 0;
    std::string failures;
    for (GpuLink& link : links) {
      if (!link.peer_access) continue;
      const std::string problem = measure_pair(api, link, block_bytes, budget_seconds / static_cast<double>(links.size()));
      if (problem.empty()) ++measured;
      else failures += "; " + std::to_string(link.a) + "->" + std::to_string(link.b) + ": " + problem;
    }
    return "peer copies: " + std::to_string(measured) + " of " + std::to_string(links.size()) + " pairs measured" +
           " (pairs without peer access are not copied)" + failures;
  } catch (const std::exception& error) {
    return std::string("peer copies failed (") + error.what() + ")";
  }
}

}  // namespace coli::probe
