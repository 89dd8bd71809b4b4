// The host side of cuda_kernels.h: device memory, errors as Status naming the
// CUDA call, and every launch's arguments checked before a kernel sees them.
#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "cuda/cuda_kernels.h"
#include "cuda/kernel_launch.h"

namespace coli::kernels::cuda {
namespace {

std::string describe(cudaError_t code) {
  return std::string(cudaGetErrorName(code)) + " (" + cudaGetErrorString(code) + ")";
}

// Clears the runtime's last error too, so the next call starts clean.
Error cuda_error(const std::string& call, cudaError_t code) {
  cudaGetLastError();
  return make_error(call + " failed: " + describe(code));
}

std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace

CudaDeviceCount cuda_device_count() {
  int devices = 0;
  const cudaError_t code = cudaGetDeviceCount(&devices);
  if (code == cudaSuccess && devices > 0) return {devices, ""};
  if (code == cudaSuccess) return {0, "the CUDA driver reports no device"};
  cudaGetLastError();
  // The runtime says "driver version is insufficient" also when there is no
  // driver at all; the driver's version tells the two apart.
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::string reason = "cudaGetDeviceCount failed: " + describe(code);
  if (driver == 0) {
    reason += "; no CUDA driver is installed (libcuda.so.1 not found): install NVIDIA's driver to use the GPU";
  } else if (driver < runtime) {
    reason += "; the driver supports CUDA " + version_text(driver) + ", older than this build's runtime " +
              version_text(runtime) + ": update the driver";
  }
  return {0, reason};
}

Result<DeviceBuffer> DeviceBuffer::allocate(std::size_t bytes) {
  if (bytes == 0) return DeviceBuffer{};
  void* data = nullptr;
  const cudaError_t code = cudaMalloc(&data, bytes);
  if (code != cudaSuccess) return cuda_error("cudaMalloc(" + std::to_string(bytes) + " bytes)", code);
  return DeviceBuffer(data, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);  // no error to report from here; a failed free leaks, never crashes
}

namespace {
Status check_range(const char* what, std::size_t offset, std::size_t bytes, std::size_t buffer_bytes) {
  if (offset <= buffer_bytes && bytes <= buffer_bytes - offset) return Ok{};
  return make_error(std::string(what) + ": " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                    " do not fit the " + std::to_string(buffer_bytes) + "-byte device buffer");
}
}  // namespace

Status DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  if (Status fits = check_range("DeviceBuffer::upload", offset, bytes, bytes_); !fits) return fits;
  if (bytes == 0) return Ok{};
  const cudaError_t code = cudaMemcpy(static_cast<char*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice);
  if (code != cudaSuccess) return cuda_error("cudaMemcpy(host to device, " + std::to_string(bytes) + " bytes)", code);
  return Ok{};
}

Status DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (Status fits = check_range("DeviceBuffer::download", offset, bytes, bytes_); !fits) return fits;
  if (bytes == 0) return Ok{};
  const cudaError_t code = cudaMemcpy(host, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost);
  if (code != cudaSuccess) return cuda_error("cudaMemcpy(device to host, " + std::to_string(bytes) + " bytes)", code);
  return Ok{};
}

Status detail::launch_status(const std::string& call, int code) {
  if (code == cudaSuccess) return Ok{};
  return cuda_error(call, static_cast<cudaError_t>(code));
}

Status synchronize() {
  const cudaError_t code = cudaDeviceSynchronize();
  if (code != cudaSuccess) return cuda_error("cudaDeviceSynchronize", code);
  return Ok{};
}

}  // namespace coli::kernels::cuda
