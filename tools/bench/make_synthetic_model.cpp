// coli-make-synthetic: writes a coli container of a realistic MoE shape with
// random weights, straight through ContainerWriter (no safetensors), so
// decode speed can be measured on models nobody has to download. Defaults
// are OLMoE-1B-7B (16 layers, 64 experts, top-8, hidden 2048, expert width
// 1024, 16 heads, vocab 50304). Streams: at most one dense tensor and one
// expert record are in memory at a time.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "coli/base/clock.h"
#include "coli/cli/command_line.h"

#include "coli/base/text.h"
#include "coli/container/container.h"
#include "reference/gemv_reference.h"
#include "synthetic_tensors.h"

namespace {

using coli::Status;
using coli::container::ContainerWriter;
using coli::container::ExpertPart;

struct Shape {
  std::uint64_t layers = 16, experts = 64, top_k = 8, hidden = 2048, width = 1024, heads = 16, kv_heads = 16;
  std::uint64_t vocab = 50304;
  std::uint64_t head_dim() const { return hidden / heads; }  // OlmoeAttention: hidden_size // num_heads
};

struct Options {
  Shape shape;
  std::string out, experts = "q4_g64", dense = "bf16";
  std::uint64_t seed = 1;
  // experts and dense resolved by validate().
  coli::WeightFormat expert_format = coli::WeightFormat::q4_g64, matrix_format = coli::WeightFormat::bf16;
};

constexpr float kDenseStddev = 0.02f;  // OLMoE's initializer_range

std::string config_json(const Shape& s) {
  auto field = [](const char* name, std::uint64_t value) { return "  \"" + std::string(name) + "\": " + std::to_string(value) + ",\n"; };
  return "{\n  \"architectures\": [\"OlmoeForCausalLM\"],\n  \"model_type\": \"olmoe\",\n" +
         field("hidden_size", s.hidden) + field("intermediate_size", s.width) + field("num_hidden_layers", s.layers) +
         field("num_attention_heads", s.heads) + field("num_key_value_heads", s.kv_heads) +
         field("num_experts", s.experts) + field("num_experts_per_tok", s.top_k) + field("vocab_size", s.vocab) +
         "  \"max_position_embeddings\": 4096,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 10000.0,\n"
         "  \"rope_scaling\": null,\n  \"norm_topk_prob\": false,\n  \"attention_bias\": false,\n"
         "  \"clip_qkv\": null,\n  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n"
         "  \"torch_dtype\": \"bfloat16\"\n}\n";
}

std::string validate(Options& o) {
  const Shape& s = o.shape;
  auto experts = coli::parse_weight_format(o.experts, "--experts");
  if (!experts || !coli::traits(*experts).cpu_int8_kernels) return "--experts must be q4_g64 or q8_row";
  auto dense = coli::parse_weight_format(o.dense, "--dense");
  if (!dense || (*dense != coli::WeightFormat::bf16 && !coli::traits(*dense).quantized)) {
    return "--dense must be bf16, q8_row or q4_g64";
  }
  o.expert_format = *experts;
  o.matrix_format = *dense;
  if (s.hidden % s.heads != 0) return "--hidden must be a multiple of --heads (head_dim = hidden / heads)";
  if (s.heads % s.kv_heads != 0) return "--heads must be a multiple of --kv-heads";
  if (s.top_k > s.experts) return "--top-k must not exceed --num-experts";
  if (!coli::traits(o.expert_format).valid_cols(s.hidden) || !coli::traits(o.expert_format).valid_cols(s.width)) {
    return "q4_g64 needs --hidden and --width to be multiples of 64";
  }
  return "";
}

class SyntheticWriter {
 public:
  SyntheticWriter(ContainerWriter& writer, const Options& options)
      : writer_(writer), options_(options), rng_(options.seed) {}

  Status write_all() {
    const Shape& s = options_.shape;
    const std::uint64_t q_width = s.heads * s.head_dim(), kv_width = s.kv_heads * s.head_dim();
    using coli::WeightFormat;
    const WeightFormat matrix = options_.matrix_format, bf16 = WeightFormat::bf16;
    // The embedding is a row lookup, not a GEMV: it stays BF16.
    if (Status st = add("model.embed_tokens.weight", bf16, s.vocab, s.hidden); !st) return st;
    for (std::uint64_t l = 0; l < s.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      for (const auto& [name, rows, cols, dtype, mean, stddev] : {
               std::tuple{"input_layernorm.weight", s.hidden, std::uint64_t{0}, bf16, 1.0f, kDenseStddev},
               {"post_attention_layernorm.weight", s.hidden, 0, bf16, 1.0f, kDenseStddev},
               {"self_attn.q_proj.weight", q_width, s.hidden, matrix, 0.0f, kDenseStddev},
               {"self_attn.k_proj.weight", kv_width, s.hidden, matrix, 0.0f, kDenseStddev},
               {"self_attn.v_proj.weight", kv_width, s.hidden, matrix, 0.0f, kDenseStddev},
               {"self_attn.o_proj.weight", s.hidden, q_width, matrix, 0.0f, kDenseStddev},
               {"self_attn.q_norm.weight", q_width, 0, bf16, 1.0f, kDenseStddev},
               {"self_attn.k_norm.weight", kv_width, 0, bf16, 1.0f, kDenseStddev},
               // N(0, 1) router: logits differ a lot between tokens, so routing varies.
               // Kept BF16 like llama.cpp keeps ffn_gate_inp unquantised (tiny, decides routing).
               {"mlp.gate.weight", s.experts, s.hidden, bf16, 0.0f, 1.0f}}) {
        if (Status st = add(p + name, dtype, rows, cols, mean, stddev); !st) return st;
      }
    }
    if (Status st = add("model.norm.weight", bf16, s.hidden, 0, 1.0f); !st) return st;
    if (Status st = add("lm_head.weight", matrix, s.vocab, s.hidden); !st) return st;
    return write_experts();
  }

  std::uint64_t dense_bytes() const { return dense_bytes_; }
  std::uint64_t record_bytes() const { return record_bytes_; }

 private:
  // cols 0: a 1-D tensor of `rows` elements.
  Status add(const std::string& name, coli::WeightFormat dtype, std::uint64_t rows, std::uint64_t cols,
             float mean = 0.0f, float stddev = kDenseStddev) {
    const bool vector = cols == 0;
    const auto data = coli::bench::random_tensor(rng_, dtype, vector ? 1 : rows, vector ? rows : cols, mean, stddev);
    dense_bytes_ += data.size();
    std::vector<std::uint64_t> shape = vector ? std::vector{rows} : std::vector{rows, cols};
    return writer_.add_tensor(name, dtype, std::move(shape), data);
  }

  Status write_experts() {
    const Shape& s = options_.shape;
    const auto layout = coli::container::expert_record_layout(options_.expert_format, s.hidden, s.width);
    const auto& parts = layout.parts;
    record_bytes_ = layout.record_bytes;
    std::vector<std::uint32_t> model_layers;
    for (std::uint32_t l = 0; l < s.layers; ++l) model_layers.push_back(l);
    if (Status st = writer_.begin_experts(options_.expert_format, static_cast<std::uint32_t>(s.layers),
                                          static_cast<std::uint32_t>(s.experts), model_layers, parts);
        !st) {
      return st;
    }
    std::vector<std::byte> record(record_bytes_);
    for (std::uint64_t l = 0; l < s.layers; ++l) {
      std::fprintf(stderr, "\rcoli-make-synthetic: experts of layer %llu/%llu", static_cast<unsigned long long>(l + 1),
                   static_cast<unsigned long long>(s.layers));
      for (std::uint64_t e = 0; e < s.experts; ++e) {
        coli::bench::fill_expert_record(rng_, options_.expert_format, parts, kDenseStddev, record);
        if (Status st = writer_.add_expert(record); !st) return st;
      }
    }
    std::fprintf(stderr, "\n");
    return coli::Ok{};
  }

  ContainerWriter& writer_;
  const Options& options_;
  coli::bench::FastRng rng_;
  std::uint64_t dense_bytes_ = 0, record_bytes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  Shape& s = o.shape;
  CLI::App app{"coli-make-synthetic: a random-weight MoE container of realistic shape (default OLMoE-1B-7B)"};
  app.add_option("--out", o.out, "Container file to write")->required();
  app.add_option("--experts", o.experts, "Routed expert format: q4_g64 or q8_row")->capture_default_str();
  app.add_option("--dense", o.dense, "Attention and lm_head matrices: bf16, q8_row or q4_g64")->capture_default_str();
  app.add_option("--layers", s.layers, "Decoder layers (all MoE)")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--num-experts", s.experts, "Routed experts per layer")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--top-k", s.top_k, "Experts per token")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--hidden", s.hidden, "Hidden size")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--width", s.width, "Expert intermediate size")->check(CLI::Range(1, 1 << 17))->capture_default_str();
  app.add_option("--heads", s.heads, "Attention heads (head_dim = hidden / heads)")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--kv-heads", s.kv_heads, "Key/value heads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--vocab", s.vocab, "Vocabulary size")->check(CLI::Range(1, 1 << 22))->capture_default_str();
  app.add_option("--seed", o.seed, "Random seed")->capture_default_str();
  coli::cli::add_version_flag(app, "coli-make-synthetic");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;
  if (const std::string problem = validate(o); !problem.empty()) {
    std::fprintf(stderr, "coli-make-synthetic: %s\n", problem.c_str());
    return 2;
  }

  const auto start = std::chrono::steady_clock::now();
  auto writer = ContainerWriter::create(o.out);
  if (!writer) {
    std::fprintf(stderr, "coli-make-synthetic: %s\n", writer.error().message.c_str());
    return 1;
  }
  SyntheticWriter synthetic(*writer, o);
  Status status = synthetic.write_all();
  if (status) {
    const std::string source = "coli-make-synthetic (random weights, seed " + std::to_string(o.seed) + ", experts " +
                               o.experts + ", dense " + o.dense + ")";
    status = writer->finish("olmoe", config_json(s), source);
  }
  if (!status) {
    std::fprintf(stderr, "coli-make-synthetic: %s\n", status.error().message.c_str());
    return 1;
  }
  const double seconds = coli::seconds_since(start);
  std::printf("wrote %s in %.1f s: dense %s (%s), %llu experts of %s (%s), file %s\n", o.out.c_str(), seconds,
              coli::format_bytes(synthetic.dense_bytes()).c_str(), o.dense.c_str(),
              static_cast<unsigned long long>(s.layers * s.experts), coli::format_bytes(synthetic.record_bytes()).c_str(),
              o.experts.c_str(), coli::format_bytes(std::filesystem::file_size(o.out)).c_str());
  return 0;
}
