// The disk's rates the speed model reads from a device profile: the probe's
// random-read points, the engine's I/O pool batches (engine_pool points) and
// the engine's own read rounds from a usage history (DiskReads, disk_reads).
#include "measured_rates.h"

#include <algorithm>
#include <cmath>

#include "coli/container/container.h"  // kAlignment

namespace coli::planner::measured {

namespace {

// The random-read point of `block` bytes at `depth` reads in flight, or null.
const DiskBandwidthPoint* random_point(const DiskBandwidth& disk, u64 block, int depth) {
  for (const DiskBandwidthPoint& p : disk.points) {
    if (p.pattern == "random" && p.block_bytes == block && p.queue_depth == depth && p.gb_per_s.median > 0) return &p;
  }
  return nullptr;
}

// The line through the two points of `points` (sorted by x, at least two)
// that bracket `x`, or through the nearest two beyond them, at `x`; `below`
// indexes the first of the two. Two points at one x give that point's value.
struct OnTheLine {
  std::size_t below = 0;
  double value = 0;
};
template <class X>
OnTheLine along_points(const std::vector<std::pair<X, double>>& points, double x) {
  std::size_t hi = 1;
  while (hi + 1 < points.size() && static_cast<double>(points[hi].first) < x) ++hi;
  const double x0 = static_cast<double>(points[hi - 1].first), x1 = static_cast<double>(points[hi].first);
  const double y0 = points[hi - 1].second, y1 = points[hi].second;
  return {hi - 1, x1 == x0 ? y0 : y0 + (y1 - y0) * (x - x0) / (x1 - x0)};
}

// One read at queue depth 1 takes L + b / B: fitted from the one-deep
// random points at the two smallest blocks (t = block / GB/s), with what the
// best queue depth gained at the smallest block (the I/O pool keeps that
// many reads in flight). Null when the profile lacks those points or they
// do not fit (L < 0: a disk that is bandwidth-bound at both).
struct LatencyFit {
  double latency_s = 0, bytes_per_s = 0, gain = 1;
  int depth = 1;
  u64 small_block = 0, large_block = 0;
  double one_read_s(u64 bytes) const { return latency_s + static_cast<double>(bytes) / bytes_per_s; }
};
// The one-deep random points' blocks of at least `from_block` bytes, smallest
// first, each with the time of one read (block / GB/s).
std::vector<std::pair<u64, double>> one_deep_times(const DiskBandwidth& disk, u64 from_block = 0) {
  std::vector<u64> blocks;
  for (const DiskBandwidthPoint& p : disk.points) {
    if (p.pattern == "random" && p.queue_depth == 1 && p.gb_per_s.median > 0 && p.block_bytes >= from_block)
      blocks.push_back(p.block_bytes);
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  std::vector<std::pair<u64, double>> times;
  for (const u64 block : blocks)
    times.emplace_back(block, static_cast<double>(block) / (random_point(disk, block, 1)->gb_per_s.median * 1e9));
  return times;
}

std::optional<LatencyFit> latency_fit(const DiskBandwidth& disk) {
  const std::vector<std::pair<u64, double>> times = one_deep_times(disk);
  if (times.size() < 2) return std::nullopt;
  const auto [small_block, t1] = times[0];
  const auto [large_block, t2] = times[1];
  if (t2 <= t1) return std::nullopt;
  const DiskBandwidthPoint* small = random_point(disk, small_block, 1);
  LatencyFit fit;
  fit.bytes_per_s = static_cast<double>(large_block - small_block) / (t2 - t1);
  fit.latency_s = t1 - static_cast<double>(small_block) / fit.bytes_per_s;
  if (fit.latency_s < 0) return std::nullopt;
  fit.small_block = small_block, fit.large_block = large_block;
  for (const DiskBandwidthPoint& p : disk.points) {
    if (p.pattern == "random" && p.block_bytes == small_block && p.gb_per_s.median / small->gb_per_s.median > fit.gain) {
      fit.gain = p.gb_per_s.median / small->gb_per_s.median;
      fit.depth = p.queue_depth;
    }
  }
  return fit;
}

// The random point nearest the record stride (by ratio: 1 MiB vs 4 MiB is
// as far as 4 vs 16) at the best queue depth, or at depth 1.
const DiskBandwidthPoint* nearest_random_point(const DiskBandwidth& disk, u64 record_stride, bool one_deep) {
  const DiskBandwidthPoint* best = nullptr;
  auto distance = [&](const DiskBandwidthPoint& p) {
    return std::abs(std::log(static_cast<double>(p.block_bytes) / static_cast<double>(record_stride)));
  };
  for (const DiskBandwidthPoint& p : disk.points) {
    if (p.pattern != "random" || p.block_bytes == 0 || p.gb_per_s.median <= 0 || (one_deep && p.queue_depth != 1)) continue;
    if (!best || distance(p) < distance(*best) - 1e-9 ||
        (std::abs(distance(p) - distance(*best)) <= 1e-9 && p.gb_per_s.median > best->gb_per_s.median)) {
      best = &p;
    }
  }
  return best;
}

// One read alone of `bytes` above the latency fit's blocks: the time at
// queue depth 1 interpolated linearly between the one-deep random points
// that bracket it (t = block / GB/s at each), or along the last two beyond
// the largest. A disk's time per read is not one line from 16 KiB to 16 MiB
// (the H200 machine's: 0.89 ms at 1 MiB, 2.99 ms at 4 MiB, where the line
// from 16 KiB through 1 MiB says 3.5 ms at 4 MiB). nullopt without two
// one-deep points at or above the fit's second block.
struct OneDeepRead {
  double seconds = 0;
  u64 below = 0, above = 0;
};
std::optional<OneDeepRead> one_deep_read(const DiskBandwidth& disk, u64 bytes, u64 from_block) {
  const std::vector<std::pair<u64, double>> times = one_deep_times(disk, from_block);
  if (times.size() < 2) return std::nullopt;
  const OnTheLine line = along_points(times, static_cast<double>(bytes));
  const auto [b0, t0] = times[line.below];
  const auto [b1, t1] = times[line.below + 1];
  if (t1 <= t0) return std::nullopt;
  return OneDeepRead{line.value, b0, b1};
}

}  // namespace

double DiskReads::seconds(double reads) const {
  if (reads <= 0) return 0;
  if (reads < 1) return reads * one_read_s;  // at most one read, that often
  if (batch_seconds.size() >= 2) {
    const OnTheLine line = along_points(batch_seconds, reads);
    return std::max(batch_seconds[line.below].second, line.value);
  }
  return std::max(one_read_s, reads * static_cast<double>(record_bytes) / (gb_per_s * 1e9));
}

namespace {

// Seconds of a batch of `depth` reads of `bytes` through the engine's I/O
// pool: the engine_pool points of that batch size, linear in the block size
// between the two that bracket `bytes` (along the nearest two beyond them).
std::optional<double> engine_batch_time(const DiskBandwidth& disk, int depth, u64 bytes) {
  std::vector<std::pair<u64, double>> times;  // block, seconds of the batch
  for (const DiskBandwidthPoint& p : disk.points) {
    if (p.pattern == kEnginePoolPattern && p.queue_depth == depth && p.block_bytes > 0 && p.gb_per_s.median > 0)
      times.emplace_back(p.block_bytes, static_cast<double>(p.block_bytes) * depth / (p.gb_per_s.median * 1e9));
  }
  std::sort(times.begin(), times.end());
  if (times.size() < 2) return times.empty() ? std::nullopt : std::optional(times[0].second);
  const OnTheLine line = along_points(times, static_cast<double>(bytes));
  // A line through odd points may fall below zero under the smallest block.
  return line.value > 0 ? line.value : times[line.below].second;
}

// The batch curve at `record_stride` (batch size, seconds), from 1 read up;
// empty unless the probe's pool had `io_threads` threads and read alone too.
std::vector<std::pair<double, double>> engine_batch_curve(const DiskBandwidth& disk, u64 record_stride, int io_threads) {
  std::vector<int> depths;
  for (const DiskBandwidthPoint& p : disk.points) {
    if (p.pattern == kEnginePoolPattern) depths.push_back(p.queue_depth);
  }
  std::sort(depths.begin(), depths.end());
  depths.erase(std::unique(depths.begin(), depths.end()), depths.end());
  if (disk.engine_io_threads != io_threads || depths.empty() || depths[0] != 1) return {};
  std::vector<std::pair<double, double>> curve;
  for (const int depth : depths) {
    if (const auto t = engine_batch_time(disk, depth, record_stride)) curve.emplace_back(depth, *t);
  }
  return curve.size() >= 2 ? curve : std::vector<std::pair<double, double>>{};
}

std::string batch_curve_text(const std::vector<std::pair<double, double>>& curve, int io_threads) {
  std::string text = "; through the engine's I/O pool (" + std::to_string(io_threads) + " threads, engine_pool points):";
  for (const auto& [reads, seconds] : curve)
    text += " " + format_fixed(reads, 0) + (reads == 1 ? " read " : " reads ") + format_fixed(seconds * 1e6, 1) + " us" +
            (reads == curve.back().first ? "" : ",");
  return text;
}

}  // namespace

// Records below the second smallest measured block by the latency fit
// (small reads are latency-bound: the rate is the fitted read time divided
// by the queue depth's gain); larger ones at the random point nearest their
// size, best queue depth. A lone read: the fit's time where there is one,
// else the one-deep point's.
// Bare reads (the random points): what the engine_pool points refine.
namespace {
std::optional<DiskReads> bare_disk_reads(const DiskBandwidth& disk, u64 record_stride) {
  const auto fit = latency_fit(disk);
  if (fit && record_stride < fit->large_block) {
    const double per_read = fit->one_read_s(record_stride) / fit->gain;
    const double gb_per_s = static_cast<double>(record_stride) / per_read / 1e9;
    return DiskReads{gb_per_s, fit->one_read_s(record_stride), record_stride,
                     "disk random read " + format_fixed(gb_per_s, 3) + " GB/s for " + format_bytes(record_stride) +
                         " records (latency " + format_fixed(fit->latency_s * 1e6, 1) + " us + " +
                         format_fixed(fit->bytes_per_s / 1e9, 2) + " GB/s per read, from the one-deep " +
                         format_bytes(fit->small_block) + " and " + format_bytes(fit->large_block) + " points, x" +
                         format_fixed(fit->gain, 2) + " at queue depth " + std::to_string(fit->depth) + ")"};
  }
  const DiskBandwidthPoint* best = nearest_random_point(disk, record_stride, false);
  if (!best) return std::nullopt;
  const DiskBandwidthPoint* alone = nearest_random_point(disk, record_stride, true);
  const double stride = static_cast<double>(record_stride);
  const auto between = one_deep_read(disk, record_stride, fit ? fit->large_block : 0);
  const double one_read_s = between ? between->seconds
                            : fit   ? fit->one_read_s(record_stride)
                            : alone ? stride / (alone->gb_per_s.median * 1e9)
                                    : stride / (best->gb_per_s.median * 1e9);
  const std::string one_read_source =
      between ? (record_stride <= between->above ? ", between the one-deep " : ", along the one-deep ") +
                    format_bytes(between->below) + " and " + format_bytes(between->above) + " points"
              : std::string();
  return DiskReads{best->gb_per_s.median, one_read_s, record_stride,
                   "disk random read " + format_fixed(best->gb_per_s.median) + " GB/s (" + format_bytes(best->block_bytes) +
                       " blocks, queue depth " + std::to_string(best->queue_depth) + "; record stride " +
                       format_bytes(record_stride) + "; one read alone " + format_fixed(one_read_s * 1e6, 1) + " us" +
                       one_read_source + ")"};
}
}  // namespace

namespace {

// Rounds of a read count needed before their mean prices that batch size.
constexpr std::uint64_t kMinMeasuredRounds = 3;

// The engine's measured rounds as a batch curve (reads, mean seconds),
// from 1 read up, each batch at least as long as the smaller one before it;
// empty unless they read records of `record_stride` (within the container's
// alignment: buffered reads move the record's bytes) with `io_threads`
// threads and give one read and one larger batch.
std::vector<std::pair<double, double>> measured_batch_curve(const experts::ReadRounds& measured, u64 record_stride,
                                                            int io_threads) {
  if (measured.io_threads != io_threads || measured.record_bytes > record_stride ||
      measured.record_bytes + container::kAlignment <= record_stride)
    return {};
  std::vector<std::pair<double, double>> curve;
  for (std::size_t m = 1; m < measured.rounds.size(); ++m) {
    if (measured.rounds[m] < kMinMeasuredRounds) continue;
    const double mean = measured.seconds[m] / static_cast<double>(measured.rounds[m]);
    curve.emplace_back(static_cast<double>(m), curve.empty() ? mean : std::max(mean, curve.back().second));
  }
  if (curve.size() < 2 || curve.front().first != 1.0) return {};
  return curve;
}

std::string measured_curve_text(const experts::ReadRounds& measured, const std::vector<std::pair<double, double>>& curve,
                                double probed_one_read_s, const std::string& phase_text) {
  std::string text = "; the engine's own " + phase_text + " on this model's file (usage history, beside " +
                     (measured.compute_threads > 0 ? std::to_string(measured.compute_threads) + " compute threads"
                                                   : std::string("a compute team it did not record")) +
                     "; submission to last landing):";
  for (const auto& [reads, seconds] : curve) {
    text += " " + format_fixed(reads, 0) + (reads == 1 ? " read " : " reads ") + format_fixed(seconds * 1e3, 2) + " ms (" +
            std::to_string(measured.rounds[static_cast<std::size_t>(reads)]) + " rounds)" +
            (reads == curve.back().first ? "" : ",");
  }
  return text + ", where the probe's test file gave " + format_fixed(probed_one_read_s * 1e3, 2) + " ms a read";
}

// The history's rounds that price a plan: of its record stride and I/O pool
// beside its compute team, else beside a team not recorded (a version-5
// history). Rounds beside another team do not: where compute and I/O
// threads share cores a round's time depends on the team (a 2-core VM's
// took 0.14 ms beside 2 compute threads, 0.06 beside one).
struct ChosenRounds {
  std::optional<experts::ReadRounds> rounds;  // a copy: a phase's rounds are made for the choice
  std::vector<std::pair<double, double>> curve;
  std::vector<int> other_teams;  // teams whose rounds would have fit but for the team
};
ChosenRounds choose_measured_rounds(std::span<const experts::ReadRounds> measured, u64 record_stride, int io_threads,
                                    int compute_threads) {
  ChosenRounds chosen;
  for (const int wanted : {compute_threads, 0}) {
    for (const experts::ReadRounds& rounds : measured) {
      if (rounds.compute_threads != wanted) continue;
      auto curve = measured_batch_curve(rounds, record_stride, io_threads);
      if (curve.empty()) continue;
      chosen.rounds = rounds, chosen.curve = std::move(curve);
      return chosen;
    }
  }
  for (const experts::ReadRounds& rounds : measured) {
    if (!measured_batch_curve(rounds, record_stride, io_threads).empty()) chosen.other_teams.push_back(rounds.compute_threads);
  }
  return chosen;
}

// The rounds that price `phase` (ChosenRounds), what they are, and a time
// each round adds: the phase's own rounds where they make a curve; else
// both phases' together, each batch moved by what the phase's one-read
// rounds took beyond theirs where it has enough of those (a decode test of
// a few tokens gives one-read rounds alone, and a round after a token's
// compute finds the pool idle, which costs a round the same whatever its
// reads: the 2-core VM's one-read rounds took 0.18 ms in decode, 0.14 in
// all); else both phases' as they are (a history before version 9).
struct PhaseRounds {
  ChosenRounds chosen;
  std::string text;
  double offset_s = 0;
  std::string offset_text;
};
PhaseRounds phase_rounds(std::span<const experts::ReadRounds> measured, u64 record_stride, int io_threads,
                         int compute_threads, ReadPhase phase) {
  PhaseRounds out;
  const bool decode = phase == ReadPhase::decode;
  if (phase != ReadPhase::both) {
    std::vector<experts::ReadRounds> of_phase;
    for (const experts::ReadRounds& rounds : measured) of_phase.push_back(rounds.phase(decode));
    out.chosen = choose_measured_rounds(of_phase, record_stride, io_threads, compute_threads);
    out.text = decode ? "decode read rounds" : "prompt read rounds";
    if (out.chosen.rounds) return out;
  }
  out.chosen = choose_measured_rounds(measured, record_stride, io_threads, compute_threads);
  out.text = "read rounds (prompt and decode together)";
  if (!out.chosen.rounds || phase == ReadPhase::both) return out;
  const experts::ReadRounds own = out.chosen.rounds->phase(decode);
  if (own.rounds[1] < kMinMeasuredRounds) return out;
  const double own_one = own.seconds[1] / static_cast<double>(own.rounds[1]), all_one = out.chosen.curve.front().second;
  out.offset_s = own_one - all_one;
  out.offset_text = "; the " + std::string(decode ? "generated tokens'" : "prompts'") + " own one-read rounds took " +
                    format_fixed(own_one * 1e3, 3) + " ms (" + std::to_string(own.rounds[1]) + " rounds) against " +
                    format_fixed(all_one * 1e3, 3) + ": each batch priced " + format_fixed(out.offset_s * 1e3, 3) +
                    " ms " + (out.offset_s >= 0 ? "longer" : "shorter") + " (too few of their larger rounds for a curve)";
  return out;
}

// What a waited round costs the token's compute after it (DiskReads::resume_s):
// the mean compute of the tokens that waited less that of those that did
// not, over their mean waited rounds.
void add_resume_cost(const experts::ReadRounds& rounds, DiskReads& reads) {
  if (!rounds.prices_resume()) return;
  const double calm = rounds.calm_seconds / static_cast<double>(rounds.calm_tokens);
  const double waiting = rounds.waiting_seconds / static_cast<double>(rounds.waiting_tokens);
  const double per_token = static_cast<double>(rounds.waiting_rounds) / static_cast<double>(rounds.waiting_tokens);
  const double resume = (waiting - calm) / per_token;
  reads.resume_s = std::max(0.0, resume);
  reads.text += "; after a round it waited for, a generated token computed " + format_fixed(resume * 1e6, 1) +
                " us longer a waited round (" + std::to_string(rounds.waiting_tokens) + " tokens that waited, " +
                format_fixed(per_token, 2) + " rounds each, against " + std::to_string(rounds.calm_tokens) +
                " that did not: their passes less their waits, " + format_fixed(waiting * 1e3, 3) + " / " +
                format_fixed(calm * 1e3, 3) + " ms; " + (resume < 0 ? "faster: noise, counted 0)" : "priced per waited round)");
}

std::string other_teams_text(const std::vector<int>& teams, int compute_threads) {
  std::string list;
  for (const int team : teams) list += (list.empty() ? "" : ", ") + std::to_string(team);
  return "; the usage history's read rounds ran beside " + list + " compute threads, not the plan's " +
         std::to_string(compute_threads) + " (rounds depend on the team where they share cores): not used";
}

}  // namespace

std::optional<DiskReads> disk_reads(const DeviceProfile& profile, u64 record_stride, int io_threads,
                                    std::span<const experts::ReadRounds> measured, int compute_threads, ReadPhase phase) {
  if (!profile.measurements.disk) return std::nullopt;
  const DiskBandwidth& disk = *profile.measurements.disk;
  auto reads = bare_disk_reads(disk, record_stride);
  if (!reads) return std::nullopt;
  reads->bare_one_read_s = reads->one_read_s;
  // The engine's own read path, where the probe timed it: hand-offs to and
  // from the pool's threads and the depth the pool reaches, which the bare
  // points (threads reading back to back) leave out.
  if (io_threads == 0) {  // the compute thread reads its misses itself, one after another
    reads->batch_seconds = {{1.0, reads->one_read_s}, {2.0, 2 * reads->one_read_s}};
    reads->text += "; io_threads 0: the compute thread reads one miss after another";
    return reads;
  }
  reads->batch_seconds = engine_batch_curve(disk, record_stride, io_threads);
  if (!reads->batch_seconds.empty()) {
    reads->one_read_s = reads->batch_seconds.front().second;
    reads->text += batch_curve_text(reads->batch_seconds, io_threads);
  } else if (disk.engine_io_threads > 0 && disk.engine_io_threads != io_threads) {
    reads->text += "; the probe timed the engine's I/O pool at " + std::to_string(disk.engine_io_threads) +
                   " threads, not the plan's " + std::to_string(io_threads) + ": bare reads";
  }
  // The engine's own rounds, where a run measured them beside this team, over the probe's test file.
  PhaseRounds priced = phase_rounds(measured, record_stride, io_threads, compute_threads, phase);
  ChosenRounds& chosen = priced.chosen;
  if (chosen.rounds) {
    reads->text += measured_curve_text(*chosen.rounds, chosen.curve, reads->one_read_s, priced.text) + priced.offset_text;
    for (auto& [m, seconds] : chosen.curve) seconds += priced.offset_s;
    reads->batch_seconds = std::move(chosen.curve);
    reads->beside_the_team = true;
    reads->one_read_s = reads->batch_seconds.front().second;
    if (chosen.rounds->waited >= kMinMeasuredRounds) {
      reads->wake_s = chosen.rounds->wake_seconds / static_cast<double>(chosen.rounds->waited);
      reads->text += "; the compute thread ran again " + format_fixed(reads->wake_s * 1e6, 1) +
                     " us after a round's last read landed (mean of " + std::to_string(chosen.rounds->waited) +
                     " rounds that waited for it)";
    }
    if (phase == ReadPhase::decode) add_resume_cost(*chosen.rounds, *reads);
  } else if (!chosen.other_teams.empty()) {
    reads->text += other_teams_text(chosen.other_teams, compute_threads);
  }
  return reads;
}

// Why a measured profile has no disk figure, and what to run: the probe
// records why it could not measure its default directory (kDiskNotMeasured).
std::string missing_disk_bandwidth(const DeviceProfile& profile) {
  const std::string advice = "run coli-probe --disk-dir DIR with a writable directory on the models' filesystem";
  const auto& disk = profile.measurements.disk;
  if (disk && disk->points.empty() && disk->note.rfind(kDiskNotMeasured, 0) == 0) {
    return "no measured disk bandwidth: the probe could not measure " + disk->directory + " (" +
           disk->note.substr(std::string_view(kDiskNotMeasured).size()) + "): " + advice;
  }
  return "no measured disk bandwidth: " + advice;
}

}  // namespace coli::planner::measured
