// Export, verified import and field-by-field diff of profiles (docs/fleet.md).
// The checksum is SHA-256 (FIPS 180-4, implemented here: no crypto library is
// among coli's dependencies) of the exported file's exact bytes with the one
// `content_sha256 = ...` line removed. It detects any edit or corruption after
// export; it is not a signature (anyone can recompute it).
#include <array>
#include <ctime>
#include <map>
#include <sstream>

#include <toml++/toml.h>

#include "coli/base/text.h"
#include "coli/base/files.h"
#include "coli/probe/fleet.h"
#include "coli/probe/profile_io.h"

namespace coli::fleet {
namespace {

constexpr std::array<std::uint32_t, 64> kK{
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(std::array<std::uint32_t, 8>& h, const unsigned char* block) {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (std::uint32_t{block[4 * i]} << 24) | (std::uint32_t{block[4 * i + 1]} << 16) |
           (std::uint32_t{block[4 * i + 2]} << 8) | std::uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

constexpr std::string_view kChecksumKey = "content_sha256 = ";

// The text without its one checksum line; nullopt unless exactly one exists.
std::optional<std::string> without_checksum_line(std::string_view text) {
  std::string out;
  int found = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const std::string_view line = text.substr(start, end - start);
    if (line.starts_with(kChecksumKey)) ++found;
    else out += line;
    start = end;
  }
  if (found != 1) return std::nullopt;
  return out;
}

void flatten(const toml::node& node, const std::string& path, std::map<std::string, std::string>& out) {
  if (const toml::table* table = node.as_table()) {
    for (const auto& [key, child] : *table) flatten(child, path.empty() ? std::string(key.str()) : path + "." + std::string(key.str()), out);
  } else if (const toml::array* array = node.as_array()) {
    for (std::size_t i = 0; i < array->size(); ++i) flatten(*array->get(i), path + "[" + std::to_string(i) + "]", out);
    if (array->empty()) out[path] = "[]";
  } else {
    std::ostringstream text;
    node.visit([&](const auto& value) { text << value; });
    out[path] = text.str();
  }
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  std::array<std::uint32_t, 8> h{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string padded(data);
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  padded.push_back(static_cast<char>(0x80));
  while (padded.size() % 64 != 56) padded.push_back('\0');
  for (int i = 7; i >= 0; --i) padded.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  for (std::size_t offset = 0; offset < padded.size(); offset += 64) {
    compress(h, reinterpret_cast<const unsigned char*>(padded.data() + offset));
  }
  char hex[65];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 8 * i, 9, "%08x", h[i]);
  return std::string(hex, 64);
}

std::string export_profile(DeviceProfile profile, const ExportOptions& options) {
  if (!options.keep_private) {
    profile.provenance.host.clear();
    for (VulkanDevice& gpu : profile.gpus.vulkan) gpu.uuid.clear();
    for (CudaDevice& gpu : profile.gpus.cuda) gpu.uuid.clear();
    if (profile.measurements.disk) profile.measurements.disk->directory.clear();
  }
  profile.export_info = ExportInfo{options.exported_utc.empty() ? utc_now() : options.exported_utc,
                                   !options.keep_private, ""};
  const auto body = without_checksum_line(profile_to_toml(profile));
  profile.export_info->content_sha256 = "sha256:" + sha256_hex(body.value_or(""));
  return profile_to_toml(profile);
}

Result<DeviceProfile> verify_shared_profile(std::string_view text, const std::string& source_name) {
  auto profile = parse_profile(text, source_name);  // every field, its bounds, the identity
  if (!profile) return profile.error();
  if (!profile->export_info) return profile;
  const auto body = without_checksum_line(text);
  if (!body) {
    return make_error(source_name + ": field 'export.content_sha256' must appear exactly once at the start of a line; "
                                    "export the profile again with coli profile export");
  }
  const std::string actual = "sha256:" + sha256_hex(*body);
  if (actual != profile->export_info->content_sha256) {
    return make_error(source_name + ": field 'export.content_sha256' = " + profile->export_info->content_sha256 +
                      " does not match the content (" + actual +
                      "): the file was changed after export (tampered or corrupted); export it again from the "
                      "machine that measured it");
  }
  return profile;
}

Result<DeviceProfile> load_shared_profile(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return make_error(text.error().message + " (run coli-probe to create a device profile)");
  return verify_shared_profile(*text, path);
}

std::vector<FieldDifference> diff_profiles(const DeviceProfile& a, const DeviceProfile& b) {
  std::map<std::string, std::string> left, right;
  flatten(toml::parse(profile_to_toml(a)), "", left);
  flatten(toml::parse(profile_to_toml(b)), "", right);
  std::vector<FieldDifference> out;
  for (const auto& [field, value] : left) {
    const auto it = right.find(field);
    if (it == right.end()) out.push_back(FieldDifference{field, value, "absent"});
    else if (it->second != value) out.push_back(FieldDifference{field, value, it->second});
  }
  for (const auto& [field, value] : right) {
    if (!left.count(field)) out.push_back(FieldDifference{field, "absent", value});
  }
  return out;
}

}  // namespace coli::fleet
