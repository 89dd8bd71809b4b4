#include "gpu/nvml_probe.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "coli/base/dl_symbol.h"

namespace coli::probe {
namespace {

// The few NVML declarations coli needs, from NVIDIA's NVML API reference
// (nvml.h is not needed to build). Handles are opaque pointers; results,
// enable states and topology levels are stable enum numbers.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kNvLinkMaxLinks = 18;    // NVML_NVLINK_MAX_LINKS
constexpr unsigned kUuidBufferSize = 96;    // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct nvmlPciInfo_t {                      // nvmlPciInfo_st (the _v3 / _v2 functions' layout)
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};

struct NvmlApi {
  nvmlReturn_t (*nvmlInit)() = nullptr;
  nvmlReturn_t (*nvmlShutdown)() = nullptr;
  const char* (*nvmlErrorString)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetCount)(unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetHandleByIndex)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  // optional: a missing one leaves its facts unknown
  nvmlReturn_t (*nvmlDeviceGetMaxPcieLinkGeneration)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetMaxPcieLinkWidth)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetTopologyCommonAncestor)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetNvLinkState)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetNvLinkVersion)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
  nvmlReturn_t (*nvmlDeviceGetNvLinkRemotePciInfo)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
};

NvmlApi resolve_api(void* library) {
  NvmlApi api;
  resolve_symbol(library, api.nvmlInit, "nvmlInit_v2", "nvmlInit");
  resolve_symbol(library, api.nvmlShutdown, "nvmlShutdown");
  resolve_symbol(library, api.nvmlErrorString, "nvmlErrorString");
  resolve_symbol(library, api.nvmlDeviceGetCount, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  resolve_symbol(library, api.nvmlDeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  resolve_symbol(library, api.nvmlDeviceGetUUID, "nvmlDeviceGetUUID");
  resolve_symbol(library, api.nvmlDeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2");
  resolve_symbol(library, api.nvmlDeviceGetMaxPcieLinkGeneration, "nvmlDeviceGetMaxPcieLinkGeneration");
  resolve_symbol(library, api.nvmlDeviceGetMaxPcieLinkWidth, "nvmlDeviceGetMaxPcieLinkWidth");
  resolve_symbol(library, api.nvmlDeviceGetTopologyCommonAncestor, "nvmlDeviceGetTopologyCommonAncestor");
  resolve_symbol(library, api.nvmlDeviceGetNvLinkState, "nvmlDeviceGetNvLinkState");
  resolve_symbol(library, api.nvmlDeviceGetNvLinkVersion, "nvmlDeviceGetNvLinkVersion");
  resolve_symbol(library, api.nvmlDeviceGetNvLinkRemotePciInfo, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  return api;
}

const char* missing_required(const NvmlApi& api) {
  if (!api.nvmlInit) return "nvmlInit_v2";
  if (!api.nvmlShutdown) return "nvmlShutdown";
  if (!api.nvmlDeviceGetCount) return "nvmlDeviceGetCount_v2";
  if (!api.nvmlDeviceGetHandleByIndex) return "nvmlDeviceGetHandleByIndex_v2";
  if (!api.nvmlDeviceGetUUID) return "nvmlDeviceGetUUID";
  if (!api.nvmlDeviceGetPciInfo) return "nvmlDeviceGetPciInfo_v3";
  return nullptr;
}

std::string error_text(const NvmlApi& api, nvmlReturn_t code) {
  const char* text = api.nvmlErrorString ? api.nvmlErrorString(code) : nullptr;
  return text ? text : "NVML error " + std::to_string(code);
}

std::string bus_id_of(const nvmlPciInfo_t& info) {
  if (info.busId[0] != '\0' && std::memchr(info.busId, '\0', sizeof info.busId)) return info.busId;
  char text[32];
  std::snprintf(text, sizeof text, "%08x:%02x:%02x.0", info.domain, info.bus, info.device);
  return text;
}

void read_nvlinks(const NvmlApi& api, nvmlDevice_t handle, NvmlDeviceReading& reading) {
  if (!api.nvmlDeviceGetNvLinkState || !api.nvmlDeviceGetNvLinkRemotePciInfo) return;
  for (unsigned link = 0; link < kNvLinkMaxLinks; ++link) {
    int active = 0;
    if (api.nvmlDeviceGetNvLinkState(handle, link, &active) != kNvmlSuccess || active != 1) continue;
    nvmlPciInfo_t remote{};
    if (api.nvmlDeviceGetNvLinkRemotePciInfo(handle, link, &remote) != kNvmlSuccess) {
      reading.notes.push_back("NVLink " + std::to_string(link) + " is active but its remote is unknown");
      continue;
    }
    reading.nvlink_remotes.push_back(bus_id_of(remote));
    unsigned version = 0;
    if (reading.nvlink_version == 0 && api.nvmlDeviceGetNvLinkVersion &&
        api.nvmlDeviceGetNvLinkVersion(handle, link, &version) == kNvmlSuccess) {
      reading.nvlink_version = static_cast<int>(version);
    }
  }
}

NvmlDeviceReading read_device(const NvmlApi& api, nvmlDevice_t handle) {
  NvmlDeviceReading reading;
  char uuid[kUuidBufferSize] = {};
  if (const nvmlReturn_t r = api.nvmlDeviceGetUUID(handle, uuid, sizeof uuid); r == kNvmlSuccess) {
    reading.uuid = uuid;
  } else {
    reading.notes.push_back("nvmlDeviceGetUUID: " + error_text(api, r));
  }
  nvmlPciInfo_t pci{};
  if (const nvmlReturn_t r = api.nvmlDeviceGetPciInfo(handle, &pci); r == kNvmlSuccess) {
    reading.pci_bus_id = bus_id_of(pci);
  } else {
    reading.notes.push_back("nvmlDeviceGetPciInfo_v3: " + error_text(api, r));
  }
  unsigned value = 0;
  if (api.nvmlDeviceGetMaxPcieLinkGeneration && api.nvmlDeviceGetMaxPcieLinkGeneration(handle, &value) == kNvmlSuccess) {
    reading.max_pcie_generation = static_cast<int>(value);
  }
  if (api.nvmlDeviceGetMaxPcieLinkWidth && api.nvmlDeviceGetMaxPcieLinkWidth(handle, &value) == kNvmlSuccess) {
    reading.max_pcie_width = static_cast<int>(value);
  }
  if (reading.max_pcie_generation == 0 || reading.max_pcie_width == 0) {
    reading.notes.push_back("maximum PCIe link generation or width not read");
  }
  read_nvlinks(api, handle, reading);
  return reading;
}

NvmlReadings read_with(const NvmlApi& api, const std::string& library) {
  NvmlReadings out;
  if (const char* missing = missing_required(api)) {
    out.status = "NVML unusable (" + library + " lacks " + missing + ")";
    return out;
  }
  if (const nvmlReturn_t r = api.nvmlInit(); r != kNvmlSuccess) {
    out.status = "no NVML (nvmlInit_v2: " + error_text(api, r) + ")";
    return out;
  }
  unsigned count = 0;
  if (const nvmlReturn_t r = api.nvmlDeviceGetCount(&count); r != kNvmlSuccess || count == 0) {
    out.status = "no NVML device (nvmlDeviceGetCount_v2: " + (r != kNvmlSuccess ? error_text(api, r) : "0") + ")";
    api.nvmlShutdown();
    return out;
  }
  std::vector<nvmlDevice_t> handles(count, nullptr);
  for (unsigned i = 0; i < count; ++i) {
    NvmlDeviceReading reading;
    if (const nvmlReturn_t r = api.nvmlDeviceGetHandleByIndex(i, &handles[i]); r != kNvmlSuccess) {
      reading.notes.push_back("nvmlDeviceGetHandleByIndex_v2: " + error_text(api, r));
      handles[i] = nullptr;
    } else {
      reading = read_device(api, handles[i]);
    }
    out.devices.push_back(std::move(reading));
  }
  for (unsigned i = 0; i < count; ++i) {
    for (unsigned j = i + 1; j < count; ++j) {
      int level = -1;
      if (!handles[i] || !handles[j] || !api.nvmlDeviceGetTopologyCommonAncestor ||
          api.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j], &level) != kNvmlSuccess) {
        level = -1;
      }
      out.pairs.push_back({static_cast<int>(i), static_cast<int>(j), level});
    }
  }
  api.nvmlShutdown();
  return out;
}

}  // namespace

NvmlReadings read_nvml() {
  try {
    const char* override_path = std::getenv("COLI_NVML_LIBRARY");
    const std::string name = override_path && *override_path ? override_path : "libnvidia-ml.so.1";
    void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* reason = ::dlerror();
      const bool absent = !reason || std::strstr(reason, "No such file") || std::strstr(reason, "cannot open");
      NvmlReadings out;
      out.status = "no NVML (" + name + (absent ? " not found)" : " could not be loaded: " + std::string(reason) + ")");
      return out;
    }
    // Kept open, like the CUDA driver: NVML's threads may outlive nvmlShutdown.
    return read_with(resolve_api(handle), name);
  } catch (const std::exception& error) {
    NvmlReadings out;
    out.status = std::string("NVML probe failed (") + error.what() + ")";
    return out;
  }
}

}  // namespace coli::probe
