// NVML (the NVIDIA management library) opened at run time: dlopen
// "libnvidia-ml.so.1", or $COLI_NVML_LIBRARY, so coli neither links against it
// nor needs it to start. Reads what gpu_topology.h turns into facts.
#pragma once

#include "gpu/gpu_topology.h"

namespace coli::probe {

// Every NVML device's UUID, bus id, maximum PCIe link, active NVLinks with
// their remotes, and the topology level of every pair. Never throws; no
// library, no init or no device becomes `status` ("no NVML (libnvidia-ml.so.1
// not found)"), a function the driver lacks a note on the device.
NvmlReadings read_nvml();

}  // namespace coli::probe
