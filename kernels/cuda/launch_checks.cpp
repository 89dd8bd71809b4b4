// Every launch's arguments checked on the host before a kernel runs: formats
// with kernels, shapes, token and expert counts, and that every buffer holds
// what the kernel will read or write. The error names the call and field.
#include <cstdint>
#include <string>

#include "cuda/cuda_kernels.h"
#include "cuda/kernel_launch.h"

namespace coli::kernels::cuda {
namespace {

Status fail(const std::string& call, const std::string& what) { return make_error(call + ": " + what); }

Status check_format_and_shape(const std::string& call, WeightFormat format, int rows, int cols,
                              const char* rows_name, const char* cols_name) {
  if (format != WeightFormat::q8_row && format != WeightFormat::q4_g64) {
    return fail(call, "format " + std::string(name_of(format)) + " has no CUDA kernel (q8_row, q4_g64)");
  }
  if (rows < 1) return fail(call, std::string(rows_name) + " is " + std::to_string(rows) + "; it must be at least 1");
  if (cols < 1) return fail(call, std::string(cols_name) + " is " + std::to_string(cols) + "; it must be at least 1");
  if (!traits(format).valid_cols(static_cast<std::uint64_t>(cols))) {
    return fail(call, std::string(cols_name) + " is " + std::to_string(cols) + "; " + std::string(name_of(format)) +
                          " needs a multiple of " + std::to_string(traits(format).block_cols));
  }
  return Ok{};
}

// `buffer` exists and holds at least `needed` bytes.
Status check_buffer(const std::string& call, const char* name, const DeviceBuffer* buffer, std::uint64_t needed) {
  if (buffer == nullptr) return fail(call, std::string(name) + " is missing");
  if (buffer->bytes() < needed) {
    return fail(call, std::string(name) + " holds " + std::to_string(buffer->bytes()) + " bytes; it needs " +
                          std::to_string(needed));
  }
  return Ok{};
}

std::uint64_t floats(std::uint64_t a, std::uint64_t b = 1) { return a * b * sizeof(float); }

}  // namespace

Status gemv(const DeviceMatrix& w, const DeviceBuffer& x, DeviceBuffer& y, int count) {
  const std::string call = "cuda gemv";
  if (Status ok = check_format_and_shape(call, w.format, w.rows, w.cols, "rows", "cols"); !ok) return ok;
  if (count < 1 || count > kMaxGemvTokens) {
    return fail(call, "count is " + std::to_string(count) + "; it must be 1.." + std::to_string(kMaxGemvTokens));
  }
  const WeightFormatTraits& format = traits(w.format);
  const auto rows = static_cast<std::uint64_t>(w.rows);
  const auto cols = static_cast<std::uint64_t>(w.cols);
  for (Status ok : {check_buffer(call, "weights", w.weights, format.weight_bytes(rows, cols)),
                    check_buffer(call, "scales", w.scales, format.scale_bytes_of(rows, cols)),
                    check_buffer(call, "x", &x, floats(static_cast<std::uint64_t>(count), cols)),
                    check_buffer(call, "y", &y, floats(static_cast<std::uint64_t>(count), rows))}) {
    if (!ok) return ok;
  }
  const detail::MatrixPointers matrix{static_cast<const std::uint8_t*>(w.weights->data()), w.scales->data(), w.rows,
                                      w.cols};
  return detail::launch_status(call + " launch", detail::launch_gemv(w.format, matrix, static_cast<const float*>(x.data()),
                                                                     static_cast<float*>(y.data()), count));
}

namespace {

// One matrix of the record: inside the stride, weights 16-byte aligned,
// scales 4-byte aligned.
Status check_record_matrix(const std::string& call, const ExpertRecordLayout& layout, const char* name,
                           std::size_t weights, std::size_t scales, int rows, int cols) {
  const WeightFormatTraits& format = traits(layout.format);
  const auto r = static_cast<std::uint64_t>(rows);
  const auto c = static_cast<std::uint64_t>(cols);
  const std::string field = std::string("layout.") + name;
  if (weights % 16 != 0) return fail(call, field + "_weights (" + std::to_string(weights) + ") is not a multiple of 16");
  if (scales % 4 != 0) return fail(call, field + "_scales (" + std::to_string(scales) + ") is not a multiple of 4");
  if (weights + format.weight_bytes(r, c) > layout.record_stride) {
    return fail(call, field + "_weights end past record_stride (" + std::to_string(layout.record_stride) + ")");
  }
  if (scales + format.scale_bytes_of(r, c) > layout.record_stride) {
    return fail(call, field + "_scales end past record_stride (" + std::to_string(layout.record_stride) + ")");
  }
  return Ok{};
}

Status check_experts(const std::string& call, const ExpertRecordLayout& layout, const ExpertSelection& selection) {
  if (Status ok = check_format_and_shape(call, layout.format, layout.width, layout.hidden, "layout.width",
                                         "layout.hidden");
      !ok) {
    return ok;
  }
  if (!traits(layout.format).valid_cols(static_cast<std::uint64_t>(layout.width))) {
    return fail(call, "layout.width is " + std::to_string(layout.width) + "; " + std::string(name_of(layout.format)) +
                          " needs a multiple of " + std::to_string(traits(layout.format).block_cols));
  }
  if (layout.record_stride == 0 || layout.record_stride % 16 != 0) {
    return fail(call, "layout.record_stride (" + std::to_string(layout.record_stride) +
                          ") must be a positive multiple of 16");
  }
  for (Status ok : {check_record_matrix(call, layout, "gate", layout.gate_weights, layout.gate_scales, layout.width,
                                        layout.hidden),
                    check_record_matrix(call, layout, "up", layout.up_weights, layout.up_scales, layout.width,
                                        layout.hidden),
                    check_record_matrix(call, layout, "down", layout.down_weights, layout.down_scales, layout.hidden,
                                        layout.width)}) {
    if (!ok) return ok;
  }
  if (selection.slot_count < 1) return fail(call, "selection.slot_count must be at least 1");
  if (selection.k < 1 || selection.k > kMaxSelectedExperts) {
    return fail(call, "selection.k is " + std::to_string(selection.k) + "; it must be 1.." +
                          std::to_string(kMaxSelectedExperts));
  }
  if (Status ok = check_buffer(call, "selection.slab", selection.slab,
                               static_cast<std::uint64_t>(selection.slot_count) * layout.record_stride);
      !ok) {
    return ok;
  }
  return check_buffer(call, "selection.choices", selection.choices,
                      static_cast<std::uint64_t>(selection.k) * sizeof(ExpertChoice));
}

detail::ExpertPointers expert_pointers(const ExpertSelection& selection) {
  return {static_cast<const std::uint8_t*>(selection.slab->data()), selection.slot_count,
          static_cast<const ExpertChoice*>(selection.choices->data()), selection.k};
}

}  // namespace

Status expert_gate_up(const ExpertRecordLayout& layout, const ExpertSelection& selection, const DeviceBuffer& x,
                      DeviceBuffer& activations) {
  const std::string call = "cuda expert_gate_up";
  if (Status ok = check_experts(call, layout, selection); !ok) return ok;
  const auto k = static_cast<std::uint64_t>(selection.k);
  for (Status ok : {check_buffer(call, "x", &x, floats(static_cast<std::uint64_t>(layout.hidden))),
                    check_buffer(call, "activations", &activations, floats(k, static_cast<std::uint64_t>(layout.width)))}) {
    if (!ok) return ok;
  }
  return detail::launch_status(call + " launch",
                               detail::launch_expert_gate_up(layout, expert_pointers(selection),
                                                             static_cast<const float*>(x.data()),
                                                             static_cast<float*>(activations.data())));
}

Status expert_down_sum(const ExpertRecordLayout& layout, const ExpertSelection& selection,
                       const DeviceBuffer& activations, DeviceBuffer& out) {
  const std::string call = "cuda expert_down_sum";
  if (Status ok = check_experts(call, layout, selection); !ok) return ok;
  const auto k = static_cast<std::uint64_t>(selection.k);
  for (Status ok : {check_buffer(call, "activations", &activations, floats(k, static_cast<std::uint64_t>(layout.width))),
                    check_buffer(call, "out", &out, floats(static_cast<std::uint64_t>(layout.hidden)))}) {
    if (!ok) return ok;
  }
  return detail::launch_status(call + " launch",
                               detail::launch_expert_down_sum(layout, expert_pointers(selection),
                                                              static_cast<const float*>(activations.data()),
                                                              static_cast<float*>(out.data())));
}

}  // namespace coli::kernels::cuda
