#include "cuda/cuda_weights.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>

#include "coli/forward/ops.h"
#include "coli/gpu/decoder_tensors.h"
#include "cuda/cuda_layout.h"

namespace coli::cuda {
namespace {

constexpr std::size_t kTensorAlignment = 256;       // every row kernel's 16-byte loads, and then some
constexpr std::size_t kUploadChunk = kUploadChunkBytes;  // host bytes read from the file per upload (cuda_layout.h)

std::size_t align_up(std::size_t n) { return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

// The bytes of a tensor: from host memory, or read from the container.
Result<std::vector<std::byte>> tensor_bytes(const gpu::DecoderTensor& t, const container::ContainerReader& file) {
  std::vector<std::byte> bytes(t.bytes.begin(), t.bytes.end());
  if (bytes.empty()) {
    bytes.resize(t.file_bytes);
    if (Status s = file.read(t.file_offset, bytes); !s) return s.error();
  }
  return bytes;
}

// Dense tensors gathered first, so one buffer of the exact size is made,
// then uploaded one by one and the pointers resolved.
class DenseGatherer {
 public:
  explicit DenseGatherer(const gpu::DecoderModel& model) : model_(model) {}

  Status matrix(const std::string& name, Matrix& out, bool required = true) {
    const gpu::DecoderTensor* t = model_.tensor(name);
    if (!t) return required ? make_error("the container has no tensor " + name) : Status(Ok{});
    if (t->shape.size() != 2) return make_error("tensor " + name + " is not 2-D, which the CUDA decoder needs");
    const WeightFormatTraits& f = traits(t->dtype);
    out.format = t->dtype;
    out.rows = static_cast<int>(t->shape[0]);
    out.cols = static_cast<int>(t->shape[1]);
    if (!f.valid_cols(t->shape[1])) return make_error("tensor " + name + " has columns its format cannot hold");
    const std::size_t scales = f.quantized ? f.scales_offset(t->shape[0], t->shape[1]) : 0;
    if (scales % 4 != 0) return make_error("tensor " + name + ": its scales are not 4-byte aligned: convert the model again");
    const std::size_t at = add(t, {});
    pending_.push_back({&out, at, at + scales, f.quantized});
    if (std::find(formats_.begin(), formats_.end(), out.format) == formats_.end()) formats_.push_back(out.format);
    return Ok{};
  }

  // A vector as f32; `out` stays null when the tensor is absent.
  Status vector(const std::string& name, const float*& out) {
    const gpu::DecoderTensor* t = model_.tensor(name);
    if (!t) return Ok{};
    if (traits(t->dtype).quantized) {
      return make_error("tensor " + name + " is " + std::string(name_of(t->dtype)) +
                        "; the CUDA decoder needs norms and biases in float");
    }
    auto stored = tensor_bytes(*t, *model_.container);
    if (!stored) return make_error("tensor " + name + ": " + stored.error().message);
    std::size_t count = 1;
    for (std::uint64_t d : t->shape) count *= d;
    if (stored->size() < traits(t->dtype).weight_bytes(1, count)) {
      return make_error("tensor " + name + " is shorter than its shape: convert the model again");
    }
    std::vector<float> values(count);
    forward::dense_row({t->dtype, 1, static_cast<int>(count), stored->data()}, 0, values);
    std::vector<std::byte> widened(count * 4);
    std::memcpy(widened.data(), values.data(), widened.size());
    vectors_.push_back({&out, add(nullptr, std::move(widened))});
    return Ok{};
  }

  bool has(const std::string& name) const { return model_.tensor(name) != nullptr; }
  const std::vector<WeightFormat>& formats() const { return formats_; }

  Result<DeviceBuffer> finish() {
    auto buffer = DeviceBuffer::allocate(size_);
    if (!buffer) return buffer.error();
    for (const Entry& e : entries_) {
      Status s = Ok{};
      if (e.tensor == nullptr) {
        s = buffer->upload(e.owned.data(), e.owned.size(), e.offset);
      } else if (!e.tensor->bytes.empty()) {
        s = buffer->upload(e.tensor->bytes.data(), e.tensor->bytes.size(), e.offset);
      } else {
        auto bytes = tensor_bytes(*e.tensor, *model_.container);
        s = bytes ? buffer->upload(bytes->data(), bytes->size(), e.offset) : Status(bytes.error());
      }
      if (!s) return s.error();
    }
    const auto* base = static_cast<const std::uint8_t*>(buffer->data());
    for (const Pending& m : pending_) {
      m.target->weights = base + m.weights;
      m.target->scales = m.has_scales ? base + m.scales : nullptr;
    }
    for (const auto& [target, offset] : vectors_) *target = reinterpret_cast<const float*>(base + offset);
    return buffer;
  }

 private:
  struct Entry {
    std::size_t offset;
    const gpu::DecoderTensor* tensor;  // null: `owned` holds the bytes
    std::vector<std::byte> owned;
  };
  struct Pending {
    Matrix* target;
    std::size_t weights, scales;
    bool has_scales;
  };
  std::size_t add(const gpu::DecoderTensor* t, std::vector<std::byte> owned) {
    const std::size_t at = size_;
    const std::size_t bytes = t ? (t->bytes.empty() ? t->file_bytes : t->bytes.size()) : owned.size();
    size_ = align_up(size_ + bytes);
    entries_.push_back({at, t, std::move(owned)});
    return at;
  }
  const gpu::DecoderModel& model_;
  std::vector<Entry> entries_;
  std::vector<Pending> pending_;
  std::vector<std::pair<const float**, std::size_t>> vectors_;
  std::vector<WeightFormat> formats_;
  std::size_t size_ = 0;
};

// The SwiGLU kernels read gate and up as one pair of the same format and shape.
Status check_mlp_pairs(const std::vector<CudaLayer>& layers) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const CudaLayer& w = layers[i];
    if (w.mlp_gate.format != w.mlp_up.format || w.mlp_gate.rows != w.mlp_up.rows) {
      return make_error("layer " + std::to_string(i) + "'s MLP gate and up differ in format or shape: convert the model again");
    }
  }
  return Ok{};
}

Result<std::size_t> part_offset(const container::ExpertLayout& layout, const std::string& name, bool scales) {
  for (const container::ExpertPart& part : layout.parts) {
    if (part.name == name) return static_cast<std::size_t>(scales ? part.scales_offset : part.weights_offset);
  }
  return make_error("the container's expert records have no '" + name + "' part: convert the model again");
}

Status expert_layout(const gpu::DecoderModel& model, kernels::cuda::ExpertRecordLayout& out) {
  const container::ExpertLayout& layout = model.container->index().experts;
  out.format = layout.format;
  out.hidden = static_cast<int>(model.config->hidden_size);
  out.width = static_cast<int>(model.config->moe_intermediate_size);
  out.record_stride = layout.record_stride;
  for (auto [name, w, s] : {std::tuple{"gate", &out.gate_weights, &out.gate_scales},
                            {"up", &out.up_weights, &out.up_scales}, {"down", &out.down_weights, &out.down_scales}}) {
    auto weights = part_offset(layout, name, false);
    if (!weights) return weights.error();
    *w = *weights;
    auto scales = part_offset(layout, name, true);
    *s = layout.format == WeightFormat::f32 || !scales ? *weights : *scales;
    // The quantised row loaders read 16-byte chunks (the container aligns parts to 64).
    if (*w % 16 != 0 || *s % 4 != 0 || out.record_stride % 16 != 0) {
      return make_error("the expert records' '" + std::string(name) + "' part is not 16-byte aligned: convert the model again");
    }
  }
  return Ok{};
}

// One MoE layer's planned experts, in the plan's order (slot i = chosen[i]),
// read from the container in chunks and uploaded.
Status upload_layer_experts(const gpu::DecoderModel& model, std::uint32_t layer, const std::vector<int>& chosen,
                            DeviceBuffer& slab) {
  const container::ExpertLayout& layout = model.container->index().experts;
  auto buffer = DeviceBuffer::allocate(chosen.size() * layout.record_stride);
  if (!buffer) return make_error("expert slots of MoE layer " + std::to_string(layer) + ": " + buffer.error().message);
  const std::size_t per_chunk = std::max<std::size_t>(1, kUploadChunk / layout.record_stride);
  std::vector<std::byte> host(std::min(chosen.size(), per_chunk) * layout.record_stride);
  for (std::size_t first = 0; first < chosen.size(); first += per_chunk) {
    const std::size_t count = std::min(per_chunk, chosen.size() - first);
    for (std::size_t i = 0; i < count; ++i) {
      const auto e = static_cast<std::uint32_t>(chosen[first + i]);
      const auto record = std::span(host).subspan(i * layout.record_stride, layout.record_bytes);
      if (Status s = model.container->read(layout.record_offset(layer, e), record); !s) return s;
    }
    if (Status s = buffer->upload(host.data(), count * layout.record_stride, first * layout.record_stride); !s) return s;
  }
  slab = std::move(*buffer);
  return Ok{};
}

// Slots after the VRAM ones: the host's experts in expert order, then the remote ones.
void assign_other_slots(std::vector<int>::iterator first, std::uint32_t experts, const std::vector<int>& remote,
                        int layer_slots, std::vector<int>& host_experts, int& remote_count) {
  std::vector<int> remote_ids;
  for (std::uint32_t e = 0; e < experts; ++e) {
    int& slot = first[e];
    if (slot >= 0) continue;
    if (std::find(remote.begin(), remote.end(), static_cast<int>(e)) != remote.end()) {
      remote_ids.push_back(static_cast<int>(e));
      continue;
    }
    slot = layer_slots + static_cast<int>(host_experts.size());  // a host slot
    host_experts.push_back(static_cast<int>(e));
  }
  for (std::size_t i = 0; i < remote_ids.size(); ++i) {
    first[remote_ids[i]] = layer_slots + static_cast<int>(host_experts.size() + i);  // a remote slot
  }
  remote_count = static_cast<int>(remote_ids.size());
}

Status upload_experts(const gpu::DecoderModel& model, const std::vector<std::vector<int>>& remote, CudaExperts& out) {
  if (Status s = expert_layout(model, out.layout); !s) return s;
  const container::ExpertLayout& layout = model.container->index().experts;
  std::vector<int> tables(static_cast<std::size_t>(layout.layers) * layout.experts, -1);
  out.slabs.resize(layout.layers);
  out.slot_counts.assign(layout.layers, 0);
  for (std::uint32_t l = 0; l < layout.layers; ++l) {
    const std::vector<int>& chosen = l < model.vram_experts.size() ? model.vram_experts[l] : std::vector<int>{};
    for (std::size_t slot = 0; slot < chosen.size(); ++slot) {
      const int e = chosen[slot];
      const std::size_t at = static_cast<std::size_t>(l) * layout.experts + static_cast<std::size_t>(e);
      if (e < 0 || static_cast<std::uint32_t>(e) >= layout.experts || tables[at] >= 0) {
        return make_error("the VRAM tier of MoE layer " + std::to_string(l) + " names expert " + std::to_string(e) +
                          " twice or out of range (0.." + std::to_string(layout.experts - 1) + "): re-plan");
      }
      tables[at] = static_cast<int>(slot);
    }
    out.slot_counts[l] = static_cast<int>(chosen.size());
    if (Status s = upload_layer_experts(model, l, chosen, out.slabs[l]); !s) return s;
  }
  out.slot_of.resize(layout.layers);
  out.host_experts.resize(layout.layers);
  out.remote_counts.assign(layout.layers, 0);
  for (std::uint32_t l = 0; l < layout.layers; ++l) {
    const auto first = tables.begin() + static_cast<std::ptrdiff_t>(l * layout.experts);
    assign_other_slots(first, layout.experts, l < remote.size() ? remote[l] : std::vector<int>{}, out.slot_counts[l],
                       out.host_experts[l], out.remote_counts[l]);
    out.slot_of[l].assign(first, first + layout.experts);
  }
  auto buffer = DeviceBuffer::allocate(std::max<std::size_t>(tables.size(), 1) * 4);
  if (!buffer) return buffer.error();
  out.slot_tables = std::move(*buffer);
  return out.slot_tables.upload(tables.data(), tables.size() * 4);
}

}  // namespace

std::uint64_t CudaExperts::bytes() const {
  std::uint64_t sum = 0;
  for (const DeviceBuffer& slab : slabs) sum += slab.bytes();
  return sum;
}

std::uint64_t CudaExperts::page_rounding() const {
  std::uint64_t sum = cuda::page_rounding(slot_tables.bytes());
  for (const DeviceBuffer& slab : slabs) sum += cuda::page_rounding(slab.bytes());
  return sum;
}

Result<CudaWeights> upload_cuda_weights(const gpu::DecoderModel& model, const std::vector<std::vector<int>>& remote) {
  DenseGatherer g(model);
  CudaWeights out;
  if (Status s = gpu::gather_decoder_tensors(g, model, out); !s) return s.error();
  if (Status s = check_mlp_pairs(out.layers); !s) return s.error();
  auto dense = g.finish();
  if (!dense) return dense.error();
  out.dense = std::move(*dense);
  out.dense_formats = g.formats();
  if (Status s = upload_experts(model, remote, out.experts); !s) return s.error();
  return out;
}

}  // namespace coli::cuda
