// Fleet parts that read this machine or this build: the kernel catalogue
// digest, live quick probes and the profile search path (docs/fleet.md).
#include "coli/probe/fleet_machine.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "coli/base/files.h"
#include "coli/probe/profile_io.h"
#include "coli/shaders/catalogue.h"

namespace coli::fleet {
namespace fs = std::filesystem;

std::string kernel_catalogue_digest() {
  std::string basis;
  for (const shaders::ShaderVariant& v : shaders::gemv_catalogue()) {
    basis += std::string(v.name) + "|" + std::string(name_of(v.format)) + "|" +
             std::string(shaders::kind_name(v.kind)) + "|wg" + std::to_string(v.defaults.workgroup_size) + "|rows" +
             std::to_string(v.defaults.rows_per_workgroup) + "|x" + std::to_string(v.defaults.x_tile) + "|shm" +
             std::to_string(v.shared_memory_bytes ? v.shared_memory_bytes(v.defaults) : 0) + "|rank" +
             std::to_string(v.speed_rank) + "|sg" + std::to_string(v.min_subgroup_size) + "-" +
             std::to_string(v.max_subgroup_size) + "|ops";
    for (std::string_view op : v.required_subgroup_operations) basis += std::string(op) + ",";
    basis += "|features";
    for (std::string_view feature : v.required_features) basis += std::string(feature) + ",";
    // The module itself: a changed shader is another kernel even under the same name.
    basis += "|spirv" + fnv1a64_hex(std::string_view(reinterpret_cast<const char*>(v.spirv.data()), v.spirv.size_bytes()));
    basis += ";";
  }
  return "gemv-v1:" + fnv1a64_hex(basis);
}

namespace {

Result<DeviceProfile> probe_here(const ProbeOptions& options) {
  auto live = run_probe(options);
  if (!live) return live.error();
  assign_identity(*live, kernel_catalogue_digest());
  return live;
}

// The quick probe loads GPU drivers (the Vulkan loader and its ICDs: lavapipe
// alone maps 44 MiB of LLVM; the CUDA driver more). The engine plans its RSS
// to within a few percent and never uses those drivers on the CPU path, so
// the probe runs in a child process and sends its profile back as TOML.
Result<DeviceProfile> probe_in_child(const ProbeOptions& options) {
  int fds[2];
  if (pipe(fds) != 0) return probe_here(options);
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return probe_here(options);
  }
  if (child == 0) {
    close(fds[0]);
    auto live = probe_here(options);
    const std::string text = live ? "ok\n" + profile_to_toml(*live) : "error\n" + live.error().message;
    std::size_t sent = 0;
    while (sent < text.size()) {
      const ssize_t n = write(fds[1], text.data() + sent, text.size() - sent);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    _exit(sent == text.size() ? 0 : 1);
  }
  close(fds[1]);
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.size() < 3) {
    return make_error("the live probe's child process failed (status " + std::to_string(status) +
                      "): run coli-probe --quick to see why");
  }
  if (text.rfind("error\n", 0) == 0) return make_error(text.substr(6));
  return parse_profile(std::string_view(text).substr(3), "live probe");
}

}  // namespace

Result<DeviceProfile> probe_live(ProbeOptions options) {
  options.quick = true;
  return probe_in_child(options);
}

Result<Revalidation> revalidate_here(const DeviceProfile& shared, ProbeOptions options) {
  auto live = probe_live(std::move(options));
  if (!live) return make_error("cannot read this machine's live facts to re-validate the profile: " +
                               live.error().message);
  return revalidate(shared, *live);
}

fs::path user_profile_dir() { return default_profile_path().parent_path() / "profiles"; }

fs::path system_profile_dir() {
  if (const char* dir = std::getenv("COLI_SYSTEM_PROFILE_DIR"); dir && *dir) return dir;
  return "/etc/coli/profiles";
}

fs::path installed_profile_dir() {
  // Beside the installed programs (share/coli/profiles from bin/), so a
  // relocated install (cmake --install --prefix DIR) finds its own copy.
  std::error_code error;
  const fs::path program = fs::read_symlink("/proc/self/exe", error);
  if (error) return {};
  return (program.parent_path() / COLI_RELATIVE_PROFILE_DIR).lexically_normal();
}

std::vector<SearchEntry> profile_search_path(const std::optional<fs::path>& explicit_profile) {
  std::vector<SearchEntry> path;
  if (explicit_profile) path.push_back({*explicit_profile, "--profile"});
  if (const char* list = std::getenv("COLI_PROFILE_PATH"); list && *list) {
    std::string text = list;
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t end = text.find(':', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) path.push_back({text.substr(start, end - start), "COLI_PROFILE_PATH"});
      start = end + 1;
    }
  }
  path.push_back({default_profile_path(), "user"});
  path.push_back({user_profile_dir(), "user"});
  path.push_back({system_profile_dir(), "system"});
  if (const fs::path installed = installed_profile_dir(); !installed.empty()) path.push_back({installed, "installed"});
  return path;
}

std::vector<FoundProfile> find_profiles(const std::vector<SearchEntry>& path) {
  std::vector<FoundProfile> found;
  std::set<fs::path> seen;
  auto visit = [&](const fs::path& file, const std::string& origin) {
    std::error_code error;
    const fs::path key = fs::weakly_canonical(file, error);
    if (!seen.insert(error ? file : key).second) return;
    FoundProfile entry{file, origin, std::nullopt, ""};
    auto text = read_text_file(file);
    if (!text) {
      entry.error = text.error().message;
    } else if (auto profile = verify_shared_profile(*text, file.string()); profile) {
      entry.profile = std::move(*profile);
    } else {
      entry.error = profile.error().message;
    }
    found.push_back(std::move(entry));
  };
  for (const SearchEntry& entry : path) {
    std::error_code error;
    if (fs::is_directory(entry.path, error)) {
      std::vector<fs::path> files;
      for (const auto& item : fs::directory_iterator(entry.path, error)) {
        if (item.path().extension() == ".toml" && item.is_regular_file(error)) files.push_back(item.path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& file : files) visit(file, entry.origin);
    } else if (fs::exists(entry.path, error)) {
      visit(entry.path, entry.origin);
    }
  }
  return found;
}

std::optional<FoundProfile> find_class_match(const std::vector<SearchEntry>& path, const std::string& equivalence_class,
                                             const fs::path& except) {
  std::error_code error;
  const fs::path skip = except.empty() ? fs::path() : fs::weakly_canonical(except, error);
  for (FoundProfile& found : find_profiles(path)) {
    if (!found.profile || found.profile->identity.equivalence_class != equivalence_class) continue;
    if (!skip.empty() && fs::weakly_canonical(found.path, error) == skip) continue;
    return std::move(found);
  }
  return std::nullopt;
}

std::string describe_class_match(const DeviceProfile& probed, const fs::path& except) {
  const auto path = profile_search_path();
  if (const auto match = find_class_match(path, probed.identity.equivalence_class, except)) {
    const DeviceProfile& shared = *match->profile;
    return "shared profile of this machine's class " + probed.identity.equivalence_class + " found: " +
           match->path.string() + " (" + match->origin + ", " + shared.provenance.mode + " profile of " +
           shared.provenance.created_utc + "); use it with --profile " + match->path.string() +
           " (coli-plan and coli run re-validate it against this machine)";
  }
  std::string dirs;
  for (const SearchEntry& entry : path) dirs += (dirs.empty() ? "" : ", ") + entry.path.string();
  return "no shared profile of this machine's class " + probed.identity.equivalence_class + " in " + dirs;
}

}  // namespace coli::fleet
