#include "cuda/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "coli/base/dl_symbol.h"

namespace coli::cuda {

// nccl.h's declarations of what the decoder calls (ncclResult_t, the
// ncclDataType_t and ncclRedOp_t enums are ints there).
struct NcclLibrary::Api {
  int (*get_version)(int*) = nullptr;
  int (*comm_init_all)(NcclComm*, int, const int*) = nullptr;
  int (*all_reduce)(const void*, void*, std::size_t, int, int, NcclComm, void*) = nullptr;
  int (*comm_get_async_error)(NcclComm, int*) = nullptr;
  int (*comm_abort)(NcclComm) = nullptr;
  int (*comm_destroy)(NcclComm) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
};

namespace {

constexpr int kNcclSuccess = 0;
constexpr int kNcclInProgress = 7;  // non-blocking communicators only; ours block
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

constexpr const char* kWhatToDo =
    "set COLI_NCCL_LIBRARY to a libnccl.so.2 (pip's nvidia-nccl-cu12 or nvidia-nccl-cu13 ships one, "
    "under site-packages/nvidia/nccl/lib), or plan for one GPU";

}  // namespace

Result<std::shared_ptr<const NcclLibrary>> NcclLibrary::open() {
  const char* override_path = std::getenv("COLI_NCCL_LIBRARY");
  return open(override_path && *override_path ? override_path : "libnccl.so.2");
}

Result<std::shared_ptr<const NcclLibrary>> NcclLibrary::open(const std::string& path) {
  std::shared_ptr<NcclLibrary> lib(new NcclLibrary());
  lib->path_ = path;
  lib->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle_) {
    const char* reason = ::dlerror();
    const bool absent = !reason || std::strstr(reason, "No such file") || std::strstr(reason, "cannot open");
    return make_error("no NCCL (" + path + (absent ? " not found" : " could not be loaded: " + std::string(reason)) +
                      "): " + kWhatToDo);
  }
  lib->api_ = std::make_unique<Api>();
  Api& a = *lib->api_;
  for (auto [ok, name] : {std::pair{resolve_symbol(lib->handle_, a.get_version, "ncclGetVersion"), "ncclGetVersion"},
                          {resolve_symbol(lib->handle_, a.comm_init_all, "ncclCommInitAll"), "ncclCommInitAll"},
                          {resolve_symbol(lib->handle_, a.all_reduce, "ncclAllReduce"), "ncclAllReduce"},
                          {resolve_symbol(lib->handle_, a.comm_get_async_error, "ncclCommGetAsyncError"), "ncclCommGetAsyncError"},
                          {resolve_symbol(lib->handle_, a.comm_abort, "ncclCommAbort"), "ncclCommAbort"},
                          {resolve_symbol(lib->handle_, a.comm_destroy, "ncclCommDestroy"), "ncclCommDestroy"},
                          {resolve_symbol(lib->handle_, a.get_error_string, "ncclGetErrorString"), "ncclGetErrorString"}}) {
    if (!ok) return make_error(path + " is not NCCL 2 (it has no " + name + "): " + kWhatToDo);
  }
  if (Status s = lib->call("ncclGetVersion", a.get_version(&lib->version_)); !s) return s.error();
  if (lib->version_ < kNcclMinVersion) {
    return make_error(path + " is NCCL " + lib->version_text() +
                      "; the expert-parallel decoder captures its all-reduce in CUDA graphs, which needs 2.9.6 or later: " +
                      kWhatToDo);
  }
  return std::shared_ptr<const NcclLibrary>(std::move(lib));
}

NcclLibrary::~NcclLibrary() {
  if (handle_) ::dlclose(handle_);
}

std::string NcclLibrary::version_text() const {
  // NCCL_VERSION_CODE is major*10000 + minor*100 + patch since 2.9 (older: major*1000 + minor*100 + patch).
  const int major = version_ / 10000, minor = version_ / 100 % 100, patch = version_ % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

Status NcclLibrary::call(const std::string& what, int result) const {
  if (result == kNcclSuccess) return Ok{};
  const char* text = api_ && api_->get_error_string ? api_->get_error_string(result) : nullptr;
  return make_error(what + " failed: NCCL error " + std::to_string(result) + (text ? std::string(" (") + text + ")" : "") +
                    (result == kNcclInProgress ? " (a non-blocking communicator, which coli does not make)" : ""));
}

Result<std::vector<NcclComm>> NcclLibrary::init_all(std::span<const int> devices) const {
  std::vector<NcclComm> comms(devices.size(), nullptr);
  const Status s = call("ncclCommInitAll over " + std::to_string(devices.size()) + " GPU(s)",
                        api_->comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()));
  if (!s) return s.error();
  return comms;
}

Status NcclLibrary::all_reduce_sum(float* data, std::size_t count, NcclComm comm, void* stream) const {
  return call("ncclAllReduce (" + std::to_string(count) + " floats)",
              api_->all_reduce(data, data, count, kNcclFloat32, kNcclSum, comm, stream));
}

Status NcclLibrary::async_error(NcclComm comm) const {
  int pending = kNcclSuccess;
  if (Status s = call("ncclCommGetAsyncError", api_->comm_get_async_error(comm, &pending)); !s) return s;
  return call("an NCCL collective", pending);
}

void NcclLibrary::abort(NcclComm comm) const {
  if (comm) api_->comm_abort(comm);
}

void NcclLibrary::destroy(NcclComm comm) const {
  if (comm) api_->comm_destroy(comm);
}

}  // namespace coli::cuda
