#include "coli/planner/memory_preview.h"

#include "coli/experts/routing_trace.h"

#include <algorithm>
#include <numeric>

#include "coli/forward/attention.h"
#include "cpu/amx_tiles.h"  // header only
#include "coli/planner/deciders.h"  // format_bytes

namespace coli::planner {
namespace {

using u64 = std::uint64_t;

constexpr u64 kMiB = 1024 * 1024;
// Process base: code and data of the binary, libstdc++/libgomp, and the
// touched part of thread stacks. Tokenizer tables grow with the vocabulary
// (token bytes, merge ranks and two hash maps: ~200 B per token).
// Measured: `coli run` on the tiny demo peaks at 24.3 MiB with 8.3 MiB of
// weights and KV, so code, libraries, stacks and heap bookkeeping are ~16 MiB
// (dev VM, 2 threads); 20 MiB keeps the plan just above what runs measure.
constexpr u64 kProcessBaseBytes = 20 * kMiB;
constexpr u64 kTokenizerBytesPerToken = 200;
// Touched stack and queue state of one I/O thread.
constexpr u64 kIoThreadBytes = 256 * 1024;
constexpr u64 kPage = 4096;

std::string n(u64 value) { return std::to_string(value); }

}  // namespace

std::string tier_name(Tier tier) {
  switch (tier) {
    case Tier::vram: return "vram";
    case Tier::ram: return "ram";
    case Tier::disk: return "disk";
  }
  return "?";
}

u64 MemoryPreview::total(Tier tier) const {
  return std::accumulate(lines.begin(), lines.end(), u64{0},
                         [&](u64 sum, const MemoryLine& l) { return l.tier == tier ? sum + l.bytes : sum; });
}

const MemoryLine* MemoryPreview::find(const std::string& component) const {
  for (const MemoryLine& line : lines) {
    if (line.component == component) return &line;
  }
  return nullptr;
}

u64 MemoryPreview::expert_cache_bytes() const {
  u64 slabs = 0;
  for (const char* name : {"expert cache: pinned slots", "expert cache: evictable slots"}) {
    if (const MemoryLine* line = find(name)) slabs += line->bytes;
  }
  return slabs;
}

MemoryLine load_phase_line(const MemoryPreview& run, u64 load_bytes) {
  const u64 slabs = run.expert_cache_bytes();
  const u64 adds = load_bytes > slabs ? load_bytes - slabs : 0;
  return {"load phase: GPU upload buffers", Tier::ram, adds,
          "while loading only: " + format_bytes(load_bytes) +
              " (the larger of an upload chunk of expert records and the largest dense matrix, + the norms widened "
              "to f32), freed before the host's expert cache (" + format_bytes(slabs) +
              ") fills: the peak grows by what the load holds beyond the cache"};
}

// Per architecture (GQA K and V, or the MLA latent): footprint.cpp kv_bytes_per_position.
u64 kv_cache_bytes(const model::ModelConfig& c, int ctx, KvType type) {
  return kv_bytes_per_position(c, type) * static_cast<u64>(ctx);
}

namespace {

void add(MemoryPreview& p, std::string component, Tier tier, u64 bytes, std::string formula) {
  p.lines.push_back({std::move(component), tier, bytes, std::move(formula)});
}

// Where the plan keeps what: a GPU decoder holds the dense weights and the KV cache; the host holds
// an expert cache unless every expert is in VRAM.
struct Holders {
  bool gpu = false, experts_here = true;
  std::string on_gpu = "on the GPU (see the GPU lines)", no_cache = "every expert in VRAM: no host expert cache";
  explicit Holders(const MemoryKnobs& k) : gpu(k.gpu_decoder), experts_here(!k.gpu_decoder || k.host_experts) {}
};

// The weights the host holds: dense, norm copies, the expert cache's slots and the KV cache.
void add_weight_lines(MemoryPreview& p, const ModelFootprint& fp, const MemoryKnobs& k, const Holders& h) {
  const model::ModelConfig& c = fp.config;
  const u64 layers = fp.moe_layer_count(), stride = fp.expert().record_stride;
  const u64 cap = static_cast<u64>(k.cap), pins = static_cast<u64>(k.pins);
  if (h.gpu) {
    add(p, "dense weights", Tier::ram, fp.embedding_held_bytes, "the embedding table only (host row lookups); the rest " + h.on_gpu);
  } else {
    add(p, "dense weights", Tier::ram, fp.dense_held_bytes,
        n(fp.dense_tensor_count) + " tensors, dense format " + std::string(dense_format_name(fp.dense_format)) + " (source " +
            fp.source_dtype + ")");
  }
  add(p, "norm/bias f32 copies", Tier::ram, h.gpu ? 0 : fp.norm_f32_copy_bytes,
      h.gpu ? h.on_gpu : "norm weights and biases copied to float per layer");
  const std::string slot = " slots x " + n(stride) + " B stride (" + std::string(name_of(fp.expert_format)) + " record " +
                           n(fp.expert().record_bytes) + " B, 4096-aligned)";
  add(p, "expert cache: pinned slots", Tier::ram, h.experts_here ? layers * pins * stride : 0,
      h.experts_here ? n(layers) + " MoE layers x " + n(pins) + slot : h.no_cache);
  add(p, "expert cache: evictable slots", Tier::ram, h.experts_here ? layers * (cap - pins) * stride : 0,
      h.experts_here ? n(layers) + " MoE layers x " + n(cap - pins) + slot : h.no_cache);
  add(p, "KV cache", Tier::ram, h.gpu ? 0 : kv_cache_bytes(c, k.ctx, k.kv_type),
      h.gpu ? h.on_gpu : "ctx " + n(static_cast<u64>(k.ctx)) + " x (" + kv_layout(c, k.kv_type) + ")");
}

// A prefill round's buffers: one output row per (token, expert) and int8-quantised inputs (1 B + a
// scale per 32 values); the CPU backend's gate, up and down rows of one chunk of the round's experts
// (kCpuExpertStagingBytes, or one expert's rows where they are more). A round never holds more tokens
// than the longest pass.
void add_prefill_round_line(MemoryPreview& p, const ModelFootprint& fp, const MemoryKnobs& k, const Holders& h) {
  const model::ModelConfig& c = fp.config;
  const u64 hidden = c.hidden_size, width = c.moe_intermediate_size, top_k = static_cast<u64>(fp.top_k);
  const u64 round = static_cast<u64>(k.round_tokens), prompt = static_cast<u64>(k.prompt_tokens);
  const u64 round_held = prompt > 0 ? std::min(round, prompt) : round;
  const u64 tasks = round_held * top_k;
  const u64 staged_row_bytes = (2 * width + hidden) * 4;
  const u64 staged = std::min(tasks, std::max(fp.cpu_staged_chunk_rows(), round_held));
  // amx: q4's tile-row copy, and up to 15 padding tokens per expert's 16-token tiles.
  const u64 quantised_quarters = 5 + (k.amx_tiles && fp.expert_format == WeightFormat::q4_g64 ? 4 : 0);
  const u64 quantised = (hidden + width) * quantised_quarters / 4;
  const u64 padding_tokens = kernels::cpu::kAmxTileTokens - 1;
  const u64 tile_padding = k.amx_tiles ? static_cast<u64>(fp.n_experts) * padding_tokens * quantised : 0;
  add(p, "activations: prefill round", Tier::ram,
      h.experts_here ? tasks * (hidden * 4 + quantised) + staged * staged_row_bytes + tile_padding : 0,
      h.experts_here ? n(round_held) + " round tokens x top_k " + n(top_k) + " x (hidden " + n(hidden) + " x 4 + ~" +
                           (quantised_quarters == 5 ? "1.25" : "2.25") + " B x (hidden + width " + n(width) + ")) + " +
                           n(staged) + " staged rows x (2 x width + hidden) x 4" +
                           (k.amx_tiles ? " + " + n(static_cast<u64>(fp.n_experts)) + " experts x " + n(padding_tokens) + " padding tokens (amx tiles)" : "")
                     : h.no_cache);
}

// Activations: the prompt's, a prefill round's and decode's scratch.
void add_activation_lines(MemoryPreview& p, const ModelFootprint& fp, const MemoryKnobs& k, const Holders& h) {
  const model::ModelConfig& c = fp.config;
  const u64 hidden = c.hidden_size, prompt = static_cast<u64>(k.prompt_tokens);
  // The whole prompt goes through forward() at once: its hidden states and
  // their normed copy live for the whole prefill.
  add(p, "activations: prompt", Tier::ram, h.gpu ? 0 : 2 * prompt * hidden * 4,
      h.gpu ? h.on_gpu : "2 buffers (hidden, normed) x " + n(prompt) + " prompt tokens x hidden " + n(hidden) + " x 4 B");
  add_prefill_round_line(p, fp, k, h);
  // Decode scratch: a few hidden/head vectors, router logits, the logits,
  // and attention's split-K partials and per-thread tiles (forward/attention.h).
  const u64 q_width = c.num_attention_heads * c.head_dim, kv_width = c.num_key_value_heads * c.head_dim;
  const u64 attention = forward::attention_scratch_bytes(c.num_attention_heads, std::max<u64>(1, c.num_key_value_heads),
                                                         c.head_dim, static_cast<u64>(k.ctx), static_cast<u64>(k.threads));
  const u64 scratch = (4 * hidden + 2 * q_width + 2 * kv_width + static_cast<u64>(fp.n_experts) + c.vocab_size) * 4 + attention;
  add(p, "activations: decode scratch", Tier::ram, scratch,
      "(4 x hidden + 2 x q width " + n(q_width) + " + 2 x kv width " + n(kv_width) + " + experts + vocab " +
          n(c.vocab_size) + ") x 4 B + attention " + n(attention) + " B (ctx/64 tiles x heads x (head_dim + 2) partials + " +
          n(static_cast<u64>(k.threads)) + " threads x a block's tiles)");
}

// What the engine keeps of its routings for the usage history (MoeModel: per MoE layer the routing
// counts, the whole run's and the decode tokens' reuse distances and the LRU stack they come from, kept
// as each expert's last use and a clock; the CPU passes' routing trace, reserved whole at its first pass).
void add_routing_record_line(MemoryPreview& p, const ModelFootprint& fp, const Holders& h) {
  const u64 layers = fp.moe_layer_count(), top_k = static_cast<u64>(fp.top_k), experts_n = static_cast<u64>(fp.n_experts);
  const u64 tables = layers * (experts_n * 8 + 2 * (experts_n + 1) * 8 + experts_n * 8 + 8);
  const u64 trace = h.gpu ? 0 : experts::RoutingTrace::bytes_held(static_cast<int>(layers), fp.top_k);
  add(p, "routing record", Tier::ram, tables + trace,
      n(layers) + " MoE layers x (" + n(experts_n) + " counts + 2 x " + n(experts_n + 1) + " reuse distances + " + n(experts_n) + " last uses + a clock) x 8 B + " +
          (h.gpu ? std::string("no routing trace (the GPU routes)")
                 : "routing trace of 3 x " + n(static_cast<u64>(experts::kRoutingTraceTokens)) + " tokens x top_k " + n(top_k) +
                       " ids x 4 B a layer"));
}

// The runtime's own: I/O buffers, allocator rounding, the routing record, the process and tokenizer,
// and the container file on disk.
void add_runtime_lines(MemoryPreview& p, const ModelFootprint& fp, const MemoryKnobs& k, const Holders& h) {
  const model::ModelConfig& c = fp.config;
  const u64 layers = fp.moe_layer_count(), stride = fp.expert().record_stride;
  add(p, "I/O buffers", Tier::ram, h.experts_here ? static_cast<u64>(k.io_threads) * kIoThreadBytes + stride : 0,
      h.experts_here ? n(static_cast<u64>(k.io_threads)) + " I/O threads x 256 KiB + one record stride (O_DIRECT alignment probe)"
                     : h.no_cache);
  // Slabs (one per MoE layer) and KV vectors are single large mmap-served
  // allocations: a header page and rounding to a page each.
  const u64 big_allocations = (h.experts_here ? layers : 0) + (h.gpu ? 0 : 2 * c.num_hidden_layers);
  add(p, "allocator rounding", Tier::ram, (h.gpu ? kPage : fp.dense_page_rounding_bytes) + big_allocations * 2 * kPage,
      (h.gpu ? std::string("the embedding buffer rounded to pages")
             : n(fp.dense_tensor_count) + " dense tensors at 64-byte boundaries of one block rounded to pages") +
          " + " + n(big_allocations) + " slab/KV allocations x 8 KiB");
  add_routing_record_line(p, fp, h);
  const u64 tokenizer = k.tokenizer ? c.vocab_size * kTokenizerBytesPerToken : 0;
  add(p, "runtime reserve", Tier::ram, kProcessBaseBytes + tokenizer,
      "20 MiB process base (code, libraries, stacks; 16 MiB measured) + " +
          (k.tokenizer ? "vocab " + n(c.vocab_size) + " x 200 B tokenizer tables" : std::string("no tokenizer (prompt ids)")));
  add(p, "container file", Tier::disk, fp.container_bytes,
      "header + dense (4096-aligned) + " + n(layers) + " x " + n(static_cast<u64>(fp.n_experts)) + " records x " +
          n(stride) + " B + index");
}

}  // namespace

MemoryPreview preview_memory(const ModelFootprint& fp, const MemoryKnobs& k) {
  MemoryPreview p;
  const Holders holders(k);
  add_weight_lines(p, fp, k, holders);
  add_activation_lines(p, fp, k, holders);
  add_runtime_lines(p, fp, k, holders);
  return p;
}

}  // namespace coli::planner
