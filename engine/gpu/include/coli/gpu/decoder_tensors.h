// Which container tensors the GPU decoders take for each layer, by Hugging
// Face name: one walk for the Vulkan and the CUDA decoder, each with its own
// gatherer (what a tensor becomes on its device) and layer type (the same
// field names: input_norm, q, q_bias, router, mlp_gate, ...).
//
// A Gatherer has: has(name), vector(name, out) (absent: out stays unset, no
// error) and matrix(name, out) (absent: an error naming the tensor).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "coli/base/result.h"
#include "coli/gpu/gpu_decoder.h"
#include "coli/model/model_config.h"

namespace coli::gpu {

// Layer i's norms, attention (with optional biases), router and shared expert
// (MoE layer `moe` >= 0) or dense MLP.
template <class Gatherer, class Layer>
Status gather_decoder_layer(Gatherer& g, const model::ModelConfig& c, std::uint64_t i, int moe, Layer& w) {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  for (auto [name, out] : {std::pair{"input_layernorm.weight", &w.input_norm}, {"post_attention_layernorm.weight", &w.post_norm},
                           {"self_attn.q_norm.weight", &w.q_norm}, {"self_attn.k_norm.weight", &w.k_norm}}) {
    if (Status s = g.vector(p + name, *out); !s) return s;
  }
  if (!g.has(p + "input_layernorm.weight") || !g.has(p + "post_attention_layernorm.weight")) {
    return make_error("the container has no layer norms for layer " + std::to_string(i) + ": convert the model again");
  }
  for (auto [name, m, bias] : {std::tuple{"q", &w.q, &w.q_bias}, {"k", &w.k, &w.k_bias}, {"v", &w.v, &w.v_bias},
                               {"o", &w.o, &w.o_bias}}) {
    if (Status s = g.matrix(p + "self_attn." + name + "_proj.weight", *m); !s) return s;
    if (Status s = g.vector(p + "self_attn." + name + "_proj.bias", *bias); !s) return s;
  }
  w.moe = moe;
  const std::string mlp = moe >= 0 && c.has_shared_expert() ? p + "mlp.shared_expert." : p + "mlp.";
  if (moe >= 0) {
    const bool mixtral = c.architecture == model::Architecture::Mixtral;
    if (Status s = g.matrix(p + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"), w.router); !s) return s;
    w.has_shared = c.has_shared_expert();
    if (!w.has_shared) return Ok{};
    if (Status s = g.matrix(p + "mlp.shared_expert_gate.weight", w.shared_gate); !s) return s;
  }
  for (auto [name, m] : {std::pair{"gate", &w.mlp_gate}, {"up", &w.mlp_up}, {"down", &w.mlp_down}}) {
    if (Status s = g.matrix(mlp + name + "_proj.weight", *m); !s) return s;
  }
  return Ok{};
}

// Every layer (out.layers sized here), the final norm and the lm_head (the
// embedding when tied).
template <class Gatherer, class Weights>
Status gather_decoder_tensors(Gatherer& g, const DecoderModel& model, Weights& out) {
  const model::ModelConfig& c = *model.config;
  const auto& moe_layers = model.container->index().experts.model_layers;
  out.layers.resize(c.num_hidden_layers);
  for (std::uint64_t i = 0; i < c.num_hidden_layers; ++i) {
    const auto found = std::find(moe_layers.begin(), moe_layers.end(), i);
    const int moe = found == moe_layers.end() ? -1 : static_cast<int>(found - moe_layers.begin());
    if (Status s = gather_decoder_layer(g, c, i, moe, out.layers[i]); !s) return s;
  }
  if (!g.has("model.norm.weight")) return make_error("the container has no model.norm.weight: convert the model again");
  if (Status s = g.vector("model.norm.weight", out.final_norm); !s) return s;
  return g.matrix(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", out.lm_head);
}

}  // namespace coli::gpu
