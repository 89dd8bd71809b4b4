#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>

#include "coli/container/container.h"
#include "container_format.h"

namespace coli::container {
namespace {

// Every offset and size in the index, checked against the file; the first
// problem found, or "" when the index is consistent.
std::string check_index(const ContainerIndex& index, std::uint64_t data_end) {
  for (const TensorEntry& t : index.tensors) {
    const WeightFormatTraits& format = traits(t.dtype);
    const std::string dtype(format.container_dtype);
    if (format.quantized) {
      if (t.shape.size() != 2 || !format.valid_cols(t.shape[1]) || t.bytes != format.matrix_bytes(t.shape[0], t.shape[1])) {
        return "tensor " + t.name + " is not a 2-D " + dtype + " tensor of its stated size";
      }
    } else {
      const std::uint64_t count = std::accumulate(t.shape.begin(), t.shape.end(), std::uint64_t{1}, std::multiplies<>());
      const std::uint64_t bytes = format.matrix_bytes(1, count);
      if (bytes != t.bytes) return "tensor " + t.name + " holds " + std::to_string(t.bytes) + " bytes, its shape needs " + std::to_string(bytes);
    }
    if (t.offset < kAlignment || t.offset + t.bytes > data_end) return "tensor " + t.name + " lies outside the data region";
  }
  const ExpertLayout& e = index.experts;
  const WeightFormatTraits& format = traits(e.format);
  if (!format.expert_records) {
    return "experts stored as " + std::string(format.name) + ", which coli does not store experts in (q4_g64, q8_row or f32)";
  }
  if (e.layer_offsets.size() != e.layers || e.model_layers.size() != e.layers) return "expert layer tables do not match the layer count";
  if (e.record_stride < e.record_bytes || e.record_stride % kAlignment != 0) return "expert record stride is not an aligned size >= the record";
  for (const ExpertPart& part : e.parts) {
    const std::uint64_t weights = format.weight_bytes(part.rows, part.cols);
    const std::uint64_t scales = format.scale_bytes_of(part.rows, part.cols);
    if (!format.valid_cols(part.cols) || part.weights_bytes != weights || part.scales_bytes != scales) {
      return "expert part " + part.name + " sizes do not match its " + std::to_string(part.rows) + "x" + std::to_string(part.cols) + " " + std::string(format.name) + " shape";
    }
    if (part.weights_offset + weights > e.record_bytes || part.scales_offset + scales > e.record_bytes) return "expert part " + part.name + " overflows its record";
  }
  for (std::uint32_t layer = 0; layer < e.layers; ++layer) {
    if (e.layer_offsets[layer] % kAlignment != 0) return "expert layer " + std::to_string(layer) + " is not aligned";
    if (e.experts > 0 && e.record_offset(layer, e.experts - 1) + e.record_stride > data_end + kAlignment) {
      return "expert layer " + std::to_string(layer) + " runs past the data region";
    }
  }
  return "";
}

}  // namespace

struct ContainerReader::State {
  std::filesystem::path path;
  int fd = -1;
  ContainerIndex index;
  ~State() {
    if (fd >= 0) ::close(fd);
  }
};

ContainerReader::ContainerReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
ContainerReader::ContainerReader(ContainerReader&&) noexcept = default;
ContainerReader& ContainerReader::operator=(ContainerReader&&) noexcept = default;
ContainerReader::~ContainerReader() = default;

Result<ContainerReader> ContainerReader::open(const std::filesystem::path& path) {
  auto state = std::make_unique<State>();
  state->path = path;
  const std::string name = path.string();
  const std::string convert_again = "; convert the model again with `coli convert`";
  state->fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (state->fd < 0) return make_error("cannot open container " + name + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(state->fd, &info) != 0) return make_error("cannot stat " + name + ": " + std::strerror(errno));
  const auto size = static_cast<std::uint64_t>(info.st_size);
  ContainerReader reader(std::move(state));

  std::array<char, format::kHeaderBytes> header{};
  if (size < kAlignment + format::kTrailerBytes || !reader.read(0, std::as_writable_bytes(std::span(header)))) {
    return make_error(name + " is too small to be a coli container" + convert_again);
  }
  if (std::memcmp(header.data(), format::kMagic.data(), 8) != 0) return make_error(name + " is not a coli container (bad magic)");
  std::uint32_t version = 0;
  std::memcpy(&version, header.data() + 8, 4);
  if (version > kFormatVersion) {
    return make_error(name + " uses container format version " + std::to_string(version) +
                      ", newer than this build reads (" + std::to_string(kFormatVersion) +
                      "): upgrade coli or convert the model again with this version");
  }
  std::array<char, format::kTrailerBytes> trailer{};
  if (!reader.read(size - trailer.size(), std::as_writable_bytes(std::span(trailer))) ||
      std::memcmp(trailer.data() + 16, format::kTrailerMagic.data(), 8) != 0) {
    return make_error(name + " has no trailer: the file is truncated or its conversion never finished" + convert_again);
  }
  std::uint64_t index_offset = 0, index_bytes = 0;
  std::memcpy(&index_offset, trailer.data(), 8);
  std::memcpy(&index_bytes, trailer.data() + 8, 8);
  if (index_offset < kAlignment || index_offset + index_bytes + format::kTrailerBytes != size) {
    return make_error(name + ": the trailer points outside the file" + convert_again);
  }
  std::string index_text(index_bytes, '\0');
  if (!reader.read(index_offset, std::as_writable_bytes(std::span(index_text)))) {
    return make_error("cannot read the index of " + name);
  }
  try {
    auto index = format::index_from_json(nlohmann::json::parse(index_text));
    if (!index) return make_error(name + ": " + index.error().message + convert_again);
    reader.state_->index = std::move(*index);
  } catch (const nlohmann::json::exception& error) {
    return make_error(name + ": damaged index (" + std::string(error.what()) + ")" + convert_again);
  }
  if (std::string problem = check_index(reader.state_->index, index_offset); !problem.empty()) {
    return make_error(name + ": " + problem + convert_again);
  }
  return reader;
}

const ContainerIndex& ContainerReader::index() const { return state_->index; }
const std::filesystem::path& ContainerReader::path() const { return state_->path; }
int ContainerReader::fd() const { return state_->fd; }

const TensorEntry* ContainerReader::find_tensor(const std::string& name) const {
  for (const TensorEntry& t : state_->index.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status ContainerReader::read(std::uint64_t offset, std::span<std::byte> out) const {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(state_->fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return make_error("cannot read " + std::to_string(out.size()) + " bytes at " + std::to_string(offset) + " of " +
                        state_->path.string() + (n == 0 ? ": unexpected end of file" : ": " + std::string(std::strerror(errno))));
    }
    done += static_cast<std::size_t>(n);
  }
  return Ok{};
}

}  // namespace coli::container
