// The CPU backend behind the seam: a batch of expert FFNs over slots it made
// equals the engine's old path (one expert at a time, each matrix through
// kernels/cpu or the exact reference) bit for bit, on fixture models
// converted to int4 and int8 experts; uploads and bad props are refused
// with messages that say why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <tuple>
#include <vector>

#include "coli/backend/backend.h"
#include "coli/container/container.h"
#include "coli/convert/convert.h"
#include "coli/forward/ops.h"
#include "cpu/gemv_cpu.h"
#include "reference/gemv_reference.h"

#include "engine_test_support.h"

namespace coli::backend {
namespace {

fs::path converted(const std::string& arch, WeightFormat format) { return converted_fixture(arch, format); }

// The engine's per-expert path before the seam: gate and up, silu(gate) * up,
// down, each matrix on its own.
void old_ffn(const container::ExpertLayout& layout, const std::byte* record, bool exact,
             const kernels::cpu::GemvOptions& gemv, std::span<const float> x, std::span<float> y) {
  auto project = [&](const container::ExpertPart& part, std::span<const float> in, std::span<float> out) {
    const auto* weights = record + part.weights_offset;
    const auto* scales = record + part.scales_offset;
    const int rows = static_cast<int>(part.rows), cols = static_cast<int>(part.cols);
    const kernels::cpu::Q4G64View q4{reinterpret_cast<const std::uint8_t*>(weights),
                                     reinterpret_cast<const std::uint16_t*>(scales), rows, cols};
    const kernels::cpu::Q8RowView q8{reinterpret_cast<const std::int8_t*>(weights),
                                     reinterpret_cast<const float*>(scales), rows, cols};
    if (layout.format == WeightFormat::q4_g64 && exact) kernels::gemv_reference_q4(q4.nibbles, q4.scales, rows, cols, in, out);
    else if (layout.format == WeightFormat::q4_g64) kernels::cpu::gemv(q4, in, out, gemv);
    else if (exact) kernels::gemv_reference_q8(q8.weights, q8.scales, rows, cols, in, out);
    else kernels::cpu::gemv(q8, in, out, gemv);
  };
  std::vector<float> gate(layout.parts[0].rows), up(layout.parts[1].rows);
  project(layout.parts[0], x, gate);
  project(layout.parts[1], x, up);
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = forward::silu(gate[i]) * up[i];
  project(layout.parts[2], gate, y);
}

class CpuBackendExperts : public testing::TestWithParam<std::tuple<std::string, WeightFormat, std::string>> {};

TEST_P(CpuBackendExperts, BatchEqualsTheOldPerExpertPathBitForBit) {
  const auto& [arch, format, kernel] = GetParam();
  auto reader = container::ContainerReader::open(converted(arch, format));
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  const container::ExpertLayout& layout = reader->index().experts;
  auto backend = create_backend({.kind = BackendKind::cpu, .name = "cpu", .cpu_kernel = kernel, .threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto storage = (*backend)->create_slot_storage(layout.experts, layout.record_stride, container::kAlignment);
  ASSERT_TRUE(storage.ok()) << storage.error().message;
  EXPECT_EQ((*backend)->memory().slot_bytes_allocated, layout.experts * layout.record_stride);
  // Expert e of the last MoE layer goes into slot experts-1-e: slots are not expert ids.
  const int experts = static_cast<int>(layout.experts);
  std::vector<std::byte> record(layout.record_bytes);
  for (int e = 0; e < experts; ++e) {
    ASSERT_TRUE(reader->read(layout.record_offset(layout.layers - 1, static_cast<std::uint32_t>(e)), record).ok());
    ASSERT_TRUE((*backend)->upload(**storage, experts - 1 - e, record).ok());
  }
  const std::size_t in_width = layout.parts[0].cols, out_width = layout.parts[2].rows;
  const int tokens = 3;
  std::vector<float> in(tokens * in_width);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  std::vector<ExpertRow> rows;
  for (int t = 0; t < tokens; ++t) {
    for (int e = t; e < experts; e += 2) rows.push_back({experts - 1 - e, t, static_cast<int>(rows.size())});
  }
  std::vector<float> out(rows.size() * out_width);
  (*backend)->expert_ffn_batch({storage->get(), &layout, in, out, rows});

  const std::string variant = (*backend)->props().cpu_kernel;
  auto parsed = kernels::cpu::parse_variant(kernel == "exact" ? "scalar" : variant);
  ASSERT_TRUE(parsed.ok());
  const kernels::cpu::GemvOptions gemv{*parsed, 2};
  std::vector<float> expected(out_width);
  for (const ExpertRow& row : rows) {
    const std::byte* slot = (*storage)->host_slot(static_cast<std::size_t>(row.slot)).data();
    old_ffn(layout, slot, kernel == "exact", gemv, std::span(in).subspan(row.input_row * in_width, in_width), expected);
    const auto actual = std::span(out).subspan(static_cast<std::size_t>(row.output_row) * out_width, out_width);
    ASSERT_EQ(std::memcmp(actual.data(), expected.data(), out_width * sizeof(float)), 0)
        << arch << " slot " << row.slot << " token " << row.input_row;
  }
  // One row at a time gives the same bits as the whole batch.
  for (const ExpertRow& row : rows) {
    std::vector<float> single(out_width);
    const ExpertRow alone{row.slot, row.input_row, 0};
    (*backend)->expert_ffn_batch({storage->get(), &layout, in, single, std::span(&alone, 1)});
    ASSERT_EQ(std::memcmp(single.data(), out.data() + static_cast<std::size_t>(row.output_row) * out_width,
                          out_width * sizeof(float)), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    FixtureModels, CpuBackendExperts,
    testing::Combine(testing::Values("qwen3_moe", "mixtral"),
                     testing::Values(WeightFormat::q4_g64, WeightFormat::q8_row),
                     testing::Values("scalar", "exact", "")));

TEST(CpuBackend, PropsSayWhatRuns) {
  auto backend = create_backend({.kind = BackendKind::cpu, .name = "cpu", .cpu_kernel = "", .threads = 3});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  EXPECT_EQ((*backend)->props().threads, 3);
  EXPECT_EQ((*backend)->props().cpu_kernel, kernels::cpu::variant_name(*kernels::cpu::selected_variant()));
  EXPECT_TRUE((*backend)->memory().engine_runs_experts);
  EXPECT_EQ((*backend)->memory().staging_slots, 0);
}

TEST(CpuBackend, RefusesWhatItCannotDo) {
  auto unknown = create_backend({.kind = BackendKind::cpu, .name = "cpu", .cpu_kernel = "avx9000"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("avx9000"), std::string::npos) << unknown.error().message;
  auto vulkan = create_backend({.kind = BackendKind::vulkan, .name = "NVIDIA H200"});
  ASSERT_FALSE(vulkan.ok());
  EXPECT_NE(vulkan.error().message.find("no vulkan compute backend for NVIDIA H200"), std::string::npos)
      << vulkan.error().message;

  auto backend = create_backend({.kind = BackendKind::cpu, .name = "cpu"});
  ASSERT_TRUE(backend.ok());
  auto storage = (*backend)->create_slot_storage(2, 4096, 4096);
  ASSERT_TRUE(storage.ok());
  const std::vector<std::byte> too_big(8192);
  EXPECT_FALSE((*backend)->upload(**storage, 0, too_big).ok());
  EXPECT_FALSE((*backend)->upload(**storage, 2, std::span(too_big).first(16)).ok());
  EXPECT_FALSE((*backend)->create_slot_storage(2, 4096, 48).ok()) << "alignment not a power of two";
}

TEST(BackendProps, ComeFromTheProfile) {
  DeviceProfile profile;
  profile.memory.total_bytes = 64ull << 30;
  profile.memory.headroom_bytes = 48ull << 30;
  profile.threads.decode_threads = 8;
  VulkanDevice gpu;
  gpu.name = "NVIDIA H200";
  gpu.uuid = "0123456789abcdef0123456789abcdef";
  gpu.heaps = {{1ull << 30, false, std::nullopt, std::nullopt, false}, {140ull << 30, true, 130ull << 30, 0, false}};
  gpu.max_compute_shared_memory_bytes = 49152;
  gpu.subgroup_size = 32;
  profile.gpus.vulkan = {gpu};
  const auto all = backends_in_profile(profile);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].kind, BackendKind::cpu);
  EXPECT_EQ(all[0].threads, 8);
  EXPECT_EQ(all[0].free_memory_bytes, 48ull << 30);
  EXPECT_TRUE(all[0].unified_memory);
  EXPECT_EQ(all[1].kind, BackendKind::vulkan);
  EXPECT_EQ(all[1].total_memory_bytes, 140ull << 30);
  EXPECT_EQ(all[1].free_memory_bytes, 130ull << 30);
  EXPECT_EQ(all[1].uuid, gpu.uuid);
  EXPECT_EQ(all[1].max_shared_memory_bytes, 49152u);
  const BackendMemory vulkan = vulkan_backend_memory(all[1]);
  EXPECT_TRUE(vulkan.whole_decoder && vulkan.engine_runs_experts);
  EXPECT_EQ(vulkan.staging_bytes, 64ull << 20);
}

}  // namespace
}  // namespace coli::backend
