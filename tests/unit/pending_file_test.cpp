// Crash safety of the writers' shared pieces (issue 12): temporaries never
// outlive their writer, a set of files lands all or nothing, and converting
// refuses up front when the disk is too small.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "coli/base/files.h"
#include "coli/base/pending_file.h"

namespace coli {
namespace {

namespace fs = std::filesystem;

class PendingFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("coli_pending_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    ::unsetenv("COLI_NO_TMPFILE");
    fs::remove_all(dir_);
  }
  std::set<std::string> entries(const fs::path& dir) const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
    return names;
  }
  static std::string text_of(const fs::path& path) {
    auto text = read_text_file(path);
    return text ? *text : "<unreadable>";
  }
  fs::path dir_;
};

// A pid that ran and ended: a fork that exits at once, reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// Whether `dir`'s filesystem makes nameless files (ext4, tmpfs, xfs, btrfs do).
bool supports_tmpfile(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

TEST(TemporaryNames, OwnerIsThePidInTheName) {
  EXPECT_EQ(temporary_owner("model.coli.tmp.1234.99", "model.coli"), 1234);
  EXPECT_EQ(temporary_owner("model.coli.partial.77.5", "model.coli"), 77);  // the container writer's older name
  EXPECT_EQ(temporary_owner("model.coli.tmp.1234", "model.coli"), std::nullopt);  // no random part
  EXPECT_EQ(temporary_owner("model.coli.tmp.x.1", "model.coli"), std::nullopt);
  EXPECT_EQ(temporary_owner("model.coli.tmp.0.1", "model.coli"), std::nullopt);
  EXPECT_EQ(temporary_owner("other.coli.tmp.1234.1", "model.coli"), std::nullopt);
  EXPECT_EQ(temporary_owner("model.coli", "model.coli"), std::nullopt);
  const std::string made = temporary_name_for("/a/b/model.coli").filename().string();
  EXPECT_EQ(temporary_owner(made, "model.coli"), ::getpid()) << made;
}

TEST(FreeSpace, RefusesWithNeededAndAvailableBytes) {
  EXPECT_TRUE(check_free_space("/data/m.coli", 100, 100).ok());
  const Status refused = check_free_space("/data/m.coli", 3ull << 30, 1ull << 30);
  ASSERT_FALSE(refused.ok());
  const std::string& message = refused.error().message;
  EXPECT_NE(message.find("/data/m.coli"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(3ull << 30) + " bytes"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(1ull << 30) + " bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("--out"), std::string::npos) << message;
  auto here = free_bytes_at(fs::temp_directory_path() / "not-yet" / "x.coli");  // nearest existing parent
  ASSERT_TRUE(here.ok()) << here.error().message;
  EXPECT_GT(*here, 0u);
}

// Issue 12: a SIGKILLed writer's temporaries stayed forever; the next writer
// of the same destination removes those whose writer is gone, and only those.
TEST_F(PendingFileTest, NextWriterSweepsTemporariesOfDeadWriters) {
  const fs::path destination = dir_ / "history.txt";
  const std::string dead = std::to_string(dead_pid());
  for (const std::string& name : std::vector<std::string>{"history.txt.tmp." + dead + ".1", "history.txt.partial." + dead + ".2",
                                                         "history.txt.tmp.1.3", "other.txt.tmp." + dead + ".4"}) {
    std::ofstream(dir_ / name) << "left over";
  }
  fs::create_directories(dir_ / ("history.txt.tmp." + dead + ".5") / "inner");  // a staging directory
  ASSERT_TRUE(write_file_atomically(destination, "new").ok());
  // pid 1 is alive: its temporary may still be written; another destination's is not ours to judge.
  EXPECT_EQ(entries(dir_), (std::set<std::string>{"history.txt", "history.txt.tmp.1.3", "other.txt.tmp." + dead + ".4"}));
  EXPECT_EQ(text_of(destination), "new");
}

TEST_F(PendingFileTest, UncommittedFileLeavesNothingInEitherMode) {
  for (const bool named : {false, true}) {
    if (named) ::setenv("COLI_NO_TMPFILE", "1", 1);
    std::ofstream(dir_ / "out.bin") << "old";
    {
      auto file = PendingFile::create(dir_ / "out.bin");
      ASSERT_TRUE(file.ok()) << file.error().message;
      ASSERT_TRUE(file->write_all("half of the new").ok());
      const bool nameless = !named && supports_tmpfile(dir_);
      EXPECT_EQ(entries(dir_).size(), nameless ? 1u : 2u);  // an O_TMPFILE has no name while it is written
    }
    EXPECT_EQ(entries(dir_), std::set<std::string>{"out.bin"}) << (named ? "named" : "O_TMPFILE");
    EXPECT_EQ(text_of(dir_ / "out.bin"), "old");
    auto file = PendingFile::create(dir_ / "out.bin");
    ASSERT_TRUE(file.ok() && file->write_all("new").ok() && file->commit().ok());
    EXPECT_EQ(entries(dir_), std::set<std::string>{"out.bin"});
    EXPECT_EQ(text_of(dir_ / "out.bin"), "new");
  }
}

// Issue 12: Ctrl-C or kill during a write left the temporary behind. The
// named temporary (no O_TMPFILE) is unlinked by the handler, and the process
// still ends by that signal.
TEST_F(PendingFileTest, TerminationSignalUnlinksTheNamedTemporary) {
  for (const int signal_number : {SIGINT, SIGTERM}) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      ::setenv("COLI_NO_TMPFILE", "1", 1);
      auto file = PendingFile::create(dir_ / "model.coli");
      if (!file || !file->write_all(std::string(1 << 20, 'x'))) ::_exit(3);
      if (::write(ready[1], "r", 1) != 1) ::_exit(4);
      for (;;) ::pause();
    }
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    EXPECT_EQ(entries(dir_).size(), 1u);  // the temporary, while the writer runs
    ::kill(child, signal_number);
    int status = 0;
    ::waitpid(child, &status, 0);
    ::close(ready[0]);
    ::close(ready[1]);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal_number) << status;
    EXPECT_TRUE(entries(dir_).empty()) << "signal " << signal_number;
  }
}

TEST_F(PendingFileTest, FilesTogetherCreateThenSwapKeepingOtherEntries) {
  const fs::path profiles = dir_ / "profiles";
  auto created = write_files_together(profiles, {{"a.toml", "a1"}, {"b.toml", "b1"}});
  ASSERT_TRUE(created.ok()) << created.error().message;
  EXPECT_EQ(*created, DirectoryUpdate::created);
  std::ofstream(profiles / "mine.toml") << "kept";
  fs::create_directories(profiles / "sub");
  std::ofstream(profiles / "sub" / "deep.toml") << "deep";
  auto swapped = write_files_together(profiles / "", {{"b.toml", "b2"}, {"c.toml", "c2"}});
  ASSERT_TRUE(swapped.ok()) << swapped.error().message;
  EXPECT_NE(*swapped, DirectoryUpdate::created);
  EXPECT_EQ(entries(profiles), (std::set<std::string>{"a.toml", "b.toml", "c.toml", "mine.toml", "sub"}));
  EXPECT_EQ(text_of(profiles / "a.toml"), "a1");
  EXPECT_EQ(text_of(profiles / "b.toml"), "b2");
  EXPECT_EQ(text_of(profiles / "c.toml"), "c2");
  EXPECT_EQ(text_of(profiles / "mine.toml"), "kept");
  EXPECT_EQ(text_of(profiles / "sub" / "deep.toml"), "deep");
  EXPECT_EQ(entries(dir_), std::set<std::string>{"profiles"});  // no staging directory left
}

TEST_F(PendingFileTest, FilesTogetherRefusesNamesOutsideTheDirectory) {
  for (const std::string bad : {"", "..", "../escape.toml", "a/b.toml"}) {
    auto refused = write_files_together(dir_ / "profiles", {{"ok.toml", "x"}, {bad, "y"}});
    EXPECT_FALSE(refused.ok()) << bad;
  }
  EXPECT_EQ(entries(dir_), std::set<std::string>{});
}

TEST_F(PendingFileTest, FilesTogetherThroughASymlinkKeepsTheLink) {
  fs::create_directories(dir_ / "real");
  fs::create_directory_symlink(dir_ / "real", dir_ / "link");
  ASSERT_TRUE(write_files_together(dir_ / "link", {{"a.toml", "a"}}).ok());
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(text_of(dir_ / "real" / "a.toml"), "a");
}

}  // namespace
}  // namespace coli
