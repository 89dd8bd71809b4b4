#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "coli/base/checked_math.h"
#include "coli/container/container.h"
#include "container_format.h"

namespace coli::container {
namespace {

const std::string kConvertAgain = "; convert the model again with `coli convert`";

// A tensor's or an expert part's element count, within kMaxElements (so the
// byte formulas cannot wrap), or nullopt.
std::optional<std::uint64_t> element_count(std::span<const std::uint64_t> shape) {
  const auto count = checked_product(shape);
  if (!count || *count > format::kMaxElements) return std::nullopt;
  return count;
}

std::string check_tensor(const TensorEntry& t, std::uint64_t data_end) {
  const WeightFormatTraits& format = traits(t.dtype);
  const auto count = element_count(t.shape);
  if (!count) return "tensor " + t.name + ": its shape's element count passes 2^56 (a shape product that overflows)";
  if (format.quantized) {
    if (t.shape.size() != 2 || !format.valid_cols(t.shape[1]) || t.bytes != format.matrix_bytes(t.shape[0], t.shape[1])) {
      return "tensor " + t.name + " is not a 2-D " + std::string(format.container_dtype) + " tensor of its stated size";
    }
  } else if (const std::uint64_t bytes = format.matrix_bytes(1, *count); bytes != t.bytes) {
    return "tensor " + t.name + " holds " + std::to_string(t.bytes) + " bytes, its shape needs " + std::to_string(bytes);
  }
  // Its checksummed extent runs to the next alignment boundary, which lies in the data region too.
  const auto end = checked_add(t.offset, t.bytes);
  if (t.offset < kAlignment || !end || *end > data_end || format::align_up(*end) > data_end) {
    return "tensor " + t.name + " (offset " + std::to_string(t.offset) + ", " + std::to_string(t.bytes) +
           " bytes) lies outside the data region [4096, " + std::to_string(data_end) + ")";
  }
  return "";
}

std::string check_part(const ExpertPart& part, const WeightFormatTraits& format, std::uint64_t record_bytes) {
  const std::array<std::uint64_t, 2> shape = {part.rows, part.cols};
  if (!element_count(shape) || !format.valid_cols(part.cols) || part.weights_bytes != format.weight_bytes(part.rows, part.cols) ||
      part.scales_bytes != format.scale_bytes_of(part.rows, part.cols)) {
    return "expert part " + part.name + " sizes do not match its " + std::to_string(part.rows) + "x" +
           std::to_string(part.cols) + " " + std::string(format.name) + " shape";
  }
  if (!range_within(part.weights_offset, part.weights_bytes, 0, record_bytes) ||
      !range_within(part.scales_offset, part.scales_bytes, 0, record_bytes)) {
    return "expert part " + part.name + " overflows its record";
  }
  return "";
}

std::string check_experts(const ExpertLayout& e, std::uint64_t data_end) {
  const WeightFormatTraits& format = traits(e.format);
  if (!format.expert_records) {
    return "experts stored as " + std::string(format.name) + ", which coli does not store experts in (q4_g64, q8_row or f32)";
  }
  if (e.layer_offsets.size() != e.layers || e.model_layers.size() != e.layers) return "expert layer tables do not match the layer count";
  if (e.record_stride < e.record_bytes || e.record_stride % kAlignment != 0 || e.record_stride > data_end) {
    return "expert record stride is not an aligned size >= the record";
  }
  for (const ExpertPart& part : e.parts) {
    if (std::string problem = check_part(part, format, e.record_bytes); !problem.empty()) return problem;
  }
  const auto layer_bytes = checked_mul(e.experts, e.record_stride);
  for (std::uint32_t layer = 0; layer < e.layers; ++layer) {
    const std::uint64_t offset = e.layer_offsets[layer];
    if (offset % kAlignment != 0) return "expert layer " + std::to_string(layer) + " is not aligned";
    if (!layer_bytes || !range_within(offset, *layer_bytes, kAlignment, data_end)) {
      return "expert layer " + std::to_string(layer) + " (offset " + std::to_string(offset) + ") runs past the data region [4096, " +
             std::to_string(data_end) + ")";
    }
  }
  return "";
}

// Every offset and size in the index, checked against the data region
// [kAlignment, data_end) without wrapping; the first problem found, or "".
std::string check_index(const ContainerIndex& index, std::uint64_t data_end) {
  for (const TensorEntry& t : index.tensors) {
    if (std::string problem = check_tensor(t, data_end); !problem.empty()) return problem;
  }
  return check_experts(index.experts, data_end);
}

}  // namespace

struct ContainerReader::State {
  std::filesystem::path path;
  int fd = -1;
  std::uint64_t data_end = 0;  // where the data region ends: the checksum table, then the index
  ContainerIndex index;
  ~State() {
    if (fd >= 0) ::close(fd);
  }
};

ContainerReader::ContainerReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
ContainerReader::ContainerReader(ContainerReader&&) noexcept = default;
ContainerReader& ContainerReader::operator=(ContainerReader&&) noexcept = default;
ContainerReader::~ContainerReader() = default;

namespace {

// Opens `name` only if it is a regular file (a directory, /dev/zero or a FIFO
// would read as nothing or forever): the descriptor and the file's size.
Result<std::pair<int, std::uint64_t>> open_regular_file(const std::string& name) {
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // O_NONBLOCK: a FIFO's open never waits
  if (fd < 0) return make_error("cannot open container " + name + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const bool directory = S_ISDIR(info.st_mode);
    ::close(fd);
    return make_error(name + (directory ? " is a directory" : " is not a regular file") +
                      ": --model takes the container file `coli convert --out` wrote");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return std::pair{fd, static_cast<std::uint64_t>(info.st_size)};
}

}  // namespace

Result<ContainerReader> ContainerReader::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  auto file = open_regular_file(name);
  if (!file) return file.error();
  auto state = std::make_unique<State>();
  state->path = path;
  state->fd = file->first;
  const std::uint64_t size = file->second;
  ContainerReader reader(std::move(state));

  std::array<char, kAlignment> header{};
  if (size < kAlignment + format::kTrailerBytes || !reader.read(0, std::as_writable_bytes(std::span(header)))) {
    return make_error(name + " is too small to be a coli container" + kConvertAgain);
  }
  if (std::memcmp(header.data(), format::kMagic.data(), 8) != 0) return make_error(name + " is not a coli container (bad magic)");
  std::uint32_t version = 0;
  std::memcpy(&version, header.data() + 8, 4);
  if (version > kFormatVersion) {
    return make_error(name + " uses container format version " + std::to_string(version) +
                      ", newer than this build reads (" + std::to_string(kFormatVersion) +
                      "): upgrade coli or convert the model again with this version");
  }
  if (version < kFormatVersion) {
    return make_error(name + " uses container format version " + std::to_string(version) + ", which has no checksums; this build reads version " +
                      std::to_string(kFormatVersion) + kConvertAgain);
  }
  if (std::any_of(header.begin() + 12, header.end(), [](char c) { return c != 0; })) {
    return make_error(name + ": the header's reserved bytes [12, 4096) are not zero: the file is damaged" + kConvertAgain);
  }
  if (Status s = reader.read_index(size); !s) return s.error();
  return reader;
}

Status ContainerReader::read_index(std::uint64_t size) {
  const std::string name = state_->path.string();
  std::array<char, format::kTrailerBytes> trailer{};
  if (!read(size - trailer.size(), std::as_writable_bytes(std::span(trailer))) ||
      std::memcmp(trailer.data() + 24, format::kTrailerMagic.data(), 8) != 0) {
    return make_error(name + " has no trailer: the file is truncated or its conversion never finished" + kConvertAgain);
  }
  std::uint64_t index_offset = 0, index_bytes = 0, index_checksum = 0;
  std::memcpy(&index_offset, trailer.data(), 8);
  std::memcpy(&index_bytes, trailer.data() + 8, 8);
  std::memcpy(&index_checksum, trailer.data() + 16, 8);
  // Checked before anything is allocated: a size that wraps must not become a huge string.
  if (index_bytes > format::kMaxIndexBytes) {
    return make_error(name + ": the trailer's index size " + std::to_string(index_bytes) + " passes the " +
                      std::to_string(format::kMaxIndexBytes >> 20) + " MiB bound" + kConvertAgain);
  }
  if (!range_within(index_offset, index_bytes, kAlignment, size - format::kTrailerBytes) ||
      index_offset + index_bytes != size - format::kTrailerBytes) {
    return make_error(name + ": the trailer's index offset " + std::to_string(index_offset) + " and size " +
                      std::to_string(index_bytes) + " do not end at the trailer" + kConvertAgain);
  }
  std::string index_text(index_bytes, '\0');
  if (!read(index_offset, std::as_writable_bytes(std::span(index_text)))) return make_error("cannot read the index of " + name);
  if (format::checksum_of(std::as_bytes(std::span(index_text))) != index_checksum) {
    return make_error(name + ": the index does not match its checksum: the file is damaged" + kConvertAgain);
  }
  auto json = nlohmann::json::parse(index_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return make_error(name + ": the index is not valid JSON" + kConvertAgain);
  auto parsed = format::index_from_json(json);
  if (!parsed) return make_error(name + ": " + parsed.error().message + kConvertAgain);
  if (std::string problem = check_index(parsed->index, parsed->table.offset); !problem.empty()) {
    return make_error(name + ": " + problem + kConvertAgain);
  }
  if (Status s = read_checksum_table(*parsed, index_offset); !s) return s;
  state_->index = std::move(parsed->index);
  state_->data_end = parsed->table.offset;
  return Ok{};
}

// The table of tensor and record checksums between the data region and the
// index: its place and size checked without wrapping, its bytes against the
// index's checksum of it; then handed out to the tensors and records.
Status ContainerReader::read_checksum_table(format::ParsedIndex& parsed, std::uint64_t index_offset) {
  const std::string name = state_->path.string();
  const format::ChecksumTable& table = parsed.table;
  ContainerIndex& index = parsed.index;
  const auto records = checked_mul(index.experts.layers, index.experts.experts);
  const auto expected = records ? checked_add(*records, index.tensors.size()) : std::nullopt;
  if (!expected || table.count != *expected) {
    return make_error(name + ": index field checksums.count is " + std::to_string(table.count) + ", not one per tensor and expert record" + kConvertAgain);
  }
  const auto bytes = checked_mul(table.count, 8);
  if (!bytes || *bytes > format::kMaxIndexBytes || !range_within(table.offset, *bytes, kAlignment, index_offset) ||
      table.offset + *bytes != index_offset) {
    return make_error(name + ": the checksum table (index field checksums: offset " + std::to_string(table.offset) + ", " +
                      std::to_string(table.count) + " entries) does not end where the index starts" + kConvertAgain);
  }
  std::vector<std::uint64_t> checksums(table.count);
  if (Status s = read(table.offset, std::as_writable_bytes(std::span(checksums))); !s) return s;
  if (format::checksum_of(std::as_bytes(std::span(checksums))) != table.checksum) {
    return make_error(name + ": the checksum table does not match its checksum: the file is damaged" + kConvertAgain);
  }
  for (std::size_t i = 0; i < index.tensors.size(); ++i) index.tensors[i].checksum = checksums[i];
  index.experts.record_checksums.assign(checksums.begin() + static_cast<std::ptrdiff_t>(index.tensors.size()), checksums.end());
  return Ok{};
}

const ContainerIndex& ContainerReader::index() const { return state_->index; }
void ContainerReader::release_runtime_files() { std::vector<RuntimeFile>().swap(state_->index.runtime_files); }
const std::filesystem::path& ContainerReader::path() const { return state_->path; }
int ContainerReader::fd() const { return state_->fd; }
std::uint64_t ContainerReader::data_end() const { return state_->data_end; }

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
