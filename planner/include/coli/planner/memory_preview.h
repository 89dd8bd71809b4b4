// The memory a plan will use, itemised by component and tier. Every line
// carries the inputs of its formula as text, so `coli-plan` can explain each
// number and a run can compare it with what it measured.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coli/base/expert_io.h"
#include "coli/planner/footprint.h"

namespace coli::planner {

enum class Tier { vram, ram, disk };
std::string tier_name(Tier tier);

struct MemoryLine {
  std::string component;  // "dense weights", "expert cache: evictable slots", ...
  Tier tier = Tier::ram;
  std::uint64_t bytes = 0;
  std::string formula;    // e.g. "48 MoE layers x 40 slots x 1654784 B stride"
  bool operator==(const MemoryLine&) const = default;
};

struct MemoryPreview {
  std::vector<MemoryLine> lines;
  std::uint64_t total(Tier tier) const;
  const MemoryLine* find(const std::string& component) const;  // nullptr when absent
  std::uint64_t expert_cache_bytes() const;  // the host expert cache's slots, pinned and evictable
  bool operator==(const MemoryPreview&) const = default;
};

// The engine knobs that size memory (runtime::ModelOptions and the prompt).
struct MemoryKnobs {
  int cap = 0;                // expert slots per MoE layer (pins included)
  int pins = 0;               // of which pinned
  int ctx = 4096;             // KV positions (max_context)
  KvType kv_type = KvType::f32;  // how the CPU's KV cache holds them (runtime::ModelOptions::kv_type)
  int prompt_tokens = 4096;   // tokens of the longest single forward() (the whole prompt)
  int round_tokens = 64;      // prefill tokens per expert round
  int threads = 1;
  int io_threads = kDefaultIoThreads;
  bool tokenizer = true;      // a tokenizer is loaded (its tables are priced); false with prompt ids
  // The amx CPU variant: q4 activations carry a tile-row copy (1 B more per
  // value) and quantised buffers hold whole 16-token tiles.
  bool amx_tiles = false;
  // The whole decoder runs on the GPU: the host holds only the embedding
  // table and, when some experts stay outside VRAM, their cache and I/O
  // (the GPU's own lines come from the VRAM tier).
  bool gpu_decoder = false;
  bool host_experts = true;
};

// RAM lines (the GPU backend's own lines come from its VRAM tier).
// The disk line is the container every expert not in RAM is read from.
MemoryPreview preview_memory(const ModelFootprint& footprint, const MemoryKnobs& knobs);

// "load phase: GPU upload buffers": what RAM held only while loading adds to
// the peak (not a "GPU " line, which a plan file gives back to the GPU tier:
// the RAM decider adds this one). The engine uploads the GPU's weights before its host expert cache fills
// (the slabs are untouched until then), so the peak is the larger of the
// load phase (the plan less the expert slabs, plus the load buffers) and the
// run: the line holds max(0, load - expert slabs), its formula both figures.
MemoryLine load_phase_line(const MemoryPreview& run, std::uint64_t load_bytes);

// Bytes of the KV cache: ctx x kv_bytes_per_position (GQA K and V, or the MLA latent) in `type`.
std::uint64_t kv_cache_bytes(const model::ModelConfig& config, int ctx, KvType type = KvType::f32);

}  // namespace coli::planner
