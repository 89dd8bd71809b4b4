#include "dense_weights.h"

namespace coli::runtime {

Result<DenseWeights> DenseWeights::load(const container::ContainerReader& reader) {
  DenseWeights weights;
  for (const container::TensorEntry& entry : reader.index().tensors) {
    Tensor tensor;
    if (entry.dtype == "Q8_ROW") tensor.q8_row = true;
    else if (entry.dtype == "Q4_G64") tensor.q4_g64 = true;
    else if (entry.dtype == "F32") tensor.dtype = forward::Dtype::f32;
    else if (entry.dtype == "BF16") tensor.dtype = forward::Dtype::bf16;
    else if (entry.dtype == "F16") tensor.dtype = forward::Dtype::f16;
    else return make_error(reader.path().string() + ": tensor " + entry.name + " has dtype " + entry.dtype + ", which the engine cannot use");
    tensor.shape = entry.shape;
    tensor.data.resize(entry.bytes);
    if (Status s = reader.read(entry.offset, tensor.data); !s) return s.error();
    weights.bytes_ += entry.bytes;
    weights.tensors_.emplace(entry.name, std::move(tensor));
  }
  return weights;
}

Result<forward::DenseMatrix> DenseWeights::matrix(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return make_error("the container has no tensor " + name);
  const Tensor& t = found->second;
  if (t.q8_row || t.q4_g64) {
    return make_error("tensor " + name + " is quantised; the engine needs it in float (convert with --dense source)");
  }
  const int rows = static_cast<int>(t.shape.at(0));
  const int cols = t.shape.size() > 1 ? static_cast<int>(t.shape[1]) : 1;
  return forward::DenseMatrix{t.dtype, rows, cols, t.data.data()};
}

Result<Linear> DenseWeights::linear(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return make_error("the container has no tensor " + name);
  const Tensor& t = found->second;
  if (!t.q8_row && !t.q4_g64) {
    auto dense = matrix(name);
    if (!dense) return dense.error();
    const auto format = dense->dtype == forward::Dtype::bf16 ? backend::WeightFormat::bf16
                        : dense->dtype == forward::Dtype::f16 ? backend::WeightFormat::f16
                                                              : backend::WeightFormat::f32;
    return Linear{static_cast<const std::byte*>(dense->data), nullptr, format, dense->rows, dense->cols};
  }
  const auto rows = t.shape.at(0), cols = t.shape.at(1);
  const std::uint64_t scales = t.q4_g64 ? container::q4_g64_scales_offset(rows, cols)
                                        : container::q8_row_scales_offset(rows, cols);
  return Linear{t.data.data(), t.data.data() + scales,
                t.q4_g64 ? backend::WeightFormat::q4_g64 : backend::WeightFormat::q8_row, static_cast<int>(rows),
                static_cast<int>(cols)};
}

std::vector<float> DenseWeights::vector(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return {};
  const Tensor& t = found->second;
  std::uint64_t count = 1;
  for (std::uint64_t d : t.shape) count *= d;
  std::vector<float> out(count);
  forward::dense_row(forward::DenseMatrix{t.dtype, 1, static_cast<int>(count), t.data.data()}, 0, out);
  return out;
}

}  // namespace coli::runtime
