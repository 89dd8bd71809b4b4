// Shared between the writer and the reader: the fixed byte layout, the
// checksums and the index's JSON form, so the two cannot drift.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "coli/container/container.h"

namespace coli::container::format {

inline constexpr std::array<char, 8> kMagic = {'C', 'O', 'L', 'I', 'M', 'O', 'E', '\0'};
inline constexpr std::array<char, 8> kTrailerMagic = {'C', 'O', 'L', 'I', 'E', 'N', 'D', '\0'};
inline constexpr std::uint64_t kHeaderBytes = 16;
// u64 index offset, u64 index bytes, u64 index checksum, trailer magic.
inline constexpr std::uint64_t kTrailerBytes = 32;
// Sane bounds a real container stays far below: an index of a few MB, and no
// tensor or expert part of more elements than the byte formulas can hold.
inline constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{64} << 20;  // index, and checksum table
inline constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 56;

inline std::uint64_t align_up(std::uint64_t value) { return (value + kAlignment - 1) / kAlignment * kAlignment; }

// XXH3-64, streamed: the writer hashes what it writes, the reader what it reads.
class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;
  void update(std::span<const std::byte> bytes);
  void update_zeros(std::uint64_t count);  // the padding the writer leaves as holes
  std::uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};
std::uint64_t checksum_of(std::span<const std::byte> bytes);

// In the index as 16 lower-case hex digits.
std::string checksum_hex(std::uint64_t checksum);
std::optional<std::uint64_t> parse_checksum_hex(std::string_view text);

// The per-tensor and per-record checksums live in a binary table between the
// data region and the index (u64 little-endian: the tensors in index order,
// then the records layer-major), so a model of 10^4 experts does not make
// every load parse 10^4 JSON strings; the index holds the table's place and
// its own checksum, and the trailer the index's: one chain checked on open.
struct ChecksumTable {
  std::uint64_t offset = 0;    // = the data region's end
  std::uint64_t count = 0;     // tensors + layers * experts
  std::uint64_t checksum = 0;  // XXH3-64 of the table's bytes
};

struct ParsedIndex {
  ContainerIndex index;  // without checksums until the table is read
  ChecksumTable table;
};

nlohmann::json index_to_json(const ContainerIndex& index, const ChecksumTable& table);
// Every field present, of its type and in its range; an unknown format or
// dtype string is an error naming the field. Never throws.
Result<ParsedIndex> index_from_json(const nlohmann::json& json);

}  // namespace coli::container::format
