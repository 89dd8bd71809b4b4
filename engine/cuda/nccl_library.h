// NCCL, opened at run time (issue 18): Debian 12 packages no NCCL, and every
// binary must start on a machine without it, so the library is dlopen'ed
// ($COLI_NCCL_LIBRARY, else libnccl.so.2: pip's nvidia-nccl-cu12/cu13, as
// PyTorch installs it, ships one) and only the calls the expert-parallel
// decoder makes are declared here, with nccl.h's ABI (stable across 2.x).
// Plain C++ (streams are void*): tests open it without a device.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "coli/base/result.h"

namespace coli::cuda {

struct NcclCommunicator;  // nccl.h's struct ncclComm, opaque
using NcclComm = NcclCommunicator*;

// NCCL captured into CUDA graphs needs 2.9.6 or later.
inline constexpr int kNcclMinVersion = 20906;

class NcclLibrary {
 public:
  // $COLI_NCCL_LIBRARY or libnccl.so.2. Errors say which file, what is
  // missing (the file, a symbol, a new enough version) and what to do.
  static Result<std::shared_ptr<const NcclLibrary>> open();
  static Result<std::shared_ptr<const NcclLibrary>> open(const std::string& path);
  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  const std::string& path() const { return path_; }
  int version() const { return version_; }  // NCCL_VERSION_CODE: 22703 = 2.27.3
  std::string version_text() const;

  // One communicator per device, rank i on devices[i], from this thread
  // (ncclCommInitAll); every rank of it must take part in each collective.
  Result<std::vector<NcclComm>> init_all(std::span<const int> devices) const;
  // data[0..count) summed across the communicator's ranks in place, queued
  // on `stream` (a cudaStream_t; may be capturing a graph).
  Status all_reduce_sum(float* data, std::size_t count, NcclComm comm, void* stream) const;
  // An error raised in the communicator's kernels or proxy after the call returned.
  Status async_error(NcclComm comm) const;
  // Stops the communicator's collectives in flight (the ranks waiting in
  // one return) and frees it; after a rank failed.
  void abort(NcclComm comm) const;
  void destroy(NcclComm comm) const;

  struct Api;

 private:
  NcclLibrary() = default;
  Status call(const std::string& what, int result) const;
  void* handle_ = nullptr;
  std::string path_;
  int version_ = 0;
  std::unique_ptr<Api> api_;
};

}  // namespace coli::cuda
