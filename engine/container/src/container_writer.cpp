#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <tuple>

#include "coli/base/checked_math.h"
#include "coli/base/pending_file.h"
#include "coli/container/container.h"
#include "container_format.h"

namespace coli::container {

struct ContainerWriter::State {
  std::filesystem::path path;
  std::optional<PendingFile> file;  // unpublished until finish(); a kill leaves no temporary behind
  std::uint64_t end = 0;  // next free byte
  ContainerIndex index;
  bool experts_begun = false;
  std::uint64_t experts_written = 0;

  Status write_at(std::uint64_t offset, const void* data, std::size_t size) {
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::pwrite(file->fd(), bytes, size, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return make_error("cannot write " + path.string() + ": " + std::strerror(errno));
      bytes += n;
      offset += static_cast<std::uint64_t>(n);
      size -= static_cast<std::size_t>(n);
    }
    return Ok{};
  }
};

ContainerWriter::ContainerWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
ContainerWriter::ContainerWriter(ContainerWriter&&) noexcept = default;
ContainerWriter& ContainerWriter::operator=(ContainerWriter&&) noexcept = default;
ContainerWriter::~ContainerWriter() = default;

Result<ContainerWriter> ContainerWriter::create(const std::filesystem::path& path) {
  auto state = std::make_unique<State>();
  state->path = path;
  auto file = PendingFile::create(path);
  if (!file) return make_error(file.error().message + " (choose a writable directory with enough space)");
  state->file.emplace(std::move(*file));
  std::array<char, format::kHeaderBytes> header{};
  std::memcpy(header.data(), format::kMagic.data(), format::kMagic.size());
  const std::uint32_t version = kFormatVersion;  // little-endian hosts only (x86-64, arm64)
  std::memcpy(header.data() + 8, &version, 4);
  if (Status s = state->write_at(0, header.data(), header.size()); !s) return s.error();
  state->end = kAlignment;
  return ContainerWriter(std::move(state));
}

Status ContainerWriter::add_tensor(const std::string& name, WeightFormat dtype,
                                   std::vector<std::uint64_t> shape, std::span<const std::byte> data) {
  State& s = *state_;
  if (s.experts_begun) return make_error("container: dense tensor " + name + " added after the experts");
  const std::uint64_t offset = s.end;
  if (Status w = s.write_at(offset, data.data(), data.size()); !w) return w;
  s.end = format::align_up(offset + data.size());
  format::Checksum checksum;  // over the whole extent: the padding up to s.end stays a hole, read as zeros
  checksum.update(data);
  checksum.update_zeros(s.end - offset - data.size());
  s.index.tensors.push_back({name, dtype, std::move(shape), offset, data.size(), checksum.digest()});
  return Ok{};
}

ExpertLayout single_layer_expert_layout(WeightFormat format, std::uint64_t hidden, std::uint64_t width, std::uint32_t experts) {
  ExpertRecordLayout record = expert_record_layout(format, hidden, width);
  ExpertLayout layout;
  layout.format = format;
  layout.layers = 1;
  layout.experts = experts;
  layout.model_layers = {0};
  layout.parts = std::move(record.parts);
  layout.record_bytes = record.record_bytes;
  layout.record_stride = format::align_up(record.record_bytes);
  layout.layer_offsets = {0};
  return layout;
}

ExpertRecordLayout expert_record_layout(WeightFormat format, std::uint64_t hidden, std::uint64_t width) {
  const WeightFormatTraits& t = traits(format);
  auto align = [](std::uint64_t v) { return (v + kScalesAlignment - 1) / kScalesAlignment * kScalesAlignment; };
  ExpertRecordLayout layout;
  std::uint64_t offset = 0;
  for (const auto& [name, rows, cols] : {std::tuple{"gate", width, hidden}, {"up", width, hidden}, {"down", hidden, width}}) {
    const std::uint64_t weights = t.weight_bytes(rows, cols), scales = t.scale_bytes_of(rows, cols);
    ExpertPart part{name, static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(cols), offset, weights, 0, scales};
    part.scales_offset = align(offset + weights);
    offset = align(part.scales_offset + scales);
    layout.parts.push_back(part);
  }
  layout.record_bytes = offset;
  return layout;
}

Status ContainerWriter::begin_experts(WeightFormat expert_format, std::uint32_t layers, std::uint32_t experts,
                                      std::vector<std::uint32_t> model_layers, std::vector<ExpertPart> parts) {
  State& s = *state_;
  if (s.experts_begun) return make_error("container: begin_experts called twice");
  if (model_layers.size() != layers) return make_error("container: model_layers must list one entry per MoE layer");
  ExpertLayout& layout = s.index.experts;
  layout = ExpertLayout{expert_format, layers, experts, std::move(model_layers), std::move(parts), 0, 0, {}, {}};
  for (const ExpertPart& part : layout.parts) {
    layout.record_bytes = std::max({layout.record_bytes, part.weights_offset + part.weights_bytes,
                                    part.scales_offset + part.scales_bytes});
  }
  layout.record_stride = format::align_up(layout.record_bytes);
  const auto layer_bytes = checked_mul(experts, layout.record_stride);
  if (!layer_bytes || !checked_mul(*layer_bytes, layers) || !checked_add(s.end, *layer_bytes * layers)) {
    return make_error("container: " + std::to_string(layers) + " layers of " + std::to_string(experts) +
                      " expert records of " + std::to_string(layout.record_stride) + " bytes pass 2^64 bytes");
  }
  for (std::uint32_t layer = 0; layer < layers; ++layer) {
    layout.layer_offsets.push_back(s.end + static_cast<std::uint64_t>(layer) * experts * layout.record_stride);
  }
  s.experts_begun = true;
  return Ok{};
}

Status ContainerWriter::add_expert(std::span<const std::byte> record) {
  State& s = *state_;
  const ExpertLayout& layout = s.index.experts;
  if (!s.experts_begun) return make_error("container: add_expert before begin_experts");
  if (record.size() != layout.record_bytes) {
    return make_error("container: expert record of " + std::to_string(record.size()) + " bytes, expected " +
                      std::to_string(layout.record_bytes));
  }
  const std::uint64_t total = static_cast<std::uint64_t>(layout.layers) * layout.experts;
  if (s.experts_written >= total) return make_error("container: more expert records than layers x experts");
  const auto layer = static_cast<std::uint32_t>(s.experts_written / layout.experts);
  const auto expert = static_cast<std::uint32_t>(s.experts_written % layout.experts);
  const std::uint64_t offset = layout.record_offset(layer, expert);
  if (Status w = s.write_at(offset, record.data(), record.size()); !w) return w;
  format::Checksum checksum;  // the stride's tail stays a hole, read as zeros
  checksum.update(record);
  checksum.update_zeros(layout.record_stride - record.size());
  s.index.experts.record_checksums.push_back(checksum.digest());
  ++s.experts_written;
  s.end = offset + layout.record_stride;
  return Ok{};
}

namespace {

// Re-reads the finished temporary file as any reader will, before it is
// published: a write that went wrong never replaces a good container.
Status verify_written(const std::filesystem::path& temp) {
  auto reader = ContainerReader::open(temp);
  if (!reader) return make_error("the container just written does not read back: " + reader.error().message);
  if (auto verified = reader->verify_checksums(); !verified) {
    return make_error("the container just written does not match what was written: " + verified.error().message);
  }
  return Ok{};
}

}  // namespace

Status ContainerWriter::add_runtime_file(std::string name, std::string bytes) {
  ContainerIndex& index = state_->index;
  if (std::find(kRuntimeFileNames.begin(), kRuntimeFileNames.end(), name) == kRuntimeFileNames.end()) {
    return make_error("container: '" + name + "' is not a runtime file coli carries");
  }
  if (index.find_runtime_file(name) != nullptr) return make_error("container: " + name + " added twice");
  if (bytes.size() > kMaxRuntimeFileBytes) {
    return make_error("container: " + name + " is " + std::to_string(bytes.size()) + " bytes, above the " +
                      std::to_string(kMaxRuntimeFileBytes) + " a container carries");
  }
  index.runtime_files.push_back({std::move(name), std::move(bytes)});
  return Ok{};
}

Status ContainerWriter::finish(const std::string& architecture, const std::string& config_json,
                               const std::string& source) {
  State& s = *state_;
  const ExpertLayout& layout = s.index.experts;
  if (s.experts_written != static_cast<std::uint64_t>(layout.layers) * layout.experts) {
    return make_error("container: " + std::to_string(s.experts_written) + " expert records written, expected " +
                      std::to_string(static_cast<std::uint64_t>(layout.layers) * layout.experts));
  }
  s.index.architecture = architecture;
  s.index.config_json = config_json;
  s.index.source = source;
  std::vector<std::uint64_t> checksums;  // the table: tensors in index order, then records
  for (const TensorEntry& t : s.index.tensors) checksums.push_back(t.checksum);
  checksums.insert(checksums.end(), layout.record_checksums.begin(), layout.record_checksums.end());
  const format::ChecksumTable table{s.end, checksums.size(), format::checksum_of(std::as_bytes(std::span(checksums)))};
  if (Status w = s.write_at(table.offset, checksums.data(), checksums.size() * 8); !w) return w;
  std::string index_text;
  try {
    index_text = format::index_to_json(s.index, table).dump();
  } catch (const nlohmann::json::exception& error) {
    return make_error("container: config.json is not valid JSON: " + std::string(error.what()));
  }
  const std::uint64_t index_offset = table.offset + checksums.size() * 8;
  if (Status w = s.write_at(index_offset, index_text.data(), index_text.size()); !w) return w;
  std::array<char, format::kTrailerBytes> trailer{};
  const std::uint64_t index_bytes = index_text.size();
  const std::uint64_t index_checksum = format::checksum_of(std::as_bytes(std::span(index_text)));
  std::memcpy(trailer.data(), &index_offset, 8);
  std::memcpy(trailer.data() + 8, &index_bytes, 8);
  std::memcpy(trailer.data() + 16, &index_checksum, 8);
  std::memcpy(trailer.data() + 24, format::kTrailerMagic.data(), 8);
  if (Status w = s.write_at(index_offset + index_bytes, trailer.data(), trailer.size()); !w) return w;
  // Read back through the descriptor: the file may have no name until commit.
  if (Status verified = verify_written("/proc/self/fd/" + std::to_string(s.file->fd())); !verified) return verified;
  if (Status published = s.file->commit(); !published) return published;
  return Ok{};
}

}  // namespace coli::container
