// Small parsing helpers for /proc, /sys and sysctl text. All are strict: a
// number with trailing junk is not a number.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coli {

std::string_view trim(std::string_view text);
std::vector<std::string_view> split(std::string_view text, char separator);
std::vector<std::string_view> split_lines(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);

std::optional<std::int64_t> parse_int(std::string_view text);
std::optional<std::uint64_t> parse_uint(std::string_view text);
std::optional<double> parse_double(std::string_view text);

// "12.3 GiB" style, for humans (binary units).
std::string format_bytes(std::uint64_t bytes);

// `value` with `digits` decimals ("3.14"), for figures in messages.
std::string format_fixed(double value, int digits = 2);

// "16G", "512MiB", "1.5T", "1073741824": binary units, like `free -h`
// (K/k, M, G, T, with an optional "iB" or "B"); nullopt for anything else,
// below one byte or above 2^62.
std::optional<std::uint64_t> parse_size(std::string_view text);

// Now as ISO 8601 UTC: "2026-11-29T22:27:24Z".
std::string utc_now();

}  // namespace coli
