// Peer-to-peer facts and copies between CUDA devices through the driver API
// (opened at run time like cuda_probe): cuDeviceCanAccessPeer both ways for
// every pair (a fact, cheap) and, in full probes only, a timed device-to-device
// copy a -> b (cuMemcpyPeer of a large block, median of a few).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "coli/probe/device_profile.h"

namespace coli::probe {

// Sets peer_access of each link (both directions allowed). Returns "" or why
// nothing could be asked (no driver, an entry point missing).
std::string read_peer_access(std::vector<GpuLink>& links);

// Measures measured_gbs of each link with peer access, `block_bytes` a copy,
// the budget shared between pairs; source becomes "<source>+measured".
// Returns a status line ("peer copies: 28 of 28 pairs measured", or why not).
std::string measure_peer_copies(std::vector<GpuLink>& links, std::size_t block_bytes, double budget_seconds);

}  // namespace coli::probe
