// Which cgroup directories govern this process, for cgroup v2 (unified) and
// v1 (one hierarchy per controller), read from /proc/self/cgroup and
// /proc/self/mountinfo through a SystemRoot. Containers mount their own group
// as the hierarchy root; mountinfo's root field maps that back.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/files.h"

namespace coli {

struct CgroupLocation {
  int version = 0;          // 1 or 2
  std::string directory;    // absolute system path of this process's group, e.g. /sys/fs/cgroup/user.slice/x
  std::string mount_point;  // where the hierarchy is mounted; ancestors stop here
  // This group and its ancestors up to the mount point, innermost first.
  std::vector<std::string> self_and_ancestors() const;
};

class CgroupPaths {
 public:
  // Reads <root>/proc/self/cgroup and <root>/proc/self/mountinfo. Without
  // mountinfo (a minimal recording), the standard mount points are assumed:
  // /sys/fs/cgroup for v2, /sys/fs/cgroup/<controller> for v1.
  static CgroupPaths read(const SystemRoot& root);

  // The group that governs `controller` ("memory", "cpu", "cpuset"): v2 when
  // the controller is enabled in the unified hierarchy, else its v1 hierarchy.
  std::optional<CgroupLocation> locate(std::string_view controller) const;

 private:
  struct Membership {
    int hierarchy_id = -1;
    std::vector<std::string> controllers;  // empty for the v2 line "0::/path"
    std::string path;                      // the group's path inside its hierarchy
  };
  struct Mount {
    int version = 0;
    std::string root;                      // mountinfo field 4: hierarchy path mounted here
    std::string mount_point;
    std::vector<std::string> controllers;  // v1 super options
  };
  std::optional<CgroupLocation> locate_v2(std::string_view controller) const;
  std::optional<CgroupLocation> locate_v1(std::string_view controller) const;
  static std::optional<CgroupLocation> place(int version, const std::string& path, const Mount& mount);

  SystemRoot root_;
  std::vector<Membership> memberships_;
  std::vector<Mount> mounts_;
  bool have_mountinfo_ = false;
};

}  // namespace coli
