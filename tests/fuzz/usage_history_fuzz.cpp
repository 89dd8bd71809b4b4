// .coli_usage files (engine/experts/src/usage_history_file.cpp). The file
// carries a checksum, so each input is parsed twice: as given, and re-signed
// (its last line replaced by the right checksum) so the fuzzer reaches the
// header and count checks behind it.
#include <cstdio>
#include <string>

#include "coli/experts/usage_history.h"
#include "fuzz_file.h"

namespace {

const coli::experts::UsageHistoryKey kKey{3, 4, 2, "fnv1a64:00000000deadbeef"};

std::string resigned(std::string_view text) {
  const std::size_t checksum_line = text.rfind("checksum ");
  std::string body(text.substr(0, checksum_line == std::string_view::npos ? text.size() : checksum_line));
  if (!body.empty() && body.back() != '\n') body += '\n';
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a 64, as the file format
  for (const char c : body) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return body + "checksum fnv1a64:" + hex + "\n";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = coli::fuzz::as_text(data, size);
  (void)coli::experts::UsageHistory::parse(text, kKey, "fuzz.coli_usage");
  auto history = coli::experts::UsageHistory::parse(resigned(text), kKey, "fuzz.coli_usage");
  if (history) (void)history->serialize();
  return 0;
}
