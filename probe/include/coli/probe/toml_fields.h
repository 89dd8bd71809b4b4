// Validating reads of TOML tables for coli's own files (device profiles,
// plans): type, range, presence; every failure names file:line:column, the
// dotted field and what to do, and is thrown as TomlFieldError for the
// file's parser to turn into an Error.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <toml++/toml.h>

#include "coli/base/cpu_set.h"
#include "coli/base/result.h"

namespace coli {

inline constexpr std::int64_t kTomlMaxBytes = std::int64_t{1} << 52;  // 4 PiB: more is a corrupt number
inline constexpr std::int64_t kTomlMaxCount = 1 << 30;

struct TomlFieldError {
  std::string message;
};

// Reads fields of one table, remembering its dotted path for messages.
class TomlFields {
 public:
  // `hint` ends every message: what to do about a bad field.
  TomlFields(const std::string& source, const toml::table& table, std::string path, const char* hint)
      : source_(source), table_(table), path_(std::move(path)), hint_(hint) {}

  [[noreturn]] void fail(const toml::node* at, std::string_view field, const std::string& problem) const {
    // Point at the field itself when it exists, else at its table.
    if (!at) at = table_.get(field);
    const auto& region = at ? at->source() : table_.source();
    throw TomlFieldError{source_ + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column) +
                         ": field '" + qualified(field) + "' " + problem + "; " + hint_};
  }
  [[noreturn]] void fail(std::string_view field, const std::string& problem) const { fail(nullptr, field, problem); }

  std::int64_t integer(std::string_view key, std::int64_t low, std::int64_t high) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<std::int64_t>();
    if (!value) fail(node, key, "must be an integer");
    if (*value < low || *value > high) {
      fail(node, key, "= " + std::to_string(*value) + " is out of range [" + std::to_string(low) + ", " +
                          std::to_string(high) + "]");
    }
    return *value;
  }
  int small_int(std::string_view key, int low, int high) const { return static_cast<int>(integer(key, low, high)); }
  int count(std::string_view key, int low) const { return static_cast<int>(integer(key, low, kTomlMaxCount)); }
  std::uint64_t bytes(std::string_view key) const { return static_cast<std::uint64_t>(integer(key, 0, kTomlMaxBytes)); }

  std::optional<std::uint64_t> optional_bytes(std::string_view key) const {
    return table_.contains(key) ? std::optional(bytes(key)) : std::nullopt;
  }

  double real(std::string_view key, double low, double high) const {
    const toml::node* node = require(key);
    const auto value = node->value<double>();  // integers are accepted where a float is expected
    if (!value || !std::isfinite(*value)) fail(node, key, "must be a finite number");
    if (*value < low || *value > high) {
      fail(node, key, "= " + std::to_string(*value) + " is out of range [" + std::to_string(low) + ", " +
                          std::to_string(high) + "]");
    }
    return *value;
  }

  std::string text(std::string_view key) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<std::string>();
    if (!value) fail(node, key, "must be a string");
    return *value;
  }

  bool boolean(std::string_view key) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<bool>();
    if (!value) fail(node, key, "must be true or false");
    return *value;
  }

  CpuSet cpus(std::string_view key) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<std::string>();
    if (!value) fail(node, key, "must be a CPU list string such as \"0-3,8\"");
    auto set = CpuSet::parse(*value);
    if (!set) fail(node, key, "is not a CPU list: " + set.error().message);
    return *set;
  }

  std::vector<std::string> strings(std::string_view key) const {
    const toml::array& items = array(key);
    std::vector<std::string> out;
    for (const toml::node& item : items) {
      const auto value = item.value_exact<std::string>();
      if (!value) fail(&item, key, "must hold only strings");
      out.push_back(*value);
    }
    return out;
  }

  std::vector<std::uint32_t> u32s(std::string_view key, std::int64_t high) const {
    std::vector<std::uint32_t> out;
    for (const toml::node& item : array(key)) {
      const auto value = item.value_exact<std::int64_t>();
      if (!value || *value < 0 || *value > high) {
        fail(&item, key, "must hold integers in [0, " + std::to_string(high) + "]");
      }
      out.push_back(static_cast<std::uint32_t>(*value));
    }
    return out;
  }
  std::vector<int> ints(std::string_view key, int low, int high) const {
    std::vector<int> out;
    for (const toml::node& item : array(key)) {
      const auto value = item.value_exact<std::int64_t>();
      if (!value || *value < low || *value > high) {
        fail(&item, key, "must hold integers in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
      }
      out.push_back(static_cast<int>(*value));
    }
    return out;
  }
  std::uint32_t u32(std::string_view key, std::int64_t high) const {
    return static_cast<std::uint32_t>(integer(key, 0, high));
  }

  const toml::array& array(std::string_view key) const {
    const toml::node* node = require(key);
    if (!node->is_array()) fail(node, key, "must be an array");
    return *node->as_array();
  }

  TomlFields table(std::string_view key) const {
    const toml::node* node = require(key);
    if (!node->is_table()) fail(node, key, "must be a table");
    return TomlFields(source_, *node->as_table(), qualified(key), hint_);
  }

  // Each element of an array of tables, named "path.key[i]".
  std::vector<TomlFields> tables(std::string_view key) const {
    std::vector<TomlFields> out;
    const toml::array& items = array(key);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_table()) fail(&items[i], key, "must hold only tables");
      out.emplace_back(source_, *items[i].as_table(), qualified(key) + "[" + std::to_string(i) + "]", hint_);
    }
    return out;
  }

  bool has(std::string_view key) const { return table_.contains(key); }
  const std::string& path() const { return path_; }

 private:
  const toml::node* require(std::string_view key) const {
    const toml::node* node = table_.get(key);
    if (!node) fail(nullptr, key, "is missing");
    return node;
  }
  std::string qualified(std::string_view field) const {
    return path_.empty() ? std::string(field) : path_ + "." + std::string(field);
  }

  const std::string& source_;
  const toml::table& table_;
  std::string path_;
  const char* hint_;
};

// Parses one of coli's files and runs `read` on its root table. A TOML
// syntax error and any TomlFieldError come back as an Error naming
// file:line:column; `writer` is the tool that rewrites the file.
template <typename Read>
auto read_toml_document(std::string_view text, const std::string& source, const char* hint, std::string_view writer,
                        Read&& read) -> Result<std::invoke_result_t<Read, const TomlFields&>> {
  toml::table document;
  try {
    document = toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    const auto& where = error.source().begin;
    return make_error(source + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                      ": not valid TOML (" + std::string(error.description()) +
                      "); the file may be truncated or hand-edited: run " + std::string(writer) + " again to rewrite it");
  }
  try {
    return read(TomlFields(source, document, "", hint));
  } catch (const TomlFieldError& error) {
    return make_error(error.message);
  }
}

}  // namespace coli
