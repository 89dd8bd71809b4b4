// coli's model container: what `coli convert` writes and the engine reads.
//
//   [0, 16)          "COLIMOE\0", u32 format version, u32 reserved (little-endian)
//   [16, 4096)       zero
//   [4096, ...)      data: dense tensors, then routed experts, every block 4096-aligned
//   checksum table   u64 XXH3-64 per dense tensor (index order), then per expert record
//   index            UTF-8 JSON: architecture, config, tensors, expert layout,
//                    the table's offset, count and XXH3-64, and optionally the
//                    runtime files (tokenizer and its configs, base64)
//   last 32 bytes    trailer: u64 index offset, u64 index bytes, u64 XXH3-64 of
//                    the index, "COLIEND\0"
//
// Checksums (XXH3-64, libxxhash): the index's (trailer) and the table's
// (index) are checked on every open: a chain that costs a hash of a few
// hundred KB at most. Each dense tensor and expert record has its own, over
// its whole 4096-aligned extent (padding included), which `coli run --verify`
// and the converter, before it publishes a file, check. With the zero header
// they cover every byte of the file. Format version 1 had none: it is
// refused with the advice to convert again.
//
// The index comes last so conversion can stream (never holding a model in
// RAM); the writer works in a temporary file and renames it into place, so a
// crash leaves no half container. Each routed expert is one record holding
// its gate, up and down projections back to back (weights, then scales, per
// part), so one aligned read fetches one expert; records of a layer are
// contiguous with a fixed 4096-aligned stride.
//
// Dense tensors (attention, norms, router, embeddings, lm_head, shared
// experts) keep their source dtype (f32, bf16, f16): they are a small share
// of an MoE's bytes, and keeping them exact means the only quantisation
// error is the experts'. Experts are q4_g64 or q8_row
// (kernels/reference/gemv_reference.h), or f32 for exactness tests.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"

namespace coli::container {
namespace format {
struct ParsedIndex;
}

inline constexpr std::uint32_t kFormatVersion = 2;  // 2: index and record checksums
inline constexpr std::uint64_t kAlignment = 4096;  // O_DIRECT-friendly

// Dense tensors are F32, BF16, F16, or (2-D only) Q8_ROW or Q4_G64, laid out
// as coli/base/weight_format.h describes: weights, then the scales at
// traits(format).scales_offset(rows, cols); matrix_bytes is the whole tensor.

struct TensorEntry {
  std::string name;
  WeightFormat dtype = WeightFormat::f32;  // on disk its container_dtype: "F32", "BF16", ... "Q4_G64"
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0;          // from the start of the file
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;        // XXH3-64 of [offset, align_up(offset + bytes)): padding reads as zeros
};

// One projection inside an expert record: rows x cols quantised.
struct ExpertPart {
  std::string name;                  // "gate", "up", "down"
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::uint64_t weights_offset = 0;  // within the record
  std::uint64_t weights_bytes = 0;
  std::uint64_t scales_offset = 0;
  std::uint64_t scales_bytes = 0;
};

// How coli convert lays out one routed expert: gate and up (width x hidden),
// then down (hidden x width); weights then scales per part, each starting on
// a 64-byte boundary. record_bytes ends 64-aligned too.
struct ExpertRecordLayout {
  std::vector<ExpertPart> parts;
  std::uint64_t record_bytes = 0;
};
ExpertRecordLayout expert_record_layout(WeightFormat format, std::uint64_t hidden, std::uint64_t width);

struct ExpertLayout {
  WeightFormat format = WeightFormat::q4_g64;  // q4_g64, q8_row or f32; on disk its name
  std::uint32_t layers = 0;          // MoE layers (in model layer order)
  std::uint32_t experts = 0;         // routed experts per layer
  std::vector<std::uint32_t> model_layers;  // model layer index of each MoE layer
  std::vector<ExpertPart> parts;
  std::uint64_t record_bytes = 0;    // meaningful bytes of one expert
  std::uint64_t record_stride = 0;   // record_bytes rounded up to kAlignment
  std::vector<std::uint64_t> layer_offsets;  // first record of each MoE layer
  std::vector<std::uint64_t> record_checksums;  // layer-major; XXH3-64 of each record's whole stride
  std::uint64_t record_offset(std::uint32_t layer, std::uint32_t expert) const {
    return layer_offsets[layer] + static_cast<std::uint64_t>(expert) * record_stride;
  }
};
// One MoE layer of `experts` records of this shape from offset 0, without
// checksums: for expert slots filled from elsewhere than a container (the
// probe's tuning pool, the expert batch benchmark).
ExpertLayout single_layer_expert_layout(WeightFormat format, std::uint64_t hidden, std::uint64_t width, std::uint32_t experts);

// A file the engine needs beside the weights, carried in the index so one
// container runs on its own: the tokenizer ("tokenizer.json", or a GGUF
// vocabulary as "tokenizer.gguf"), "tokenizer_config.json" and
// "generation_config.json" (chat template, special tokens, defaults).
// Optional: containers without them (and readers before them) still work.
struct RuntimeFile {
  std::string name;   // one of kRuntimeFileNames
  std::string bytes;  // the file as it was
};
inline constexpr std::array<std::string_view, 4> kRuntimeFileNames = {"tokenizer.json", "tokenizer.gguf",
                                                                     "tokenizer_config.json", "generation_config.json"};
inline constexpr std::uint64_t kMaxRuntimeFileBytes = 64ull << 20;

struct ContainerIndex {
  std::vector<RuntimeFile> runtime_files;  // in the index as base64, "runtime_files"
  const RuntimeFile* find_runtime_file(std::string_view name) const {
    for (const RuntimeFile& file : runtime_files) {
      if (file.name == name) return &file;
    }
    return nullptr;
  }
  std::string architecture;
  std::string config_json;           // the source config.json, verbatim
  std::string source;                // what it was converted from (for humans)
  std::vector<TensorEntry> tensors;
  ExpertLayout experts;
  // How the dense projections are held: q8_row or q4_g64 when any dense
  // tensor is quantised (coli convert --dense), else source.
  DenseFormat dense_format() const {
    DenseFormat format = DenseFormat::source;
    for (const TensorEntry& tensor : tensors) {
      if (traits(tensor.dtype).quantized) format = dense_format_of(tensor.dtype);
    }
    return format;
  }
};

// Streams a container into `path` (through a temporary file beside it).
class ContainerWriter {
 public:
  static Result<ContainerWriter> create(const std::filesystem::path& path);
  ContainerWriter(ContainerWriter&&) noexcept;
  ContainerWriter& operator=(ContainerWriter&&) noexcept;
  ~ContainerWriter();  // an unfinished writer removes its temporary file

  Status add_tensor(const std::string& name, WeightFormat dtype, std::vector<std::uint64_t> shape,
                    std::span<const std::byte> data);
  // Call once before the first expert: fixes the record layout.
  Status begin_experts(WeightFormat format, std::uint32_t layers, std::uint32_t experts,
                       std::vector<std::uint32_t> model_layers, std::vector<ExpertPart> parts);
  // Records in order: layer 0 experts 0..E-1, layer 1 ...; `record` is
  // record_bytes long, laid out as `parts` say.
  Status add_expert(std::span<const std::byte> record);
  // A file the engine needs at run time (RuntimeFile); errors: a name not in
  // kRuntimeFileNames, a second file of that name, one above
  // kMaxRuntimeFileBytes.
  Status add_runtime_file(std::string name, std::string bytes);
  // Writes the index and trailer, fsyncs and renames into place.
  Status finish(const std::string& architecture, const std::string& config_json, const std::string& source);

 private:
  struct State;
  explicit ContainerWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// What verify_checksums read.
struct VerifySummary {
  std::uint64_t tensors = 0;
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
};

// Opens and validates a container: a regular file, magic, version, zero
// header, trailer, the index's checksum and JSON, and every offset and size
// against the file (overflow-safe). Errors name the file and the field and
// say what to do (usually: convert again).
class ContainerReader {
 public:
  static Result<ContainerReader> open(const std::filesystem::path& path);
  ContainerReader(ContainerReader&&) noexcept;
  ContainerReader& operator=(ContainerReader&&) noexcept;
  ~ContainerReader();

  const ContainerIndex& index() const;
  // Frees the runtime files' bytes (the engine has no use for them once
  // loaded: a tokenizer.json can be megabytes the plan does not count).
  void release_runtime_files();
  const std::filesystem::path& path() const;
  const TensorEntry* find_tensor(const std::string& name) const;
  // Reads a byte range with pread (the engine's expert store does its own, aligned, I/O).
  Status read(std::uint64_t offset, std::span<std::byte> out) const;
  int fd() const;
  std::uint64_t data_end() const;  // the data region is [kAlignment, data_end()): the index follows
  // Reads every dense tensor and expert record and compares its checksum
  // (the whole data region, so as long as reading the file takes). The error
  // names each damaged tensor or record (layer, expert) and its bytes.
  Result<VerifySummary> verify_checksums() const;

 private:
  struct State;
  explicit ContainerReader(std::unique_ptr<State> state);
  Status read_index(std::uint64_t file_size);  // trailer, checksum, JSON, bounds
  Status read_checksum_table(format::ParsedIndex& parsed, std::uint64_t index_offset);
  std::unique_ptr<State> state_;
};

}  // namespace coli::container
