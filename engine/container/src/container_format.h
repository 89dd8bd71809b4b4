// Shared between the writer and the reader: the fixed byte layout and the
// index's JSON form, so the two cannot drift.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "coli/container/container.h"

namespace coli::container::format {

inline constexpr std::array<char, 8> kMagic = {'C', 'O', 'L', 'I', 'M', 'O', 'E', '\0'};
inline constexpr std::array<char, 8> kTrailerMagic = {'C', 'O', 'L', 'I', 'E', 'N', 'D', '\0'};
inline constexpr std::uint64_t kHeaderBytes = 16;
inline constexpr std::uint64_t kTrailerBytes = 24;

inline std::uint64_t align_up(std::uint64_t value) { return (value + kAlignment - 1) / kAlignment * kAlignment; }

nlohmann::json index_to_json(const ContainerIndex& index);
// Throws nlohmann::json::exception on a missing or mistyped field; an
// unknown format or dtype string is an error naming the field.
Result<ContainerIndex> index_from_json(const nlohmann::json& json);

}  // namespace coli::container::format
