#include "dense_weights.h"

namespace coli::runtime {

Result<DenseWeights> DenseWeights::load(const container::ContainerReader& reader,
                                        const std::function<bool(const std::string&)>& wanted) {
  // Every tensor at a 64-byte boundary of one block: first the offsets, then the reads.
  constexpr std::uint64_t kTensorAlignment = 64;
  std::vector<std::pair<const container::TensorEntry*, std::uint64_t>> placed;
  std::uint64_t total = 0;
  for (const container::TensorEntry& entry : reader.index().tensors) {
    if (wanted && !wanted(entry.name)) continue;
    placed.emplace_back(&entry, total);
    total += (entry.bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  }
  DenseWeights weights;
  auto memory = WeightMemory::allocate(static_cast<std::size_t>(total), "the model's dense weights");
  if (!memory) return memory.error();
  weights.memory_ = std::move(*memory);
  for (const auto& [entry, offset] : placed) {
    Tensor tensor;
    tensor.format = entry->dtype;  // the reader checked it is a known dtype of the right size
    tensor.shape = entry->shape;
    const std::span<std::byte> data(weights.memory_.data() + offset, static_cast<std::size_t>(entry->bytes));
    if (Status s = reader.read(entry->offset, data); !s) return s.error();
    tensor.data = data;
    weights.bytes_ += entry->bytes;
    weights.tensors_.emplace(entry->name, std::move(tensor));
  }
  return weights;
}

std::span<const std::byte> DenseWeights::bytes_of(const std::string& name) const {
  const auto found = tensors_.find(name);
  return found == tensors_.end() ? std::span<const std::byte>() : found->second.data;
}

Result<forward::DenseMatrix> DenseWeights::matrix(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return make_error("the container has no tensor " + name);
  const Tensor& t = found->second;
  if (traits(t.format).quantized) {
    return make_error("tensor " + name + " is quantised; the engine needs it in float (convert with --dense source)");
  }
  const int rows = static_cast<int>(t.shape.at(0));
  const int cols = t.shape.size() > 1 ? static_cast<int>(t.shape[1]) : 1;
  return forward::DenseMatrix{t.format, rows, cols, t.data.data()};
}

Result<Linear> DenseWeights::linear(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return make_error("the container has no tensor " + name);
  const Tensor& t = found->second;
  if (!traits(t.format).quantized) {
    auto dense = matrix(name);
    if (!dense) return dense.error();
    return Linear{static_cast<const std::byte*>(dense->data), nullptr, t.format, dense->rows, dense->cols};
  }
  const auto rows = t.shape.at(0), cols = t.shape.at(1);
  return Linear{t.data.data(), t.data.data() + traits(t.format).scales_offset(rows, cols), t.format,
                static_cast<int>(rows), static_cast<int>(cols)};
}

std::vector<float> DenseWeights::vector(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return {};
  const Tensor& t = found->second;
  std::uint64_t count = 1;
  for (std::uint64_t d : t.shape) count *= d;
  std::vector<float> out(count);
  forward::dense_row(forward::DenseMatrix{t.format, 1, static_cast<int>(count), t.data.data()}, 0, out);
  return out;
}

}  // namespace coli::runtime
