#include "coli/backend/backend_memory.h"

#include "cuda/cuda_layout.h"                // kUploadChunkBytes (header only)
#include "vulkan/decoder/decoder_layout.h"  // kDecoderStagingBytes (header only)

namespace coli::backend {
using vulkan::kDecoderStagingBytes;
}  // namespace coli::backend

namespace coli::backend {
namespace {
constexpr std::uint64_t kMiB = 1024 * 1024;
}  // namespace

BackendMemory cpu_backend_memory(const BackendProps& props) {
  BackendMemory b;
  b.name = props.name.empty() ? "cpu" : props.name;
  b.engine_runs_experts = true;
  b.vram_bytes_per_record_byte = 1;  // a slot holds the packed record, in RAM
  b.staging_slots = 0;               // reads land in the slots themselves
  b.driver_host_basis = "no driver: the CPU backend is the engine's own code";
  return b;
}

BackendMemory vulkan_backend_memory([[maybe_unused]] const BackendProps& props) {
  // The measured driver shares are matched to the device the planner picks
  // (by vendor and type), so nothing here reads `props` yet.
  BackendMemory b;
  b.name = "vulkan";
  b.engine_runs_experts = true;  // engine/vulkan/decoder: the whole decoder, experts outside VRAM on the CPU
  b.whole_decoder = true;
  b.vram_bytes_per_record_byte = 1;  // records uploaded as the container holds them
  b.staging_slots = 0;
  b.staging_bytes = kDecoderStagingBytes;
  b.driver_host_bytes = 256 * kMiB;
  b.driver_host_basis = "Vulkan driver mapped into the process: 256 MiB assumed for a driver no run has measured";
  // Peak RSS of coli run --plan less every other planned host line.
  b.measured_driver_shares = {
      {0, "cpu", 44 * kMiB, "lavapipe (LLVM) mapped into the process: 44 MiB measured"},
      {0x10de, "", 96 * kMiB,
       "NVIDIA Vulkan driver: 86-92 MiB measured on an H200 (driver 580, docs/results/issue11), rounded up"}};
  return b;
}


BackendMemory cuda_backend_memory([[maybe_unused]] const BackendProps& props) {
  BackendMemory b;
  b.name = "cuda";
#ifdef COLI_CUDA_DECODER_BUILT
  b.engine_runs_experts = true;  // engine/cuda: the whole decoder, experts outside VRAM on the CPU
  b.engine_runs_expert_parallel = true;  // engine/cuda/expert_parallel_decoder: one decoder per GPU, NCCL between
#endif
  b.whole_decoder = true;
  b.vram_bytes_per_record_byte = 1;  // records copied up as the container holds them
  b.staging_slots = 0;
  b.staging_bytes = cuda::kUploadChunkBytes;  // the load's read buffer; the pinned buffers are the decoder's layout
  // A 512-token prompt in one batch (llama.cpp's -ub default too): each
  // expert's ~64 tokens (top-8 of 64) fill one 64-row GEMM tile, and every
  // expert's weights are read once per prompt.
  b.prefill_batch_tokens = 512;
  b.driver_host_bytes = 96 * kMiB;
  b.driver_host_basis =
      "CUDA driver and runtime in the process: ~91 MiB measured on an H200 (driver 580, CUDA 13; coli-speed-bench "
      "--backend cuda peak RSS 372.9 MiB less the 196.5 MiB host embedding table, the load's ~61 MiB upload chunk, "
      "4.3 MiB pinned buffers and the 20 MiB process base; docs/results/issue14/session8), rounded up";
  return b;
}

}  // namespace coli::backend
