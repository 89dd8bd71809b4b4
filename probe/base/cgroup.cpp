#include "coli/base/cgroup.h"

#include <algorithm>

#include "coli/base/text.h"

namespace coli {
namespace {

bool contains(const std::vector<std::string>& items, std::string_view item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

std::string join_path(std::string_view base, std::string_view relative) {
  std::string out(base);
  while (!out.empty() && out.back() == '/') out.pop_back();
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  if (!relative.empty()) {
    out.push_back('/');
    out.append(relative);
  }
  return out.empty() ? "/" : out;
}

}  // namespace

std::vector<std::string> CgroupLocation::self_and_ancestors() const {
  std::vector<std::string> out;
  std::string dir = directory;
  while (true) {
    out.push_back(dir);
    if (dir == mount_point || dir.size() <= mount_point.size()) break;
    const auto slash = dir.find_last_of('/');
    if (slash == std::string::npos || slash == 0) break;
    dir.resize(slash);
  }
  return out;
}

CgroupPaths CgroupPaths::read(const SystemRoot& root) {
  CgroupPaths paths;
  paths.root_ = root;
  if (const auto text = root.read("/proc/self/cgroup")) {
    for (std::string_view line : split_lines(*text)) {
      // hierarchy-ID:controller-list:cgroup-path
      const auto first = line.find(':');
      const auto second = line.find(':', first + 1);
      if (first == std::string_view::npos || second == std::string_view::npos) continue;
      Membership m;
      m.hierarchy_id = static_cast<int>(parse_int(line.substr(0, first)).value_or(-1));
      for (std::string_view c : split(line.substr(first + 1, second - first - 1), ',')) {
        if (!c.empty()) m.controllers.emplace_back(starts_with(c, "name=") ? c.substr(5) : c);
      }
      m.path = std::string(trim(line.substr(second + 1)));
      paths.memberships_.push_back(std::move(m));
    }
  }
  if (const auto text = root.read("/proc/self/mountinfo")) {
    paths.have_mountinfo_ = true;
    for (std::string_view line : split_lines(*text)) {
      // ID parent major:minor root mount-point options [optional...] - fstype source super-options
      const auto dash = line.find(" - ");
      if (dash == std::string_view::npos) continue;
      const auto left = split(line.substr(0, dash), ' ');
      const auto right = split(line.substr(dash + 3), ' ');
      if (left.size() < 5 || right.size() < 3) continue;
      Mount mount;
      if (right[0] == "cgroup2") {
        mount.version = 2;
      } else if (right[0] == "cgroup") {
        mount.version = 1;
        for (std::string_view option : split(right[2], ',')) {
          mount.controllers.emplace_back(starts_with(option, "name=") ? option.substr(5) : option);
        }
      } else {
        continue;
      }
      mount.root = std::string(left[3]);
      mount.mount_point = std::string(left[4]);
      paths.mounts_.push_back(std::move(mount));
    }
  }
  return paths;
}

std::optional<CgroupLocation> CgroupPaths::place(int version, const std::string& path, const Mount& mount) {
  // The process's path is relative to the hierarchy root; the mount shows
  // `mount.root` of that hierarchy at `mount.mount_point`.
  std::string_view relative = path;
  if (mount.root != "/") {
    if (!starts_with(relative, mount.root)) return std::nullopt;
    relative.remove_prefix(mount.root.size());
  }
  CgroupLocation location;
  location.version = version;
  location.mount_point = mount.mount_point;
  location.directory = join_path(mount.mount_point, relative);
  return location;
}

std::optional<CgroupLocation> CgroupPaths::locate_v2(std::string_view controller) const {
  const auto member = std::find_if(memberships_.begin(), memberships_.end(),
                                   [](const Membership& m) { return m.hierarchy_id == 0 && m.controllers.empty(); });
  if (member == memberships_.end()) return std::nullopt;
  Mount mount{2, "/", "/sys/fs/cgroup", {}};
  if (have_mountinfo_) {
    const auto found = std::find_if(mounts_.begin(), mounts_.end(), [](const Mount& m) { return m.version == 2; });
    if (found == mounts_.end()) return std::nullopt;
    mount = *found;
  }
  auto location = place(2, member->path, mount);
  if (!location) return std::nullopt;
  // In a hybrid setup the unified hierarchy exists but holds no controllers;
  // only use it when the controller is enabled there.
  const auto controllers = root_.read(location->mount_point + "/cgroup.controllers");
  if (!controllers) return std::nullopt;
  for (std::string_view c : split(trim(*controllers), ' ')) {
    if (c == controller) return location;
  }
  return std::nullopt;
}

std::optional<CgroupLocation> CgroupPaths::locate_v1(std::string_view controller) const {
  const auto member = std::find_if(memberships_.begin(), memberships_.end(), [&](const Membership& m) {
    return m.hierarchy_id > 0 && contains(m.controllers, controller);
  });
  if (member == memberships_.end()) return std::nullopt;
  if (have_mountinfo_) {
    for (const Mount& mount : mounts_) {
      if (mount.version == 1 && contains(mount.controllers, controller)) {
        if (auto location = place(1, member->path, mount)) return location;
      }
    }
    return std::nullopt;
  }
  // No mountinfo: the conventional layout, trying the joined name ("cpu,cpuacct") too.
  std::string joined;
  for (const auto& c : member->controllers) joined += (joined.empty() ? "" : ",") + c;
  for (const std::string& name : {std::string(controller), joined}) {
    const Mount mount{1, "/", "/sys/fs/cgroup/" + name, {}};
    auto location = place(1, member->path, mount);
    if (location && root_.read(location->mount_point + "/cgroup.procs")) return location;
  }
  return place(1, member->path, Mount{1, "/", "/sys/fs/cgroup/" + std::string(controller), {}});
}

std::optional<CgroupLocation> CgroupPaths::locate(std::string_view controller) const {
  if (auto v2 = locate_v2(controller)) return v2;
  return locate_v1(controller);
}

}  // namespace coli
