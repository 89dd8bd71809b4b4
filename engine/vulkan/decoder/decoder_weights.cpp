#include "vulkan/decoder/decoder_weights.h"

#include <algorithm>
#include <cstring>

#include "coli/base/text.h"
#include "coli/forward/ops.h"
#include "coli/gpu/decoder_tensors.h"

namespace coli::vulkan {
namespace {

constexpr std::size_t kTensorAlignment = 256;  // any device's minStorageBufferOffsetAlignment

// Dense tensors gathered first, so one buffer of the exact size is made;
// each comes from host memory or straight from the container file.
class DensePacker {
 public:
  explicit DensePacker(const container::ContainerReader& file) : file_(file) {}
  // Reserves room for the tensor; returns the offset.
  std::size_t add(const DecoderTensor& t) {
    const std::size_t bytes = t.bytes.empty() ? t.file_bytes : t.bytes.size();
    entries_.push_back({reserve(bytes), t.bytes, t.file_offset, bytes});
    return entries_.back().offset;
  }
  std::size_t add_owned(std::vector<std::byte> bytes) {
    owned_.push_back(std::make_unique<std::vector<std::byte>>(std::move(bytes)));
    entries_.push_back({reserve(owned_.back()->size()), *owned_.back(), 0, owned_.back()->size()});
    return entries_.back().offset;
  }
  std::size_t size() const { return size_; }
  Status upload(StagingRing& ring, AddressedBuffer& buffer) const {
    for (const Entry& e : entries_) {
      Status s = e.bytes.empty() ? ring.upload_from_file(buffer, e.offset, file_, e.file_offset, e.size)
                                 : ring.upload(buffer, e.offset, e.bytes);
      if (!s) return s;
    }
    return ring.finish();
  }

 private:
  struct Entry {
    std::size_t offset;
    std::span<const std::byte> bytes;
    std::uint64_t file_offset;
    std::size_t size;
  };
  std::size_t reserve(std::size_t bytes) {
    const std::size_t offset = size_;
    size_ = (size_ + bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    return offset;
  }
  const container::ContainerReader& file_;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> owned_;
  std::size_t size_ = 0;
};

// A 1-D tensor widened to f32 (norm weights, biases: the kernels read floats).
Result<std::vector<std::byte>> widened(const DecoderTensor& t, const container::ContainerReader& file) {
  std::vector<std::byte> stored(t.bytes.begin(), t.bytes.end());
  if (stored.empty()) {
    stored.resize(t.file_bytes);
    if (Status s = file.read(t.file_offset, stored); !s) return s.error();
  }
  std::size_t count = 1;
  for (std::uint64_t d : t.shape) count *= d;
  if (stored.size() < traits(t.dtype).weight_bytes(1, count)) {
    return make_error("a vector tensor is shorter than its shape: convert the model again");
  }
  std::vector<float> values(count);
  forward::dense_row({t.dtype, 1, static_cast<int>(count), stored.data()}, 0, values);
  std::vector<std::byte> bytes(count * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Offsets within the dense buffer, resolved to addresses once it exists.
struct PendingMatrix {
  GpuMatrix* target;
  std::size_t weights, scales;
  bool has_scales;
};

class WeightGatherer {
 public:
  explicit WeightGatherer(const DecoderModel& model) : model_(model), packer_(*model.container) {}

  Status matrix(const std::string& name, GpuMatrix& out, bool required = true) {
    const DecoderTensor* t = model_.tensor(name);
    if (!t) return required ? make_error("the container has no tensor " + name) : Status(Ok{});
    if (t->shape.size() != 2) return make_error("tensor " + name + " is not 2-D, which the GPU decoder needs");
    out.format = t->dtype;
    out.rows = static_cast<std::uint32_t>(t->shape[0]);
    out.cols = static_cast<std::uint32_t>(t->shape[1]);
    const std::uint32_t per_word[] = {1, 2, 2, 4, 8};
    if (out.cols % per_word[static_cast<int>(out.format)] != 0) {
      return make_error("tensor " + name + " has " + std::to_string(out.cols) + " columns; the GPU kernels read " +
                        std::string(name_of(t->dtype)) + " rows in whole 32-bit words (a multiple of " +
                        std::to_string(per_word[static_cast<int>(out.format)]) + "): run with --gpu none");
    }
    const std::size_t at = packer_.add(*t);
    const std::size_t scales = traits(out.format).quantized ? traits(out.format).scales_offset(out.rows, out.cols) : 0;
    pending_.push_back({&out, at, at + scales, scales != 0});
    if (std::find(formats_.begin(), formats_.end(), out.format) == formats_.end()) formats_.push_back(out.format);
    return Ok{};
  }

  // A vector as f32; `out` stays 0 when the tensor is absent.
  Status vector(const std::string& name, VkDeviceAddress& out) {
    const DecoderTensor* t = model_.tensor(name);
    if (!t) return Ok{};
    if (traits(t->dtype).quantized) {
      return make_error("tensor " + name + " is " + std::string(name_of(t->dtype)) +
                        "; the GPU decoder needs norms and biases in float");
    }
    auto values = widened(*t, *model_.container);
    if (!values) return make_error("tensor " + name + ": " + values.error().message);
    vectors_.push_back({&out, packer_.add_owned(std::move(*values))});
    return Ok{};
  }

  Result<std::unique_ptr<AddressedBuffer>> finish(ComputeContext& context, StagingRing& ring) {
    auto buffer = AddressedBuffer::create(context, packer_.size(), Placement::device, "dense weights");
    if (!buffer) return buffer.error();
    if (Status s = packer_.upload(ring, **buffer); !s) return s.error();
    const VkDeviceAddress base = (*buffer)->address();
    for (const PendingMatrix& m : pending_) {
      m.target->w = base + m.weights;
      m.target->s = m.has_scales ? base + m.scales : base + m.weights;
    }
    for (const auto& [target, offset] : vectors_) *target = base + offset;
    return buffer;
  }
  const std::vector<WeightFormat>& formats() const { return formats_; }
  bool has(const std::string& name) const { return model_.tensor(name) != nullptr; }

 private:
  const DecoderModel& model_;
  DensePacker packer_;
  std::vector<PendingMatrix> pending_;
  std::vector<std::pair<VkDeviceAddress*, std::size_t>> vectors_;
  std::vector<WeightFormat> formats_;
};

Result<std::uint32_t> part_offset(const container::ExpertLayout& layout, const std::string& name, bool scales) {
  for (const container::ExpertPart& part : layout.parts) {
    if (part.name == name) return static_cast<std::uint32_t>(scales ? part.scales_offset : part.weights_offset);
  }
  return make_error("the container's expert records have no '" + name + "' part: convert the model again");
}

Status upload_experts(ComputeContext& context, StagingRing& ring, const DecoderModel& model, GpuExperts& out) {
  const container::ExpertLayout& layout = model.container->index().experts;
  out.format = layout.format;
  if (layout.record_stride > 0xffffffffull) return make_error("expert records over 4 GiB are not supported on the GPU");
  out.stride = static_cast<std::uint32_t>(layout.record_stride);
  out.width = static_cast<std::uint32_t>(model.config->moe_intermediate_size);
  for (auto [name, w, s] : {std::tuple{"gate", &out.gate_w, &out.gate_s}, {"up", &out.up_w, &out.up_s},
                            {"down", &out.down_w, &out.down_s}}) {
    auto weights = part_offset(layout, name, false);
    auto scales = part_offset(layout, name, true);
    if (!weights) return weights.error();
    *w = *weights;
    *s = out.format == WeightFormat::f32 ? *weights : *scales;
  }
  const std::size_t experts = layout.experts;
  out.slot_of.assign(layout.layers, std::vector<int>(experts, -1));
  out.layers.resize(layout.layers);
  for (std::uint32_t l = 0; l < layout.layers; ++l) {
    const std::vector<int>& chosen = l < model.vram_experts.size() ? model.vram_experts[l] : std::vector<int>{};
    if (chosen.empty()) continue;
    auto buffer = AddressedBuffer::create(context, chosen.size() * layout.record_stride, Placement::device,
                                          "expert slots of MoE layer " + std::to_string(l));
    if (!buffer) return buffer.error();
    for (std::size_t slot = 0; slot < chosen.size(); ++slot) {
      const int e = chosen[slot];
      if (e < 0 || static_cast<std::size_t>(e) >= experts || out.slot_of[l][static_cast<std::size_t>(e)] >= 0) {
        return make_error("the VRAM tier of MoE layer " + std::to_string(l) + " names expert " + std::to_string(e) +
                          " twice or out of range (0.." + std::to_string(experts - 1) + "): re-plan");
      }
      out.slot_of[l][static_cast<std::size_t>(e)] = static_cast<int>(slot);
      if (Status s = ring.upload_from_file(**buffer, slot * layout.record_stride, *model.container,
                                           layout.record_offset(l, static_cast<std::uint32_t>(e)), layout.record_bytes);
          !s) {
        return s;
      }
    }
    out.layers[l] = std::move(*buffer);
  }
  std::vector<int> tables;
  for (const auto& layer : out.slot_of) tables.insert(tables.end(), layer.begin(), layer.end());
  auto buffer = AddressedBuffer::create(context, std::max<std::size_t>(tables.size(), 1) * 4, Placement::device,
                                        "expert slot tables");
  if (!buffer) return buffer.error();
  out.slot_tables = std::move(*buffer);
  if (Status s = ring.upload(*out.slot_tables, 0, std::as_bytes(std::span(tables))); !s) return s;
  return ring.finish();
}

}  // namespace

bool GpuExperts::all_in_vram(int moe_layer) const {
  const auto& slots = slot_of[static_cast<std::size_t>(moe_layer)];
  return std::none_of(slots.begin(), slots.end(), [](int s) { return s < 0; });
}

Result<GpuWeights> upload_weights(ComputeContext& context, StagingRing& ring, const DecoderModel& model) {
  WeightGatherer g(model);
  GpuWeights out;
  if (Status s = gpu::gather_decoder_tensors(g, model, out); !s) return s.error();
  auto dense = g.finish(context, ring);
  if (!dense) return dense.error();
  out.dense = std::move(*dense);
  out.dense_formats = g.formats();
  if (Status s = upload_experts(context, ring, model, out.experts); !s) return s.error();
  return out;
}

}  // namespace coli::vulkan
