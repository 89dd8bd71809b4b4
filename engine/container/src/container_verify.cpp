// `coli run --verify` and the converter's read-back: every checksummed
// extent of the data region, re-read and re-hashed.
#include <algorithm>
#include <memory>

#include "coli/container/container.h"
#include "container_format.h"

namespace coli::container {
namespace {

// One checksummed span of the file: a dense tensor (to its aligned end) or an expert record (its stride).
struct Extent {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
  std::string what;  // "tensor model.norm.weight", "expert record: layer 3 (model layer 5), expert 7"
  bool is_record = false;
};

std::vector<Extent> extents_of(const ContainerIndex& index) {
  std::vector<Extent> extents;
  for (const TensorEntry& t : index.tensors) {
    extents.push_back({t.offset, format::align_up(t.offset + t.bytes) - t.offset, t.checksum, "tensor " + t.name, false});
  }
  const ExpertLayout& e = index.experts;
  for (std::uint32_t layer = 0; layer < e.layers; ++layer) {
    for (std::uint32_t expert = 0; expert < e.experts; ++expert) {
      extents.push_back({e.record_offset(layer, expert), e.record_stride,
                         e.record_checksums[static_cast<std::uint64_t>(layer) * e.experts + expert],
                         "expert record: layer " + std::to_string(layer) + " (model layer " +
                             std::to_string(e.model_layers[layer]) + "), expert " + std::to_string(expert),
                         true});
    }
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  return extents;
}

// The extents must tile [kAlignment, data_end) exactly, or some bytes would
// be covered by no checksum (or by two); "" when they do.
std::string tiling_problem(const std::vector<Extent>& extents, std::uint64_t data_end) {
  std::uint64_t cursor = kAlignment;
  for (const Extent& extent : extents) {
    if (extent.offset != cursor) {
      return "bytes " + std::to_string(std::min(cursor, extent.offset)) + ".." + std::to_string(std::max(cursor, extent.offset)) +
             " are covered by no checksum or by two (at " + extent.what + ")";
    }
    cursor += extent.bytes;
  }
  if (cursor != data_end) return "bytes " + std::to_string(cursor) + ".." + std::to_string(data_end) + " are covered by no checksum";
  return "";
}

}  // namespace

Result<VerifySummary> ContainerReader::verify_checksums() const {
  const std::string name = path().string();
  const std::vector<Extent> extents = extents_of(index());
  if (std::string problem = tiling_problem(extents, data_end()); !problem.empty()) {
    return make_error(name + ": " + problem + "; convert the model again with `coli convert`");
  }
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 20;  // cache-friendly; never zero-filled (it is read into)
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(kChunk);
  VerifySummary summary;
  std::vector<std::string> damaged;
  for (const Extent& extent : extents) {
    format::Checksum checksum;
    for (std::uint64_t done = 0; done < extent.bytes;) {
      const std::uint64_t n = std::min(kChunk, extent.bytes - done);
      if (Status s = read(extent.offset + done, std::span(buffer.get(), n)); !s) return s.error();
      checksum.update(std::span(buffer.get(), n));
      done += n;
    }
    if (checksum.digest() != extent.checksum) {
      damaged.push_back(extent.what + " (bytes " + std::to_string(extent.offset) + ".." + std::to_string(extent.offset + extent.bytes) + ")");
    }
    ++(extent.is_record ? summary.records : summary.tensors);
    summary.bytes += extent.bytes;
  }
  if (damaged.empty()) return summary;
  std::string message = name + ": " + std::to_string(damaged.size()) + " of " + std::to_string(extents.size()) +
                        " checksummed extents do not match their checksum (the file is damaged):";
  constexpr std::size_t kListed = 10;
  for (std::size_t i = 0; i < std::min(damaged.size(), kListed); ++i) message += "\n  " + damaged[i];
  if (damaged.size() > kListed) message += "\n  ... and " + std::to_string(damaged.size() - kListed) + " more";
  return make_error(message + "\nconvert the model again with `coli convert` (or copy the file again)");
}

}  // namespace coli::container
