#include "gpu/cuda_probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace coli::probe {
namespace {

// The rest of the driver API declarations the facts need (the types are in
// cuda_probe.h); attributes are stable enum numbers.
struct CUuuid {
  unsigned char bytes[16];
};

enum DeviceAttribute : int {
  kMaxSharedMemoryPerBlock = 8,
  kMultiprocessorCount = 16,
  kL2CacheSize = 38,
  kComputeCapabilityMajor = 75,
  kComputeCapabilityMinor = 76,
  kMaxSharedMemoryPerMultiprocessor = 81,
  kMaxSharedMemoryPerBlockOptin = 97,
};

constexpr std::int64_t kMaxPlausibleSharedMemory = 1 << 20;  // no GPU offers 1 MiB per block or SM
constexpr std::int64_t kDefaultSharedMemoryPerBlock = 48 << 10;

// Entry points, resolved by their versioned symbol names (what cuda.h maps
// the plain names to since CUDA 11), falling back to the original ones.
struct DriverApi {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(std::size_t*, CUdevice) = nullptr;
  // optional
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuMemGetInfo)(std::size_t*, std::size_t*) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
};

DriverApi resolve_api(void* library) {
  DriverApi api;
  resolve_symbol(library, api.cuInit, "cuInit");
  resolve_symbol(library, api.cuDriverGetVersion, "cuDriverGetVersion");
  resolve_symbol(library, api.cuDeviceGetCount, "cuDeviceGetCount");
  resolve_symbol(library, api.cuDeviceGet, "cuDeviceGet");
  resolve_symbol(library, api.cuDeviceGetName, "cuDeviceGetName");
  resolve_symbol(library, api.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  resolve_symbol(library, api.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  resolve_symbol(library, api.cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
  resolve_symbol(library, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolve_symbol(library, api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
  resolve_symbol(library, api.cuCtxGetCurrent, "cuCtxGetCurrent");
  resolve_symbol(library, api.cuCtxSetCurrent, "cuCtxSetCurrent");
  resolve_symbol(library, api.cuMemGetInfo, "cuMemGetInfo_v2");
  resolve_symbol(library, api.cuGetErrorName, "cuGetErrorName");
  return api;
}

// The first required entry point the library lacks, or nullptr.
const char* missing_required(const DriverApi& api) {
  if (!api.cuInit) return "cuInit";
  if (!api.cuDriverGetVersion) return "cuDriverGetVersion";
  if (!api.cuDeviceGetCount) return "cuDeviceGetCount";
  if (!api.cuDeviceGet) return "cuDeviceGet";
  if (!api.cuDeviceGetName) return "cuDeviceGetName";
  if (!api.cuDeviceGetAttribute) return "cuDeviceGetAttribute";
  if (!api.cuDeviceTotalMem) return "cuDeviceTotalMem_v2";
  return nullptr;
}

std::string error_text(const DriverApi& api, CUresult code) {
  const char* name = nullptr;
  if (api.cuGetErrorName && api.cuGetErrorName(code, &name) == kCudaSuccess && name) return name;
  return cuda_error_name(code);
}

std::string hex(const unsigned char* bytes, std::size_t count) {
  std::string text;
  char digits[3];
  for (std::size_t i = 0; i < count; ++i) {
    std::snprintf(digits, sizeof digits, "%02x", bytes[i]);
    text += digits;
  }
  return text;
}

// Free memory needs a context: borrow the primary one and give back the
// caller's current context afterwards.
void read_free_memory(const DriverApi& api, CUdevice device, CudaRawAttributes& raw) {
  if (!api.cuDevicePrimaryCtxRetain || !api.cuDevicePrimaryCtxRelease || !api.cuCtxSetCurrent || !api.cuMemGetInfo) {
    raw.notes.push_back("free memory not read (the driver lacks the primary-context functions); free_memory_bytes = 0");
    return;
  }
  CUcontext previous = nullptr;
  if (api.cuCtxGetCurrent) api.cuCtxGetCurrent(&previous);
  CUcontext context = nullptr;
  CUresult result = api.cuDevicePrimaryCtxRetain(&context, device);
  if (result != kCudaSuccess) {
    raw.notes.push_back("free memory not read (cuDevicePrimaryCtxRetain: " + error_text(api, result) +
                        "); free_memory_bytes = 0");
    return;
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  result = api.cuCtxSetCurrent(context);
  if (result == kCudaSuccess) result = api.cuMemGetInfo(&free_bytes, &total_bytes);
  if (result == kCudaSuccess) {
    raw.free_memory_bytes = free_bytes;
  } else {
    raw.notes.push_back("free memory not read (cuMemGetInfo_v2: " + error_text(api, result) + "); free_memory_bytes = 0");
  }
  api.cuCtxSetCurrent(previous);
  api.cuDevicePrimaryCtxRelease(device);
}

std::int64_t attribute(const DriverApi& api, CUdevice device, DeviceAttribute which, CudaRawAttributes& raw) {
  int value = 0;
  const CUresult result = api.cuDeviceGetAttribute(&value, which, device);
  if (result == kCudaSuccess) return value;
  raw.notes.push_back("cuDeviceGetAttribute(" + std::to_string(which) + "): " + error_text(api, result));
  return 0;
}

CudaRawAttributes read_device(const DriverApi& api, int ordinal, int driver_version) {
  CudaRawAttributes raw;
  raw.ordinal = ordinal;
  raw.driver_version = driver_version;
  CUdevice device = 0;
  if (const CUresult result = api.cuDeviceGet(&device, ordinal); result != kCudaSuccess) {
    raw.notes.push_back("cuDeviceGet: " + error_text(api, result));
    return raw;
  }
  char name[256] = {};
  if (api.cuDeviceGetName(name, sizeof name - 1, device) == kCudaSuccess) raw.name = name;
  CUuuid uuid{};
  if (api.cuDeviceGetUuid && api.cuDeviceGetUuid(&uuid, device) == kCudaSuccess) {
    raw.uuid = hex(uuid.bytes, sizeof uuid.bytes);
  }
  raw.compute_capability_major = attribute(api, device, kComputeCapabilityMajor, raw);
  raw.compute_capability_minor = attribute(api, device, kComputeCapabilityMinor, raw);
  raw.multiprocessor_count = attribute(api, device, kMultiprocessorCount, raw);
  raw.shared_memory_per_block = attribute(api, device, kMaxSharedMemoryPerBlock, raw);
  raw.shared_memory_per_block_optin = attribute(api, device, kMaxSharedMemoryPerBlockOptin, raw);
  raw.shared_memory_per_multiprocessor = attribute(api, device, kMaxSharedMemoryPerMultiprocessor, raw);
  raw.l2_cache_size = attribute(api, device, kL2CacheSize, raw);
  std::size_t total = 0;
  if (const CUresult result = api.cuDeviceTotalMem(&total, device); result == kCudaSuccess) {
    raw.total_memory_bytes = total;
  } else {
    raw.notes.push_back("cuDeviceTotalMem_v2: " + error_text(api, result));
  }
  read_free_memory(api, device, raw);
  return raw;
}

std::string device_count_text(std::size_t count) {
  return std::to_string(count) + (count == 1 ? " device" : " devices");
}

CudaProbeResult probe_with(const DriverApi& api, const std::string& library) {
  if (const char* missing = missing_required(api)) {
    return {"CUDA driver unusable (" + library + " lacks " + missing + ")", {}};
  }
  if (const CUresult result = api.cuInit(0); result != kCudaSuccess) {
    return {"no CUDA device (cuInit: " + error_text(api, result) + ")", {}};
  }
  int driver_version = 0;
  api.cuDriverGetVersion(&driver_version);
  int count = 0;
  if (const CUresult result = api.cuDeviceGetCount(&count); result != kCudaSuccess) {
    return {"no CUDA device (cuDeviceGetCount: " + error_text(api, result) + ")", {}};
  }
  if (count <= 0) return {"no CUDA device (cuDeviceGetCount: 0)", {}};
  CudaProbeResult probe;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    probe.devices.push_back(cuda_device_from_attributes(read_device(api, ordinal, driver_version)));
  }
  probe.status = device_count_text(probe.devices.size());
  return probe;
}

// Collects the notes while cuda_device_from_attributes checks each field.
struct Checker {
  std::vector<std::string>& notes;
  void replace(const char* field, std::int64_t value, const std::string& why, const std::string& using_what) {
    notes.push_back(std::string(field) + " " + std::to_string(value) + " is not plausible" +
                    (why.empty() ? "" : " (" + why + ")") + "; using " + using_what);
  }
  // Counts and sizes that must be positive; 0 stands for unknown.
  std::int64_t positive(const char* field, std::int64_t value) {
    if (value > 0) return value;
    replace(field, value, "", "0 (unknown)");
    return 0;
  }
};

bool plausible_shared_memory(std::int64_t bytes) { return bytes > 0 && bytes <= kMaxPlausibleSharedMemory; }

}  // namespace

CudaDriverLibrary open_cuda_driver() {
  const char* override_path = std::getenv("COLI_CUDA_LIBRARY");
  CudaDriverLibrary library;
  library.name = override_path && *override_path ? override_path : "libcuda.so.1";
  library.handle = ::dlopen(library.name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library.handle) {
    const char* reason = ::dlerror();
    const bool absent = !reason || std::strstr(reason, "No such file") || std::strstr(reason, "cannot open");
    library.status = "no CUDA driver (" + library.name +
                     (absent ? " not found)" : " could not be loaded: " + std::string(reason) + ")");
  }
  return library;
}

CudaProbeResult probe_cuda() {
  try {
    const CudaDriverLibrary library = open_cuda_driver();
    if (!library.handle) return {library.status, {}};
    return probe_with(resolve_api(library.handle), library.name);
  } catch (const std::exception& error) {
    return {std::string("CUDA probe failed (") + error.what() + ")", {}};
  }
}

CudaDevice cuda_device_from_attributes(const CudaRawAttributes& raw) {
  CudaDevice device;
  device.ordinal = raw.ordinal;
  device.name = raw.name;
  device.uuid = raw.uuid;
  device.notes = raw.notes;
  Checker check{device.notes};
  if (device.name.empty()) device.notes.push_back("the driver gave no device name");
  device.compute_capability_major = static_cast<int>(check.positive("compute_capability_major", raw.compute_capability_major));
  if (raw.compute_capability_minor >= 0 && raw.compute_capability_minor < 100) {
    device.compute_capability_minor = static_cast<int>(raw.compute_capability_minor);
  } else {
    check.replace("compute_capability_minor", raw.compute_capability_minor, "", "0");
  }
  device.sm_count = static_cast<int>(check.positive("sm_count", std::min<std::int64_t>(raw.multiprocessor_count, 1 << 20)));

  std::int64_t per_block = raw.shared_memory_per_block;
  if (!plausible_shared_memory(per_block)) {
    per_block = kDefaultSharedMemoryPerBlock;
    check.replace("shared_memory_per_block", raw.shared_memory_per_block, "",
                  "49152, CUDA's default per-block limit on every architecture");
  }
  std::int64_t optin = raw.shared_memory_per_block_optin;
  if (!plausible_shared_memory(optin) || optin < per_block) {
    optin = per_block;
    check.replace("shared_memory_per_block_optin", raw.shared_memory_per_block_optin,
                  plausible_shared_memory(raw.shared_memory_per_block_optin) ? "below shared_memory_per_block" : "",
                  "shared_memory_per_block " + std::to_string(per_block));
  }
  std::int64_t per_sm = raw.shared_memory_per_multiprocessor;
  if (!plausible_shared_memory(per_sm) || per_sm < per_block) {
    per_sm = optin;
    check.replace("shared_memory_per_sm", raw.shared_memory_per_multiprocessor,
                  plausible_shared_memory(raw.shared_memory_per_multiprocessor) ? "below shared_memory_per_block" : "",
                  "shared_memory_per_block_optin " + std::to_string(optin));
  } else if (per_sm < optin) {
    check.replace("shared_memory_per_block_optin", optin, "above shared_memory_per_sm",
                  "shared_memory_per_sm " + std::to_string(per_sm));
    optin = per_sm;  // a block cannot use more than one SM holds
  }
  device.shared_memory_per_block = static_cast<std::uint32_t>(per_block);
  device.shared_memory_per_block_optin = static_cast<std::uint32_t>(optin);
  device.shared_memory_per_sm = static_cast<std::uint32_t>(per_sm);

  device.l2_bytes = static_cast<std::uint64_t>(check.positive("l2_bytes", raw.l2_cache_size));
  device.total_memory_bytes = raw.total_memory_bytes;
  if (raw.total_memory_bytes == 0) device.notes.push_back("total_memory_bytes 0: the driver reported no memory");
  device.free_memory_bytes = raw.free_memory_bytes;
  if (raw.free_memory_bytes > raw.total_memory_bytes) {
    device.free_memory_bytes = raw.total_memory_bytes;
    device.notes.push_back("free_memory_bytes " + std::to_string(raw.free_memory_bytes) +
                           " exceeds total_memory_bytes; using the total");
  }
  device.driver_version = static_cast<int>(check.positive("driver_version", std::min<std::int64_t>(raw.driver_version, 1 << 30)));
  return device;
}

std::string cuda_error_name(int code) {
  switch (code) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 102: return "CUDA_ERROR_DEVICE_NOT_LICENSED";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA error " + std::to_string(code);
  }
}

}  // namespace coli::probe
