// CUDA facts through the driver API, opened at run time (dlopen
// "libcuda.so.1", or $COLI_CUDA_LIBRARY), so coli needs neither the CUDA
// toolkit to build nor a driver to start. The driver's raw answers pass
// through cuda_device_from_attributes, which distrusts implausible numbers.
#pragma once


#include <cstdint>
#include <string>
#include <vector>

#include "coli/base/dl_symbol.h"  // resolve_symbol, dlopen
#include "coli/probe/device_profile.h"

namespace coli::probe {

// The driver API's types the probe's CUDA files use, from the CUDA Driver API
// reference (cuda.h itself is not needed to build): CUresult and CUdevice are
// ints, a context is an opaque pointer, a device pointer 64 bits.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;
inline constexpr CUresult kCudaSuccess = 0;

struct CudaProbeResult {
  std::string status;  // "1 device", "no CUDA driver (...)", "no CUDA device (cuInit: ...)"
  std::vector<CudaDevice> devices;
};

// cuInit, then every device's identity, shared-memory limits, L2 and memory
// (free memory read in the primary context). Never throws; every failure
// becomes `status` with no devices, or a note on the device concerned.
CudaProbeResult probe_cuda();

// What the driver reported for one device, unchecked. Attributes are ints in
// the driver API; they are widened here so tests can feed any value.
struct CudaRawAttributes {
  int ordinal = 0;
  std::string name;
  std::string uuid;                       // 32 hex digits, "" when unavailable
  std::int64_t compute_capability_major = 0;
  std::int64_t compute_capability_minor = 0;
  std::int64_t multiprocessor_count = 0;
  std::int64_t shared_memory_per_block = 0;
  std::int64_t shared_memory_per_block_optin = 0;
  std::int64_t shared_memory_per_multiprocessor = 0;
  std::int64_t l2_cache_size = 0;
  std::uint64_t total_memory_bytes = 0;
  std::uint64_t free_memory_bytes = 0;
  std::int64_t driver_version = 0;
  std::vector<std::string> notes;         // what the probe itself could not read
};

// Checks and converts. Rules, each recorded in `notes` when it fires:
// - shared memory per block outside (0, 1 MiB]: 48 KiB, CUDA's default
//   per-block limit on every architecture since Fermi;
// - opt-in outside (0, 1 MiB] or below the default: the default (no opt-in);
// - per-SM outside (0, 1 MiB] or below the default: the opt-in value;
//   per-SM below the opt-in: the opt-in is lowered to it (a block must fit);
// - negative or zero counts, capabilities, L2, driver version: 0 (unknown);
// - free memory above total: total.
CudaDevice cuda_device_from_attributes(const CudaRawAttributes& raw);

// The CUDA driver library: $COLI_CUDA_LIBRARY, else "libcuda.so.1". Never
// dlclose'd: after cuInit the driver runs threads and exit handlers from
// it, and unloading it under them crashes at exit. `handle` null: `status`
// says why ("no CUDA driver (libcuda.so.1 not found)").
struct CudaDriverLibrary {
  void* handle = nullptr;
  std::string name;
  std::string status;
};
CudaDriverLibrary open_cuda_driver();

// "CUDA_ERROR_NO_DEVICE" for the common driver errors, else "CUDA error <n>".
std::string cuda_error_name(int code);

}  // namespace coli::probe
