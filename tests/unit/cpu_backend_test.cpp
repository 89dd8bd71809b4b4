// The CPU backend behind the seam: a batch of expert FFNs over slots it made
// equals the engine's old path (one expert at a time, each matrix through
// kernels/cpu or the exact reference) bit for bit, on fixture models
// converted to int4 and int8 experts; uploads and bad props are refused
// with messages that say why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "coli/backend/backend.h"
#include "cpu/cpu_backend.h"
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
  // Each expert gets 5 or 6 of the 11 tokens (a full tile of 4 and a short
  // one), in an order that interleaves experts: the backend groups them.
  const int tokens = 11;
  std::vector<float> in(tokens * in_width);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  std::vector<ExpertRow> rows;
  for (int t = 0; t < tokens; ++t) {
    for (int e = t % 2; e < experts; e += 2) rows.push_back({experts - 1 - e, t, static_cast<int>(rows.size())});
  }
  std::swap(rows.front(), rows.back());  // output rows out of order too
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
  // The batch again after the one-row calls (the backend keeps its grown
  // buffers, not re-zeroed, between calls): the same bits.
  std::vector<float> again(out.size(), -1.0f);
  (*backend)->expert_ffn_batch({storage->get(), &layout, in, again, rows});
  EXPECT_EQ(std::memcmp(again.data(), out.data(), out.size() * sizeof(float)), 0) << arch;
  // Staged a few experts at a time, as a large model's prompt runs (each
  // expert a chunk of its own, or two a chunk): the same bits.
  auto* cpu = dynamic_cast<CpuBackend*>(backend->get());
  ASSERT_NE(cpu, nullptr);
  const std::size_t row_bytes = sizeof(float) * (2 * layout.parts[0].rows + out_width);
  for (const std::size_t rows_per_chunk : {1, 7, 12}) {
    cpu->set_staging_bytes(rows_per_chunk * row_bytes);
    std::vector<float> chunked(out.size(), -1.0f);
    (*backend)->expert_ffn_batch({storage->get(), &layout, in, chunked, rows});
    EXPECT_EQ(std::memcmp(chunked.data(), out.data(), out.size() * sizeof(float)), 0) << arch << " chunks of " << rows_per_chunk;
  }
}

// With weighted sums in the batch, the backend adds each token's experts in
// the order given, summed from zero with forward::add_scaled and then added
// to its row: the bits of the engine's sum of the batch's outputs on one
// thread, for one token (decode) and several (prefill).
TEST_P(CpuBackendExperts, WeightedSumsEqualTheEnginesSumBitForBit) {
  const auto& [arch, format, kernel] = GetParam();
  auto reader = container::ContainerReader::open(converted(arch, format));
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  const container::ExpertLayout& layout = reader->index().experts;
  auto backend = create_backend({.kind = BackendKind::cpu, .name = "cpu", .cpu_kernel = kernel, .threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto storage = (*backend)->create_slot_storage(layout.experts, layout.record_stride, container::kAlignment);
  ASSERT_TRUE(storage.ok()) << storage.error().message;
  const int experts = static_cast<int>(layout.experts);
  std::vector<std::byte> record(layout.record_bytes);
  for (int e = 0; e < experts; ++e) {
    ASSERT_TRUE(reader->read(layout.record_offset(layout.layers - 1, static_cast<std::uint32_t>(e)), record).ok());
    ASSERT_TRUE((*backend)->upload(**storage, e, record).ok());
  }
  const std::size_t in_width = layout.parts[0].cols, out_width = layout.parts[2].rows;
  for (const int tokens : {1, 3}) {
    std::vector<float> in(tokens * in_width), base(tokens * out_width);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
    for (std::size_t i = 0; i < base.size(); ++i) base[i] = std::cos(0.11f * static_cast<float>(i));
    // Each token: three experts in a token-dependent order and weights.
    std::vector<ExpertRow> rows;
    std::vector<WeightedOutput> sums;
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < 3; ++i) {
        const int row = static_cast<int>(rows.size());
        rows.push_back({(t + 2 * i + 1) % experts, t, row});
        sums.push_back({t, row, 0.5f / static_cast<float>(i + 1) + 0.01f * static_cast<float>(t)});
      }
    }
    std::vector<float> plain(rows.size() * out_width);
    (*backend)->expert_ffn_batch({storage->get(), &layout, in, plain, rows});
    std::vector<float> expected = base;
    for (int t = 0; t < tokens; ++t) {
      std::vector<float> sum(out_width, 0.0f);
      for (const WeightedOutput& term : sums) {
        if (term.sum_row == t) forward::add_scaled(term.weight, std::span<const float>(plain).subspan(term.output_row * out_width, out_width), sum);
      }
      for (std::size_t i = 0; i < out_width; ++i) expected[t * out_width + i] += sum[i];
    }
    // Staged all at once, and one expert at a time (the sums after the last chunk).
    auto* cpu = dynamic_cast<CpuBackend*>(backend->get());
    ASSERT_NE(cpu, nullptr);
    for (const std::size_t staging : {kCpuExpertStagingBytes, std::size_t{1}}) {
      cpu->set_staging_bytes(staging);
      std::vector<float> out(plain.size()), sum_into = base;
      (*backend)->expert_ffn_batch({storage->get(), &layout, in, out, rows, sums, sum_into});
      EXPECT_EQ(std::memcmp(out.data(), plain.data(), out.size() * sizeof(float)), 0) << arch << " tokens " << tokens;
      EXPECT_EQ(std::memcmp(sum_into.data(), expected.data(), expected.size() * sizeof(float)), 0)
          << arch << " tokens " << tokens << " staging " << staging;
    }
    cpu->set_staging_bytes(kCpuExpertStagingBytes);
  }
  // A term outside sum_into is refused before anything runs.
  std::vector<float> in(in_width), out(out_width), small(out_width);
  const ExpertRow row{0, 0, 0};
  const WeightedOutput outside{1, 0, 1.0f};
  EXPECT_THROW((*backend)->expert_ffn_batch({storage->get(), &layout, in, out, std::span(&row, 1), std::span(&outside, 1), small}),
               std::invalid_argument);
  // So is a row whose terms are not together: two threads could add to it at once.
  std::vector<float> two_rows(2 * out_width);
  const WeightedOutput unordered[] = {{1, 0, 1.0f}, {0, 0, 1.0f}};
  EXPECT_THROW((*backend)->expert_ffn_batch({storage->get(), &layout, in, out, std::span(&row, 1), unordered, two_rows}),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(
    FixtureModels, CpuBackendExperts,
    testing::Combine(testing::Values("qwen3_moe", "mixtral"),
                     testing::Values(WeightFormat::q4_g64, WeightFormat::q8_row),
                     testing::Values("scalar", "exact", "")));

// q, k and v (and gate/up) of all a pass's tokens go through matmul_rows:
// each output row must equal a one-row matmul bit for bit, for quantised
// and float weights mixed in one call, with and without bias.
TEST(CpuBackend, MatmulRowsEqualsOneRowMatmulBitForBit) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int cols = 128, count = 9, rows = 40;
  std::vector<std::int8_t> q8(rows * cols);
  std::vector<float> q8_scales(rows), f32(rows * cols), bias(rows), x(count * cols);
  std::vector<std::uint8_t> q4(rows * cols / 2);
  std::vector<std::uint16_t> q4_scales(rows * cols / 64), bf16(rows * cols);
  for (auto& v : q8) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  for (auto& v : q4) v = static_cast<std::uint8_t>(rng());
  for (auto& v : q8_scales) v = 0.01f + 0.01f * (dist(rng) + 1);
  for (auto& v : q4_scales) v = kernels::float_to_half(0.02f + 0.01f * dist(rng));
  for (auto* values : {&f32, &bias, &x}) for (auto& v : *values) v = dist(rng);
  for (std::size_t i = 0; i < bf16.size(); ++i) bf16[i] = kernels::float_to_half(f32[i]) ^ 0x0100;  // f16 bits
  auto bytes = [](const auto& v) { return reinterpret_cast<const std::byte*>(v.data()); };
  const WeightView weights[] = {{bytes(q8), bytes(q8_scales), WeightFormat::q8_row, rows, cols},
                                {bytes(q4), bytes(q4_scales), WeightFormat::q4_g64, rows, cols},
                                {bytes(f32), nullptr, WeightFormat::f32, rows, cols},
                                {bytes(bf16), nullptr, WeightFormat::f16, rows, cols},
                                {bytes(q8), bytes(q8_scales), WeightFormat::q8_row, rows / 2, cols}};
  for (const std::string kernel : {"", "exact"}) {
    SCOPED_TRACE("kernel '" + kernel + "'");
    auto backend = create_backend({.kind = BackendKind::cpu, .name = "cpu", .cpu_kernel = kernel, .threads = 2});
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    std::vector<std::vector<float>> ys;
    std::vector<MatmulOutput> outputs;
    for (const WeightView& w : weights) ys.emplace_back(static_cast<std::size_t>(count * w.rows));
    for (std::size_t i = 0; i < ys.size(); ++i) {
      outputs.push_back({weights[i], ys[i], i % 2 == 0 ? std::span<const float>(bias).first(weights[i].rows) : std::span<const float>{}});
    }
    (*backend)->matmul_rows(x, count, outputs);
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const auto out_rows = static_cast<std::size_t>(weights[i].rows);
      for (int t = 0; t < count; ++t) {
        std::vector<float> one(out_rows);
        (*backend)->matmul(weights[i], std::span<const float>(x).subspan(t * cols, cols), one, outputs[i].bias);
        EXPECT_EQ(std::memcmp(one.data(), ys[i].data() + t * out_rows, out_rows * sizeof(float)), 0)
            << "output " << i << " token " << t;
      }
    }
  }
}

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

// The grouping the expert jobs are built from: groups in order of first
// appearance, rows in batch order inside a group, exactly as the linear
// search per row it replaced put them (the old code, kept here as the
// reference), on hand-made and random batches, with the lookup table
// reused between calls.
std::pair<std::vector<ExpertGrouping::Group>, std::vector<std::size_t>> quadratic_grouping(std::span<const ExpertRow> rows) {
  std::vector<ExpertGrouping::Group> groups;
  std::vector<std::size_t> order, group_of_row(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::size_t g = 0;
    while (g < groups.size() && groups[g].slot != rows[i].slot) ++g;
    if (g == groups.size()) groups.push_back({rows[i].slot, 0, 0});
    ++groups[g].count;
    group_of_row[i] = g;
  }
  for (std::size_t g = 0, first = 0; g < groups.size(); first += groups[g].count, ++g) groups[g].first = first;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (group_of_row[i] == g) order.push_back(i);
    }
  }
  return {groups, order};
}

TEST(ExpertGrouping, KeepsFirstAppearanceAndBatchOrder) {
  ExpertGrouping grouping;
  const std::vector<ExpertRow> rows = {{5, 0, 0}, {2, 0, 1}, {5, 1, 2}, {0, 1, 3}, {2, 2, 4}, {5, 2, 5}};
  const auto& groups = grouping.group(rows, 6);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].slot, 5);
  EXPECT_EQ(groups[0].first, 0u);
  EXPECT_EQ(groups[0].count, 3u);
  EXPECT_EQ(groups[1].slot, 2);
  EXPECT_EQ(groups[1].first, 3u);
  EXPECT_EQ(groups[1].count, 2u);
  EXPECT_EQ(groups[2].slot, 0);
  EXPECT_EQ(groups[2].first, 5u);
  EXPECT_EQ(groups[2].count, 1u);
  EXPECT_EQ(grouping.row_order(), (std::vector<std::size_t>{0, 2, 5, 1, 4, 3}));

  std::mt19937 random(13);
  for (int batch = 0; batch < 200; ++batch) {
    const int slots = 1 + batch % 64;
    std::uniform_int_distribution<int> slot(0, slots - 1);
    std::vector<ExpertRow> random_rows(static_cast<std::size_t>(batch % 97));
    for (ExpertRow& row : random_rows) row.slot = slot(random);
    const auto [expected_groups, expected_order] = quadratic_grouping(random_rows);
    const auto& actual = grouping.group(random_rows, static_cast<std::size_t>(slots));
    ASSERT_EQ(actual.size(), expected_groups.size()) << "batch " << batch;
    for (std::size_t g = 0; g < actual.size(); ++g) {
      EXPECT_EQ(actual[g].slot, expected_groups[g].slot) << "batch " << batch << " group " << g;
      EXPECT_EQ(actual[g].first, expected_groups[g].first) << "batch " << batch << " group " << g;
      EXPECT_EQ(actual[g].count, expected_groups[g].count) << "batch " << batch << " group " << g;
    }
    ASSERT_EQ(grouping.row_order(), expected_order) << "batch " << batch;
  }
}

// Chunks take consecutive groups while their rows fit; a group larger than
// a chunk is one of its own, and every group is in exactly one chunk.
TEST(StagedChunks, ConsecutiveGroupsWhileTheirRowsFit) {
  const std::vector<ExpertGrouping::Group> groups = {{4, 0, 3}, {2, 3, 5}, {7, 8, 2}, {1, 10, 9}, {0, 19, 1}};
  const std::vector<StagedChunk> chunks = staged_chunks(groups, 8);
  ASSERT_EQ(chunks.size(), 4u);
  const std::vector<std::array<std::size_t, 4>> expected = {{0, 2, 0, 8}, {2, 3, 8, 2}, {3, 4, 10, 9}, {4, 5, 19, 1}};
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    EXPECT_EQ((std::array{chunks[c].first_group, chunks[c].end_group, chunks[c].first_row, chunks[c].rows}), expected[c]) << c;
  }
  EXPECT_EQ(staged_chunks(groups, 100).size(), 1u);
  EXPECT_EQ(staged_chunks(groups, 1).size(), groups.size());
  EXPECT_TRUE(staged_chunks({}, 8).empty());
}

TEST(ExpertGrouping, SlotOutsideTheStorageIsAWiringMistake) {
  ExpertGrouping grouping;
  const std::vector<ExpertRow> past_the_end = {{1, 0, 0}, {4, 1, 1}};
  EXPECT_THROW(grouping.group(past_the_end, 4), std::invalid_argument);
  const std::vector<ExpertRow> negative = {{-1, 0, 0}};
  EXPECT_THROW(grouping.group(negative, 4), std::invalid_argument);
  // A refused batch leaves nothing behind: the next one groups as usual.
  const std::vector<ExpertRow> fine = {{3, 0, 0}, {1, 0, 1}, {3, 1, 2}};
  const auto& groups = grouping.group(fine, 4);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].count, 2u);
  EXPECT_EQ(grouping.row_order(), (std::vector<std::size_t>{0, 2, 1}));
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
