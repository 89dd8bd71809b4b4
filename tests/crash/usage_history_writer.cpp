// Drives the real usage-history save (UsageHistory::save) for the crash-safety
// test (tests/cli/crash_safety_test.sh), which kills it at random points:
//   usage_history_writer write a|b FILE   save history A or B once
//   usage_history_writer loop N FILE      save A, B, A, ... N times
// A and B are fixed, distinct and large enough (48 layers x 128 experts) that
// a save takes a while.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "coli/experts/usage_history.h"

namespace {

using coli::experts::UsageHistory;
using coli::experts::UsageHistoryKey;

const UsageHistoryKey kKey{48, 128, 8, "fnv1a64:crash-safety-test"};

UsageHistory history(int which) {
  auto made = UsageHistory::create(kKey);
  std::vector<std::vector<std::uint64_t>> counts(kKey.n_layers, std::vector<std::uint64_t>(kKey.n_experts));
  for (int layer = 0; layer < kKey.n_layers; ++layer) {
    for (int expert = 0; expert < kKey.n_experts; ++expert) {
      counts[layer][expert] = static_cast<std::uint64_t>((layer * 7919 + expert * 104729 + which * 15485863) % 100003);
    }
  }
  (void)made->add_counts(counts, 1000003 + static_cast<std::uint64_t>(which));
  return std::move(*made);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "usage_history_writer: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 2 ? argv[1] : "";
  if (mode == "write" && argc == 4) {
    const coli::Status saved = history(std::string_view(argv[2]) == "b" ? 1 : 0).save(argv[3]);
    return saved ? 0 : fail(saved.error().message);
  }
  if (mode == "loop" && argc == 4) {
    const UsageHistory both[] = {history(0), history(1)};
    const long saves = std::strtol(argv[2], nullptr, 10);
    for (long i = 0; i < saves; ++i) {
      if (const coli::Status saved = both[i % 2].save(argv[3]); !saved) return fail(saved.error().message);
    }
    return 0;
  }
  return fail("usage: usage_history_writer write a|b FILE | loop N FILE");
}
