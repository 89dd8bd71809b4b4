// Ranged reads of tensor data (pread or mmap) and float conversion.
#include "coli/model/tensor_data.h"

#include "reference/gemv_reference.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

namespace coli::model {
namespace {

Status check_range(const TensorInfo& tensor, std::uint64_t offset, std::uint64_t length) {
  if (offset > tensor.bytes || length > tensor.bytes - offset)
    return make_error("tensor '" + tensor.name + "': byte range [" + std::to_string(offset) + ", +" +
                      std::to_string(length) + ") is outside its " + std::to_string(tensor.bytes) + " bytes");
  return Ok{};
}

struct FileHandle {
  int fd = -1;
  ~FileHandle() {
    if (fd >= 0) ::close(fd);
  }
};

Result<int> open_for_reading(const TensorInfo& tensor, FileHandle& handle) {
  handle.fd = ::open(tensor.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (handle.fd < 0) return make_error("cannot open " + tensor.file.string() + ": " + std::strerror(errno));
  return handle.fd;
}

}  // namespace

Result<std::vector<std::byte>> read_tensor_bytes(const TensorInfo& tensor, std::uint64_t offset,
                                                 std::uint64_t length) {
  if (Status status = check_range(tensor, offset, length); !status) return status.error();
  FileHandle handle;
  auto fd = open_for_reading(tensor, handle);
  if (!fd) return fd.error();
  std::vector<std::byte> bytes(length);
  std::uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(*fd, bytes.data() + done, length - done, static_cast<off_t>(tensor.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error("cannot read " + tensor.file.string() + ": " + std::strerror(errno));
    if (n == 0)
      return make_error(tensor.file.string() + ": file ended inside tensor '" + tensor.name +
                        "'; it was truncated after its header was read (re-download it)");
    done += static_cast<std::uint64_t>(n);
  }
  return bytes;
}

Result<MappedRange> MappedRange::map(const TensorInfo& tensor, std::uint64_t offset, std::uint64_t length) {
  if (Status status = check_range(tensor, offset, length); !status) return status.error();
  MappedRange range;
  if (length == 0) return range;
  FileHandle handle;
  auto fd = open_for_reading(tensor, handle);
  if (!fd) return fd.error();
  // mmap offsets must be page aligned; map from the page holding the start.
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t start = tensor.offset + offset;
  const std::uint64_t aligned = start - start % page;
  const std::size_t mapping_length = static_cast<std::size_t>(start - aligned + length);
  void* mapping = ::mmap(nullptr, mapping_length, PROT_READ, MAP_PRIVATE, *fd, static_cast<off_t>(aligned));
  if (mapping == MAP_FAILED)
    return make_error("cannot map " + tensor.file.string() + " for tensor '" + tensor.name + "': " +
                      std::strerror(errno));
  range.mapping_ = mapping;
  range.mapping_length_ = mapping_length;
  range.data_ = static_cast<const std::byte*>(mapping) + (start - aligned);
  range.length_ = static_cast<std::size_t>(length);
  return range;
}

MappedRange::MappedRange(MappedRange&& other) noexcept { *this = std::move(other); }

MappedRange& MappedRange::operator=(MappedRange&& other) noexcept {
  if (this != &other) {
    release();
    std::swap(mapping_, other.mapping_);
    std::swap(mapping_length_, other.mapping_length_);
    std::swap(data_, other.data_);
    std::swap(length_, other.length_);
  }
  return *this;
}

MappedRange::~MappedRange() { release(); }

void MappedRange::release() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_length_);
  mapping_ = nullptr;
  mapping_length_ = 0;
  data_ = nullptr;
  length_ = 0;
}

float bf16_to_f32(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

float f16_to_f32(std::uint16_t bits) { return kernels::half_to_float(bits); }

Status convert_to_f32(DType dtype, std::span<const std::byte> src, std::span<float> out) {
  if (!is_float_dtype(dtype))
    return make_error("cannot convert " + std::string(dtype_name(dtype)) + " data to float: only F32, F16, BF16");
  const std::uint64_t size = dtype_size(dtype);
  if (src.size() % size != 0 || src.size() / size != out.size())
    return make_error("float conversion: " + std::to_string(src.size()) + " source bytes do not fill " +
                      std::to_string(out.size()) + " " + std::string(dtype_name(dtype)) + " elements");
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::byte* element = src.data() + i * size;
    if (dtype == DType::F32) {
      std::memcpy(&out[i], element, 4);
    } else {
      std::uint16_t bits = 0;
      std::memcpy(&bits, element, 2);
      out[i] = dtype == DType::F16 ? f16_to_f32(bits) : bf16_to_f32(bits);
    }
  }
  return Ok{};
}

Result<std::vector<float>> read_row_f32(const TensorInfo& tensor, std::uint64_t row) {
  if (tensor.shape.empty() || tensor.shape.size() > 2)
    return make_error("tensor '" + tensor.name + "': rows are read from 1-D or 2-D tensors only");
  const std::uint64_t rows = tensor.shape.size() == 2 ? tensor.shape[0] : 1;
  const std::uint64_t columns = tensor.shape.back();
  if (row >= rows)
    return make_error("tensor '" + tensor.name + "': row " + std::to_string(row) + " is out of range (" +
                      std::to_string(rows) + " rows)");
  const std::uint64_t row_bytes = columns * dtype_size(tensor.dtype);
  auto bytes = read_tensor_bytes(tensor, row * row_bytes, row_bytes);
  if (!bytes) return bytes.error();
  std::vector<float> values(columns);
  if (Status status = convert_to_f32(tensor.dtype, *bytes, values); !status) return status.error();
  return values;
}

}  // namespace coli::model
