// CUDA runtime calls as Status, and page-locked host memory: what the
// decoder's asynchronous copies read and write (cudaMemcpyAsync from or to
// pageable memory waits for the stream, so nothing would overlap).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "coli/base/result.h"

namespace coli::cuda {

inline Status cuda_call(const std::string& call, cudaError_t code) {
  if (code == cudaSuccess) return Ok{};
  cudaGetLastError();  // clear it, so the next call starts clean
  return make_error(call + " failed: " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")");
}

// cudaMallocHost'd bytes, owned.
class Pinned {
 public:
  Pinned() = default;
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  ~Pinned() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  Status allocate(std::size_t bytes) {
    bytes_ = bytes;
    if (bytes == 0) return Ok{};
    return cuda_call("cudaMallocHost(" + std::to_string(bytes) + " bytes)", cudaMallocHost(&data_, bytes));
  }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace coli::cuda
