// `coli profile ...`: list, show, diff, validate, export, import and merge
// fleet profiles (docs/fleet.md). Every file read is verified completely
// (fields, bounds, identity, an export's checksum) before anything uses it.
#include "coli_profile_cmd.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "coli/base/files.h"
#include "coli/base/pending_file.h"
#include "coli/base/text.h"
#include "coli/probe/fleet_machine.h"
#include "coli/probe/profile_io.h"

namespace coli::tools {
namespace {

namespace fs = std::filesystem;

Result<DeviceProfile> read_verified(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return fleet::verify_shared_profile(*text, path);
}

void print_lines(const std::vector<std::string>& lines) {
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
}

int fail(const std::string& message) {
  std::fprintf(stderr, "coli profile: %s\n", message.c_str());
  return 1;
}

std::string kinds_text(const CpuFacts& cpu) {
  std::string text;
  for (const CpuKind& kind : cpu.kinds) {
    text += (text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(kind.rank) +
            (kind.core_type.empty() ? "" : " " + kind.core_type) + ": " + std::to_string(kind.cores) + " cores, " +
            std::to_string(kind.pus.size()) + " PUs";
  }
  return text;
}

}  // namespace

ProfileCommand::ProfileCommand(CLI::App& app) {
  command_ = app.add_subcommand("profile", "Fleet device profiles: list, show, diff, validate, export, import, merge");
  command_->require_subcommand(1);
  auto live_options = [this](CLI::App* sub) {
    sub->add_option("--replay-machine", replay_machine_,
                    "Take this machine's live facts from a recorded machine directory (tests/fixtures/machines/*)")
        ->check(CLI::ExistingDirectory);
    sub->add_option("--replay-gpus", replay_gpus_, "Take this machine's GPU facts from a recorded [gpus] file")
        ->check(CLI::ExistingFile);
  };
  list_ = command_->add_subcommand("list", "Profiles on the search path, and which match this machine's class");
  live_options(list_);
  show_ = command_->add_subcommand("show", "Print a profile's identity, facts and tuned values");
  show_->add_option("file", files_, "Profile file")->required()->expected(1);
  diff_ = command_->add_subcommand("diff", "Print every field that differs between two profiles (exit 1 if any)");
  diff_->add_option("files", files_, "Profile A and profile B")->required()->expected(2);
  validate_ = command_->add_subcommand("validate", "Check profiles completely and re-validate them against this machine");
  validate_->add_option("files", files_, "Profile files")->required();
  validate_->add_flag("--no-live", no_live_, "Only check the files; do not compare them with this machine");
  live_options(validate_);
  export_ = command_->add_subcommand("export", "Write a shareable copy: host-private data dropped, sha256 added");
  export_->add_option("file", files_, "Profile to export")->required()->expected(1);
  export_->add_option("--out", out_, "Where to write ('-' = stdout)")->capture_default_str()->default_val("-");
  export_->add_flag("--keep-private", keep_private_, "Keep host name, GPU UUIDs and the disk directory");
  import_ = command_->add_subcommand("import", "Verify exported profiles, then install all of them (or none)");
  import_->add_option("files", files_, "Exported profile files")->required();
  import_->add_option("--dir", dir_, "Install here instead of the user's profile dir");
  import_->add_flag("--force", force_, "Replace profiles of the same name");
  merge_ = command_->add_subcommand("merge", "Combine measurements of machines of one class; flag outliers");
  merge_->add_option("files", files_, "Profiles of one class (two or more)")->required();
  merge_->add_option("--out", out_, "Where to write the merged, exported profile ('-' = stdout)")->required();
}

int ProfileCommand::run() const {
  if (list_->parsed()) return list();
  if (show_->parsed()) return show();
  if (diff_->parsed()) return diff();
  if (validate_->parsed()) return validate();
  if (export_->parsed()) return export_file();
  if (import_->parsed()) return import_files();
  return merge();
}

namespace {

ProbeOptions live_probe_options(const std::string& machine, const std::string& gpus) {
  ProbeOptions options;
  if (!machine.empty()) apply_replay_machine(machine, options);
  if (!gpus.empty()) options.gpu_record = fs::path(gpus);
  return options;
}

}  // namespace

int ProfileCommand::list() const {
  auto live = fleet::probe_live(live_probe_options(replay_machine_, replay_gpus_));
  if (!live) return fail("cannot read this machine's facts: " + live.error().message);
  const auto path = fleet::profile_search_path();
  std::printf("this machine: %s\nsearch path:\n", live->identity.equivalence_class.c_str());
  for (const fleet::SearchEntry& entry : path) {
    std::printf("  %-17s %s%s\n", entry.origin.c_str(), entry.path.c_str(), fs::exists(entry.path) ? "" : " (absent)");
  }
  const auto found = fleet::find_profiles(path);
  std::printf("profiles: %zu\n", found.size());
  for (const fleet::FoundProfile& f : found) {
    if (!f.profile) {
      std::printf("  %s [%s] INVALID: %s\n", f.path.c_str(), f.origin.c_str(), f.error.c_str());
      continue;
    }
    const std::string& cls = f.profile->identity.equivalence_class;
    const char* verdict = cls.empty() ? "no class (written before schema 3)"
                          : cls == live->identity.equivalence_class ? "MATCHES this machine"
                                                                    : "another class";
    std::printf("  %s [%s] %s, %s profile: %s\n", f.path.c_str(), f.origin.c_str(), cls.empty() ? "-" : cls.c_str(),
                f.profile->provenance.mode.c_str(), verdict);
  }
  return 0;
}

int ProfileCommand::show() const {
  auto p = read_verified(files_[0]);
  if (!p) return fail(p.error().message);
  const Provenance& v = p->provenance;
  std::printf("file          %s\nschema        %d\nfingerprint   %s\n", files_[0].c_str(), p->schema_version,
              p->fingerprint.c_str());
  std::printf("class         %s\nclass basis   %s\n",
              p->identity.equivalence_class.empty() ? "(none: written before schema 3)" : p->identity.equivalence_class.c_str(),
              p->identity.class_basis.c_str());
  std::printf("provenance    %s profile by coli %s at %s, host '%s', sources: ", v.mode.c_str(), v.probe_version.c_str(),
              v.created_utc.c_str(), v.host.c_str());
  for (const std::string& source : v.sources) std::printf("%s; ", source.c_str());
  std::printf("\ncpu           %s, %d cores, %d PUs (%s)\n", p->cpu.model.c_str(), p->cpu.cores, p->cpu.pus,
              kinds_text(p->cpu).c_str());
  std::printf("memory        total %s, headroom %s when recorded (never used from a file: re-read live)\n",
              format_bytes(p->memory.total_bytes).c_str(), format_bytes(p->memory.headroom_bytes).c_str());
  for (const CudaDevice& gpu : p->gpus.cuda) {
    std::printf("gpu (cuda)    %s sm_%d%d, driver %s\n", gpu.name.c_str(), gpu.compute_capability_major,
                gpu.compute_capability_minor, fleet::cuda_driver_text(gpu.driver_version).c_str());
  }
  for (const VulkanDevice& gpu : p->gpus.vulkan) {
    std::printf("gpu (vulkan)  %s, driver major %d\n", gpu.name.c_str(), fleet::vulkan_driver_major(gpu.vendor_id, gpu.driver_version));
  }
  std::printf("threads       decode %d on PUs %s (%s)\n", p->threads.decode_threads, p->threads.decode_pus.to_list().c_str(),
              p->threads.rule.c_str());
  const Measurements& m = p->measurements;
  std::printf("measurements  memory bandwidth %zu points, disk %zu points, GPU kernels %zu\n",
              m.memory ? m.memory->points.size() : 0, m.disk ? m.disk->points.size() : 0, m.gpu_kernels.size());
  if (p->export_info) {
    std::printf("export        %s, private data %s, %s (verified)\n", p->export_info->exported_utc.c_str(),
                p->export_info->private_data_removed ? "removed" : "kept", p->export_info->content_sha256.c_str());
  }
  return 0;
}

int ProfileCommand::diff() const {
  auto a = read_verified(files_[0]);
  auto b = read_verified(files_[1]);
  if (!a || !b) {
    fail((!a ? a : b).error().message);
    return 2;
  }
  const auto differences = fleet::diff_profiles(*a, *b);
  std::printf("--- %s\n+++ %s\n", files_[0].c_str(), files_[1].c_str());
  for (const fleet::FieldDifference& d : differences) {
    std::printf("%s: %s -> %s\n", d.field.c_str(), d.profile_value.c_str(), d.live_value.c_str());
  }
  std::printf("%zu field(s) differ%s\n", differences.size(),
              a->identity.equivalence_class == b->identity.equivalence_class && !a->identity.equivalence_class.empty()
                  ? "; same class"
                  : "; different classes (tuned values are not interchangeable)");
  return differences.empty() ? 0 : 1;
}

int ProfileCommand::validate() const {
  int invalid = 0;
  std::optional<DeviceProfile> live;
  if (!no_live_) {
    auto probed = fleet::probe_live(live_probe_options(replay_machine_, replay_gpus_));
    if (!probed) return fail("cannot read this machine's facts: " + probed.error().message + " (use --no-live)");
    live = std::move(*probed);
  }
  for (const std::string& file : files_) {
    auto p = read_verified(file);
    if (!p) {
      std::fprintf(stderr, "coli profile: %s\n", p.error().message.c_str());
      ++invalid;
      continue;
    }
    std::printf("%s: valid (schema %d, %s, %s profile%s)\n", file.c_str(), p->schema_version,
                p->identity.equivalence_class.empty() ? "no class" : p->identity.equivalence_class.c_str(),
                p->provenance.mode.c_str(), p->export_info ? ", checksum verified" : "");
    if (live) print_lines(fleet::revalidate(*p, *live).report("  " + file));
  }
  return invalid == 0 ? 0 : 1;
}

int ProfileCommand::export_file() const {
  auto p = read_verified(files_[0]);
  if (!p) return fail(p.error().message);
  if (p->identity.equivalence_class.empty()) {
    fleet::assign_identity(*p, fleet::kernel_catalogue_digest());
    std::fprintf(stderr, "coli profile: %s has no [identity] (written before schema 3): its class was computed with "
                         "this build's kernel catalogue %s\n", files_[0].c_str(), p->identity.kernel_catalogue.c_str());
  }
  p->schema_version = kDeviceProfileSchemaVersion;
  const std::string text = fleet::export_profile(*p, fleet::ExportOptions{keep_private_, ""});
  if (out_ == "-") {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (auto saved = write_file_atomically(out_, text); !saved) return fail(saved.error().message);
  std::printf("exported %s -> %s (%s%s)\n", files_[0].c_str(), out_.c_str(), p->identity.equivalence_class.c_str(),
              keep_private_ ? ", private data kept" : ", host name, GPU UUIDs and disk directory removed");
  return 0;
}

int ProfileCommand::import_files() const {
  const fs::path dir = dir_.empty() ? fleet::user_profile_dir() : fs::path(dir_);
  std::vector<std::pair<fs::path, std::string>> writes;  // destination, exact text
  std::vector<std::string> errors;
  std::set<fs::path> names;
  for (const std::string& file : files_) {
    auto text = read_text_file(file);
    auto p = text ? fleet::verify_shared_profile(*text, file) : Result<DeviceProfile>(text.error());
    if (!p) {
      errors.push_back(p.error().message);
      continue;
    }
    if (!p->export_info) errors.push_back(file + ": has no [export] table with a checksum: export it first (coli profile export)");
    if (p->identity.equivalence_class.empty()) errors.push_back(file + ": field 'identity.equivalence_class' is missing");
    const fs::path destination = dir / fs::path(file).filename();
    if (!names.insert(destination.filename()).second) errors.push_back(file + ": two files named " + destination.filename().string());
    if (fs::exists(destination) && !force_) {
      errors.push_back(file + ": " + destination.string() + " exists: pass --force to replace it");
    }
    writes.emplace_back(destination, *text);
  }
  if (!errors.empty()) {
    for (const std::string& error : errors) std::fprintf(stderr, "coli profile: %s\n", error.c_str());
    return fail("nothing imported (" + std::to_string(errors.size()) + " problem(s)); fix or remove those files");
  }
  std::vector<NamedContent> files;
  for (const auto& [destination, text] : writes) files.push_back({destination.filename().string(), text});
  auto update = write_files_together(dir, files);  // all or nothing, also under kill -9 (docs/fleet.md)
  if (!update) return fail(update.error().message + "; nothing imported");
  if (*update == DirectoryUpdate::one_by_one) {
    std::fprintf(stderr, "coli profile: %s cannot swap directories (RENAME_EXCHANGE): each file was replaced "
                         "atomically, one after the other\n", dir.c_str());
  }
  for (const auto& [destination, text] : writes) std::printf("imported %s\n", destination.c_str());
  return 0;
}

int ProfileCommand::merge() const {
  std::vector<DeviceProfile> profiles;
  std::vector<std::string> names;
  for (const std::string& file : files_) {
    auto p = read_verified(file);
    if (!p) return fail(p.error().message + "; nothing merged");
    profiles.push_back(std::move(*p));
    names.push_back(fs::path(file).filename().string());
  }
  auto merged = fleet::merge_profiles(profiles, names);
  if (!merged) return fail(merged.error().message);
  FILE* info = out_ == "-" ? stderr : stdout;  // stdout carries the TOML with --out -
  std::fprintf(info, "merged %zu profiles of %s\n", profiles.size(), merged->merged.identity.equivalence_class.c_str());
  for (const fleet::MachineScore& m : merged->machines) {
    std::fprintf(info, "  %-32s %.2fx its peers (%s, %d points)%s\n", m.name.c_str(), m.ratio,
                 m.kind.empty() ? "no shared points" : m.kind.c_str(), m.points,
                m.outlier ? "  OUTLIER (left out)" : "");
  }
  for (const std::string& finding : merged->findings) std::fprintf(info, "FINDING: %s\n", finding.c_str());
  const std::string text = fleet::export_profile(merged->merged, fleet::ExportOptions{});
  if (out_ == "-") {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (auto saved = write_file_atomically(out_, text); !saved) return fail(saved.error().message);
  std::printf("wrote %s\n", out_.c_str());
  return 0;
}

}  // namespace coli::tools
