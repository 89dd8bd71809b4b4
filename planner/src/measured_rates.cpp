// The measured rates the speed model reads from a device profile, each with
// the text coli-plan prints for it (planner/README.md names the terms).
#include "measured_rates.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "coli/base/pass_shape.h"    // kPassSlice
#include "coli/forward/attention.h"  // kAttentionTile, kAttentionRowsPerBlock

namespace coli::planner::measured {

// The "read" kernel (decode streams weights, it does not write them) at the
// thread count nearest the plan's; threads spread over all kinds (-1) beat a
// single-kind point at the same distance, since the plan does not pin a kind.
std::optional<Bandwidth> ram_bandwidth(const DeviceProfile& profile, int threads) {
  if (!profile.measurements.memory) return std::nullopt;
  const MemoryBandwidthPoint* best = nullptr;
  auto key = [&](const MemoryBandwidthPoint& p) { return std::pair{std::abs(p.threads - threads), p.kind_rank != -1}; };
  for (const MemoryBandwidthPoint& p : profile.measurements.memory->points) {
    if (p.kernel != "read" || p.gb_per_s.median <= 0) continue;
    if (!best || key(p) < key(*best)) best = &p;
  }
  if (!best) return std::nullopt;
  return Bandwidth{best->gb_per_s.median, "RAM read " + format_fixed(best->gb_per_s.median, 1) + " GB/s (measured at " +
                                              std::to_string(best->threads) + " threads, plan " +
                                              std::to_string(threads) + ")"};
}

// The GEMV bandwidth the self-test measured on the tier's device for this
// expert format (the median of the passing variant nearest the expert shape).
std::optional<Bandwidth> vram_bandwidth(const DeviceProfile& profile, const ModelFootprint& fp, const GpuTier& tier) {
  const std::string format(name_of(fp.expert_format));  // variant names carry it: gemv_q4_g64_...
  const double size = static_cast<double>(fp.config.hidden_size) * static_cast<double>(fp.config.moe_intermediate_size);
  const GpuKernelResult* best = nullptr;
  auto distance = [&](const GpuKernelResult& r) { return std::abs(std::log(static_cast<double>(r.rows) * r.cols / size)); };
  for (const GpuKernelResult& r : profile.measurements.gpu_kernels) {
    // The plan's backend only: the Vulkan self-test says nothing of the CUDA decoder's kernels.
    if (r.backend != tier.backend) continue;
    if (!r.measured_on(tier.device.gpu.index, tier.device.gpu.name) || !r.passed || r.gb_per_s.median <= 0) continue;
    if (r.variant.find(format) == std::string::npos) continue;
    if (!best || distance(r) < distance(*best) - 1e-9 ||
        (std::abs(distance(r) - distance(*best)) <= 1e-9 && r.gb_per_s.median > best->gb_per_s.median)) {
      best = &r;
    }
  }
  if (!best) return std::nullopt;
  return Bandwidth{best->gb_per_s.median, "VRAM GEMV " + format_fixed(best->gb_per_s.median, 1) + " GB/s (" + best->variant +
                                              " " + std::to_string(best->rows) + "x" + std::to_string(best->cols) +
                                              ", coli-probe --gpu-selftest)"};
}

// The probe's host-to-device copy bandwidth of the plan's GPU, at the block
// size nearest `bytes` (a hybrid batch's staging pass).
std::optional<Bandwidth> upload_bandwidth(const DeviceProfile& profile, const GpuTier& tier, double bytes) {
  const UploadBandwidthPoint* best = nullptr;
  auto distance = [&](const UploadBandwidthPoint& u) { return std::abs(std::log(static_cast<double>(u.block_bytes) / bytes)); };
  for (const UploadBandwidthPoint& u : profile.measurements.uploads) {
    if (u.backend != tier.backend || u.device_index != tier.device.gpu.index || u.device != tier.device.gpu.name ||
        u.block_bytes == 0 || u.gb_per_s.median <= 0) {
      continue;
    }
    if (!best || distance(u) < distance(*best)) best = &u;
  }
  if (!best) return std::nullopt;
  return Bandwidth{best->gb_per_s.median, "host-to-GPU copies " + format_fixed(best->gb_per_s.median, 1) + " GB/s (" +
                                              format_bytes(best->block_bytes) + " blocks, coli-probe)"};
}

namespace {
// The broadcast read of `floats` (a step's hidden state): along the line
// through the probe's two sizes, held at the narrow figure below it.
double broadcast_us(const ParallelOverheadPoint& p, double floats) {
  const double slope = (p.broadcast_us - p.broadcast_narrow_us) / (kBroadcastFloats - kBroadcastNarrowFloats);
  return std::max(0.0, p.broadcast_narrow_us + slope * (std::max<double>(floats, kBroadcastNarrowFloats) - kBroadcastNarrowFloats));
}
}  // namespace

// The probe's OpenMP costs at the team size nearest the plan's, for `steps`
// whose threads read a hidden state of `hidden_floats`.
std::optional<StepCost> parallel_step_cost(const DeviceProfile& profile, const Team& team, ParallelSteps steps,
                                           double hidden_floats) {
  if (!profile.measurements.parallel_overhead) return std::nullopt;
  const ParallelOverheadPoint* best =
      nearest_team(profile.measurements.parallel_overhead->points, team, [](const ParallelOverheadPoint&) { return true; });
  if (!best) return std::nullopt;
  const double broadcast = broadcast_us(*best, hidden_floats), us = best->region_us + broadcast;
  return StepCost{us * 1e-6, best->barrier_us * 1e-6,
                  std::to_string(steps.regions) + " parallel steps x " + format_fixed(us) + " us per step (region " +
                      format_fixed(best->region_us) + " + broadcast read of " + format_bytes(static_cast<u64>(4 * hidden_floats)) +
                      " " + format_fixed(broadcast) + " us) + " + std::to_string(steps.barriers) + " barriers x " +
                      format_fixed(best->barrier_us) + " us, measured at " + std::to_string(best->threads) + " threads"};
}

std::optional<ReadInterferenceCost> read_interference_cost(const DeviceProfile& profile, const Team& team) {
  const auto& interference = profile.measurements.read_interference;
  if (!interference) return std::nullopt;
  const ReadInterferencePoint* best =
      nearest_team(interference->points, team, [](const ReadInterferencePoint& p) { return p.alone_gb_per_s > 0; });
  if (!best) return std::nullopt;
  const double slowdown = std::max(0.0, best->slowdown), progress = std::clamp(best->read_progress, 0.0, 1.0);
  return ReadInterferenceCost{
      slowdown, progress,
      "compute " + format_fixed(100 * slowdown, 1) + "% slower while a read is in flight, the read at " +
          format_fixed(100 * progress, 0) + "% of its speed alone (" + interference->kernel +
          " on " + best->thread_set + ": " + format_fixed(best->alone_gb_per_s, 1) + " GB/s alone, " +
          format_fixed(best->with_reads_gb_per_s, 1) + " beside " + format_bytes(interference->block_bytes) +
          (interference->direct_io ? " O_DIRECT" : " buffered") + " reads, median of " +
          std::to_string(best->pairs) + " pairs; " + format_fixed(best->reads_beside_per_s, 0) + " reads/s beside it, " +
          format_fixed(best->reads_alone_per_s, 0) + " alone" +
          (best->slowdown < 0 ? "; the kernel faster beside them: noise, counted 0" : "") +
          (best->read_progress > 1 ? "; the reads faster beside it: noise, counted 100%" : "") + ")"};
}

// The tuning phase's decode kernels for the experts (one layer's top-k per
// call) and for the dense matrices as the model holds them (four separate
// GEMVs a layer: the int8 GEMV for q8 and q4, the engine's float GEMV for the
// checkpoint's bf16; none is timed for f16 or f32 dense), in preference
// order: profiles from before dense_q4_decode have q4 dense priced by the
// experts' q4 kernel.
std::vector<std::string> expert_decode_kernels(WeightFormat experts) {
  if (!traits(experts).quantized) return {};
  return {experts == WeightFormat::q4_g64 ? "expert_q4_decode" : "expert_q8_decode"};
}
std::vector<std::string> dense_decode_kernels(const ModelFootprint& fp) {
  if (const auto q = quantized_format(fp.dense_format)) {
    if (*q == WeightFormat::q4_g64) return {"dense_q4_decode", "expert_q4_decode"};
    return {"dense_q8_decode"};
  }
  if (fp.source_dtype.rfind("bfloat16", 0) == 0) return {"dense_bf16_decode"};
  return {};
}

namespace {

// A timed call: the bytes it streamed and its seconds less the fork/joins
// it entered where the profile measured them at the team; `steps` empty
// where it did not.
struct NetCall {
  double bytes = 0, streaming_s = 0;
  std::string steps;  // "1 region and 3 barriers", "4 regions", or "" where not taken out
};
NetCall net_call(const DeviceProfile& profile, const Team& team, const KernelThroughputPoint& point, ParallelSteps steps) {
  const double gbs = point.gb_per_s.median;
  const double call_s = point.tokens_per_s.median > 0 && point.batch > 0 ? point.batch / point.tokens_per_s.median : 0;
  const auto step = team.size() > 1 && call_s > 0 ? parallel_step_cost(profile, team, steps, static_cast<double>(point.cols)) : std::nullopt;
  if (!step) return {gbs * 1e9 * call_s, call_s, ""};
  const double forks_s = steps.regions * step->seconds + steps.barriers * step->barrier_seconds;
  // Never less than half the timed call: a noisy overhead must not make the kernel infinitely fast.
  return {gbs * 1e9 * call_s, std::max(call_s - forks_s, call_s / 2),
          std::to_string(steps.regions) + (steps.regions == 1 ? " region" : " regions") +
              (steps.barriers > 0 ? " and " + std::to_string(steps.barriers) + " barriers" : std::string())};
}
// A decode point's call: an expert point's batch region and barriers, a
// dense point's region per matrix.
NetCall net_call(const DeviceProfile& profile, const Team& team, const KernelThroughputPoint& point) {
  const bool experts = point.kernel.rfind("expert_", 0) == 0;
  return net_call(profile, team, point, experts ? kDecodeExpertBatch : ParallelSteps{point.matrices, 0});
}

// A decode point's GB/s with its call's fork/joins taken out (decode_kernel_rate).
Bandwidth net_of_steps(const DeviceProfile& profile, const Team& team, const std::string& kernel,
                       const KernelThroughputPoint& point) {
  const double gbs = point.gb_per_s.median;
  const std::string measured = kernel + " " + format_fixed(gbs, 1) + " GB/s (measured at " + std::to_string(point.threads) + " threads";
  const NetCall call = net_call(profile, team, point);
  if (call.steps.empty()) return Bandwidth{gbs, measured + ")"};
  const double net = call.bytes / call.streaming_s / 1e9;
  return Bandwidth{net, kernel + " " + format_fixed(net, 1) + " GB/s streaming (" + format_fixed(gbs, 1) + " GB/s measured at " +
                            std::to_string(point.threads) + " threads, less its call's " + call.steps +
                            ", priced as parallel steps)"};
}

}  // namespace

// How fast the engine's own decode GEMV `kernel` streams weights at the team
// size nearest `threads`, as the tuning phase timed it. Below the RAM
// bandwidth, the kernel, not the memory, bounds decode (one core streams
// less than the bus carries; the float GEMV computes more per byte).
// The first of `kernels` the profile timed.
std::optional<Bandwidth> decode_kernel_rate(const DeviceProfile& profile, const std::vector<std::string>& kernels,
                                            const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  for (const std::string& kernel : kernels) {
    const KernelThroughputPoint* best = nearest_team(profile.measurements.kernel_tuning->points, team,
                                                     [&](const KernelThroughputPoint& p) {
                                                       return p.kernel == kernel && p.gb_per_s.median > 0;
                                                     });
    if (best) return net_of_steps(profile, team, kernel, *best);
  }
  return std::nullopt;
}

namespace {

// The line t = fixed + per_unit x through two measured (x, t) points, or
// nullopt where it does not describe a cost (per_unit <= 0 or fixed < 0):
// the model's costs per row and per position pair.
struct LinearCost {
  double fixed = 0, per_unit = 0;
};
std::optional<LinearCost> line_through(double x_a, double t_a, double x_b, double t_b) {
  const double per_unit = (t_a - t_b) / (x_a - x_b);
  const double fixed = t_b - x_b * per_unit;
  if (!(per_unit > 0) || fixed < 0) return std::nullopt;
  return LinearCost{fixed, per_unit};
}

}  // namespace

std::optional<RowCost> float_gemv_row_cost(const DeviceProfile& profile, const Team& team, WeightsFrom from) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  const std::string suffix = from == WeightsFrom::cache ? "_cached" : from == WeightsFrom::last_level ? "_llc" : "";
  const std::string wide_kernel = "dense_bf16_decode" + suffix, narrow_kernel = "dense_bf16_decode_narrow" + suffix;
  auto point = [&](const std::string& kernel) {
    return nearest_team(profile.measurements.kernel_tuning->points, team, [&](const KernelThroughputPoint& p) {
      return p.kernel == kernel && p.gb_per_s.median > 0 && p.tokens_per_s.median > 0 && p.batch > 0 && p.rows > 0 &&
             p.cols > 0 && p.matrices > 0;
    });
  };
  const KernelThroughputPoint* wide = point(wide_kernel);
  const KernelThroughputPoint* narrow = point(narrow_kernel);
  if (!wide || !narrow || wide->threads != narrow->threads || wide->cols <= narrow->cols) return std::nullopt;
  // Seconds per row and bytes per row of each call (bf16: 2 bytes a weight),
  // net of its regions as the experts' fit (the parallel-steps term prices them).
  const NetCall wide_call = net_call(profile, team, *wide);
  const NetCall narrow_call = net_call(profile, team, *narrow);
  auto per_row = [](const NetCall& call, const KernelThroughputPoint& p) {
    const double bytes = 2.0 * p.cols;
    return std::pair{bytes * call.streaming_s / call.bytes, bytes};
  };
  const auto [t_wide, b_wide] = per_row(wide_call, *wide);
  const auto [t_narrow, b_narrow] = per_row(narrow_call, *narrow);
  const auto fit = line_through(b_wide, t_wide, b_narrow, t_narrow);  // seconds per row against bytes per row
  if (!fit) return std::nullopt;
  const double row = fit->fixed, gbs = 1e-9 / fit->per_unit;
  const std::string& steps = narrow_call.steps;
  return RowCost{row, gbs,
                 wide_kernel + " " + format_fixed(row * 1e9, 2) + " ns per row + " + format_fixed(gbs, 1) + " GB/s (fitted from " +
                     std::to_string(wide->cols) + "- and " + std::to_string(narrow->cols) + "-wide rows" +
                     (from == WeightsFrom::cache        ? " warm in the caches"
                      : from == WeightsFrom::last_level ? " warm in the last-level cache, each thread's share 4x its core's own"
                                                        : "") +
                     ", measured at " +
                     std::to_string(wide->threads) + " threads" +
                     (steps.empty() ? "" : ", less each call's regions, priced as parallel steps") + ")"};
}

namespace {

// An expert decode point's call per expert, net of its fork/joins: seconds, rows, bytes.
struct PerExpert {
  double seconds = 0, rows = 0, bytes = 0;
};
// `batch_s`: the call's own cost apart from its experts (expert_batch_call_seconds), taken out first.
PerExpert per_expert(const NetCall& call, const KernelThroughputPoint& p, double batch_s) {
  // An expert point's rows are its width, its columns the hidden size:
  // each of its matrices / 3 experts walks 2 x width + hidden rows.
  const double experts = p.matrices / 3.0;
  return {std::max(call.streaming_s - batch_s, call.streaming_s / 2) / experts, 2.0 * p.rows + p.cols, call.bytes / experts};
}

// A batch call's own cost F apart from its experts (grouping the rows,
// setting up its steps, quantising the token), from one token on 8 and on 2
// of the same 64-wide experts (expert_q4_prefill_single and _single_pair,
// each net of its fork/joins): t(n) = F + n e through both. 0 where the pair
// was not timed at the team (profiles before it) or the two give no F.
// `eight_call`: the 8-expert point's net call, which the caller has made.
double expert_batch_call_seconds(const DeviceProfile& profile, const Team& team, const KernelThroughputPoint& eight,
                                 const NetCall& eight_call, const KernelThroughputPoint* pair) {
  if (!pair || pair->threads != eight.threads) return 0.0;
  const double n8 = eight.matrices / 3.0, n2 = pair->matrices / 3.0;
  if (!(n8 > n2)) return 0.0;
  const double t8 = eight_call.streaming_s, t2 = net_call(profile, team, *pair).streaming_s;
  const double per_expert = (t8 - t2) / (n8 - n2);
  return per_expert > 0 ? std::max(0.0, t2 - n2 * per_expert) : 0.0;
}

// The cost per expert E, per row c and per byte 1 / R of three points,
// t = E + rows c + bytes / R: the plane through all three (Cramer's rule),
// or, where its cost per row comes out below zero, the least-squares fit of
// E and R alone (c = 0). A few percent of noise on a wide point tips a
// small c below zero: on the 2-core VM the plane did so at 2 threads, and
// the line through the wide points alone then priced a 64-wide expert at a
// sixth of its measured call. nullopt where neither describes costs (E or c
// below 0, R not positive, or degenerate points).
struct ExpertCost {
  double per_expert = 0, per_row = 0, per_byte = 0;
  bool rows_left_out = false;  // the c = 0 fit
};
std::optional<ExpertCost> exact_plane(const std::array<PerExpert, 3>& p) {
  const auto det = [](const std::array<std::array<double, 3>, 3>& m) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  };
  std::array<std::array<double, 3>, 3> a{};
  for (std::size_t i = 0; i < 3; ++i) a[i] = {1.0, p[i].rows, p[i].bytes};
  const double d = det(a);
  if (std::abs(d) < 1e-12 * std::abs(p[0].rows * p[1].bytes)) return std::nullopt;
  std::array<double, 3> x{};
  for (std::size_t column = 0; column < 3; ++column) {
    auto m = a;
    for (std::size_t i = 0; i < 3; ++i) m[i][column] = p[i].seconds;
    x[column] = det(m) / d;
  }
  return ExpertCost{x[0], x[1], x[2]};
}
// Least squares of t = E + bytes / R over the points, each residual
// relative to its point's time (the 64-wide call is a hundredth of the wide
// one's: absolute residuals would let the wide point's noise set E).
std::optional<ExpertCost> fit_without_rows(const std::array<PerExpert, 3>& p) {
  double n = 0, b = 0, bb = 0, t = 0, bt = 0;
  for (const PerExpert& q : p) {
    if (!(q.seconds > 0)) return std::nullopt;
    const double w = 1 / (q.seconds * q.seconds);
    n += w, b += w * q.bytes, bb += w * q.bytes * q.bytes, t += w * q.seconds, bt += w * q.bytes * q.seconds;
  }
  const double d = n * bb - b * b;
  if (!(d > 1e-12 * n * bb)) return std::nullopt;
  return ExpertCost{(t * bb - b * bt) / d, 0, (n * bt - b * t) / d, true};
}
std::optional<ExpertCost> plane_through(const std::array<PerExpert, 3>& p) {
  std::optional<ExpertCost> cost = exact_plane(p);
  if (cost && cost->per_row < 0) cost = fit_without_rows(p);
  if (!cost || cost->per_expert < 0 || cost->per_row < 0 || !(cost->per_byte > 0)) return std::nullopt;
  cost->per_row = std::max(0.0, cost->per_row);  // no "-0.00 ns per row"
  return cost;
}

}  // namespace

// Both decode points at one team (the nearest to the plan's), each net of its
// call's fork/joins; the line through their seconds per row against bytes
// per row, or, with the int4 single-token batch of 64-wide experts beside
// them (expert_q4_prefill_single: the decode path, one token on 8
// experts), the plane through all three with a cost per expert.
std::optional<RowCost> expert_gemv_row_cost(const DeviceProfile& profile, WeightFormat experts, const Team& team) {
  const std::vector<std::string> kernels = expert_decode_kernels(experts);
  if (!profile.measurements.kernel_tuning || kernels.empty()) return std::nullopt;
  const std::string wide_kernel = kernels.front(), narrow_kernel = wide_kernel + "_narrow";
  auto point = [&](const std::string& kernel) {
    return nearest_team(profile.measurements.kernel_tuning->points, team, [&](const KernelThroughputPoint& p) {
      return p.kernel == kernel && p.gb_per_s.median > 0 && p.tokens_per_s.median > 0 && p.batch == 1 && p.rows > 0 &&
             p.cols > 0 && p.matrices >= 3;
    });
  };
  const KernelThroughputPoint* wide = point(wide_kernel);
  const KernelThroughputPoint* narrow = point(narrow_kernel);
  if (!wide || !narrow || wide->threads != narrow->threads || wide->rows == narrow->rows) return std::nullopt;
  const NetCall wide_call = net_call(profile, team, *wide);
  const std::string measured = ", measured at " + std::to_string(wide->threads) + " threads" +
                               (wide_call.steps.empty() ? "" : ", less each call's " + wide_call.steps + ", priced as parallel steps") + ")";
  // The single-token point joins the wide pair only from their team.
  const KernelThroughputPoint* single = experts == WeightFormat::q4_g64 ? point("expert_q4_prefill_single") : nullptr;
  if (single && single->threads != wide->threads) single = nullptr;
  const NetCall single_call = single ? net_call(profile, team, *single) : NetCall{};
  const double batch_s =
      single ? expert_batch_call_seconds(profile, team, *single, single_call, point("expert_q4_prefill_single_pair")) : 0.0;
  const PerExpert w = per_expert(wide_call, *wide, batch_s), n = per_expert(net_call(profile, team, *narrow), *narrow, batch_s);
  if (single) {
    const PerExpert one = per_expert(single_call, *single, batch_s);
    if (const auto cost = plane_through({w, n, one})) {
      const double gbs = 1e-9 / cost->per_byte;
      return RowCost{cost->per_row, gbs,
                     wide_kernel + " " +
                         (batch_s > 0 ? format_fixed(batch_s * 1e6, 2) + " us per batch call (its own, apart from its experts: "
                                                                          "expert_q4_prefill_single on 8 and _pair on 2 of them) + "
                                      : "") +
                         format_fixed(cost->per_expert * 1e6, 2) + " us per expert + " + format_fixed(cost->per_row * 1e9, 2) +
                         " ns per row + " + format_fixed(gbs, 1) + " GB/s (fitted from " + std::to_string(wide->rows) + "- and " +
                         std::to_string(narrow->rows) + "-wide experts of " + std::to_string(wide->cols) +
                         " and expert_q4_prefill_single's one token on " + std::to_string(single->rows) + "-wide experts of " +
                         std::to_string(single->cols) +
                         (cost->rows_left_out ? ", without a cost per row: the plane through the three had a negative one" : "") +
                         measured,
                     cost->per_expert, batch_s};
    }
  }
  // Seconds per row against bytes per row.
  const auto fit = line_through(w.bytes / w.rows, w.seconds / w.rows, n.bytes / n.rows, n.seconds / n.rows);
  if (!fit) return std::nullopt;
  const double row = fit->fixed, gbs = 1e-9 / fit->per_unit;
  return RowCost{row, gbs,
                 wide_kernel + " " + format_fixed(row * 1e9, 2) + " ns per row + " + format_fixed(gbs, 1) +
                     " GB/s (fitted from " + std::to_string(wide->rows) + "- and " + std::to_string(narrow->rows) +
                     "-wide experts of " + std::to_string(wide->cols) + measured};
}

DecodeGemv expert_gemv(const DeviceProfile& profile, WeightFormat experts, const Team& team) {
  return {decode_kernel_rate(profile, expert_decode_kernels(experts), team), expert_gemv_row_cost(profile, experts, team)};
}

namespace {

// One tuned expert GEMM point's rate in multiply-adds per second, and the
// tokens each expert multiplied per call: the probe routes its prefill call
// (expert_q4_prefill, `batch` tokens) top-8 over 64 experts, its wide call
// (..._wide) every token to the same 8 (probe/measure/kernel_timing.cpp).
struct GemmPoint {
  double macs_per_s = 0, tokens_per_expert = 0;  // multiply-adds of the rows routed, padded ones left out (amx)
  const KernelThroughputPoint* point = nullptr;
};
std::optional<GemmPoint> gemm_point(const DeviceProfile& profile, const std::string& kernel, const Team& team,
                                    bool wide) {
  const KernelThroughputPoint* best = nearest_team(profile.measurements.kernel_tuning->points, team,
                                                   [&](const KernelThroughputPoint& p) {
                                                     return p.kernel == kernel && p.batch >= 1 && p.tokens_per_s.median > 0;
                                                   });
  if (!best) return std::nullopt;
  const double macs_per_call = static_cast<double>(best->matrices) * best->rows * best->cols;
  // The wide point gives each of its experts all `batch` tokens; the other
  // routes them top-8 over 64 (kernel_timing.cpp). On amx both computed
  // their rows padded to whole tiles: the rate of the multiply-adds done.
  const double batch = static_cast<double>(best->batch);
  const double padding = !tuned_on_amx(profile) ? 1.0 : amx_tile_padding(batch, wide ? 1.0 : 8.0 / 64.0);
  return GemmPoint{macs_per_call * best->tokens_per_s.median / batch * padding, wide ? batch : batch * 8.0 / 64.0, best};
}

}  // namespace

double amx_tile_padding(double tokens, double share) {
  using kernels::cpu::kAmxMinTokens, kernels::cpu::kAmxTileTokens;
  const auto padded = [](int rows) {  // what an expert of `rows` rows computes
    return rows < kAmxMinTokens ? rows : std::ceil(rows / static_cast<double>(kAmxTileTokens)) * kAmxTileTokens;
  };
  const int n = static_cast<int>(std::lround(std::max(0.0, tokens)));
  const double p = std::clamp(share, 0.0, 1.0);
  if (n == 0 || p <= 0) return 1.0;
  if (p >= 1) return padded(n) / n;
  // Binomial probabilities in log space (n reaches thousands of tokens).
  double rows = 0;
  for (int k = 1; k <= n; ++k) {
    const double log_pmf = std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) + k * std::log(p) +
                           (n - k) * std::log1p(-p);
    rows += std::exp(log_pmf) * padded(k);
  }
  return rows / (n * p);
}

bool tuned_on_amx(const DeviceProfile& profile) {
  return profile.measurements.kernel_tuning && profile.measurements.kernel_tuning->cpu_kernel == "amx";
}

namespace {

// Seconds per row of a prefill point and the multiply-adds of that row: an
// expert point's rows are its routed (token, expert) pairs (3 matrices
// each), a dense point's its (token, output row) products.
struct PerRow {
  double seconds = 0, macs = 0;
};
// Seconds of one call of a timed point.
double call_seconds(const KernelThroughputPoint& p) { return p.batch / p.tokens_per_s.median; }

PerRow per_row(const KernelThroughputPoint& p, bool expert) {
  const double call_s = call_seconds(p);
  if (expert) return {call_s / (p.matrices / 3.0), 3.0 * p.rows * p.cols};
  return {call_s / (static_cast<double>(p.batch) * p.matrices * p.rows), static_cast<double>(p.cols)};
}

const KernelThroughputPoint* prefill_point(const DeviceProfile& profile, const std::string& kernel, const Team& team) {
  return nearest_team(profile.measurements.kernel_tuning->points, team, [&](const KernelThroughputPoint& p) {
    return p.kernel == kernel && p.batch >= 1 && p.rows > 0 && p.cols > 0 && p.matrices > 0 && p.tokens_per_s.median > 0;
  });
}

// A routed row's cost beside its multiply-adds: the line through the int4
// wide and narrow expert points (equal tokens per expert, 2048- and 64-wide
// experts) in seconds per row against multiply-adds per row (the same
// gathering, quantising and summing serve int8 experts). nullopt without
// both points or where they do not fit.
std::optional<LinearCost> expert_row_cost(const DeviceProfile& profile, const Team& team) {
  const KernelThroughputPoint* wide = prefill_point(profile, "expert_q4_prefill_wide", team);
  const KernelThroughputPoint* narrow = prefill_point(profile, "expert_q4_prefill_narrow", team);
  if (!wide || !narrow || narrow->batch != wide->batch || narrow->cols >= wide->cols) return std::nullopt;
  const PerRow w = per_row(*wide, true), n = per_row(*narrow, true);
  return line_through(w.macs, w.seconds, n.macs, n.seconds);
}

}  // namespace

std::optional<ExpertDispatchCost> expert_dispatch_cost(const DeviceProfile& profile, const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  const KernelThroughputPoint* narrow = prefill_point(profile, "expert_q4_prefill_narrow", team);
  const KernelThroughputPoint* single = prefill_point(profile, "expert_q4_prefill_single", team);
  if (!narrow || !single || narrow->threads != single->threads || narrow->rows != single->rows ||
      narrow->cols != single->cols)
    return std::nullopt;
  // Routed rows (matrices / 3) and experts (every token of these calls is routed to all of them).
  auto rows = [](const KernelThroughputPoint& p) { return p.matrices / 3.0; };
  auto experts = [&](const KernelThroughputPoint& p) { return rows(p) / p.batch; };
  if (experts(*narrow) != experts(*single) || rows(*narrow) <= rows(*single)) return std::nullopt;
  // Each call less its batch's fork/joins, which the prefill's expert-batch
  // steps price: the narrow call's chunk of gather, gate/up, SwiGLU, down and
  // scatter (1 region, 4 barriers and the weighted sums' one), the single
  // token's decode path (1 region, 3 barriers).
  const double narrow_s = net_call(profile, team, *narrow, {1, 5}).streaming_s;
  const double single_s = net_call(profile, team, *single, kDecodeExpertBatch).streaming_s;
  const double per_row = (narrow_s - single_s) / (rows(*narrow) - rows(*single));
  const double per_expert = (single_s - rows(*single) * per_row) / experts(*single);
  if (!(per_row > 0) || !(per_expert > 0)) return std::nullopt;
  return ExpertDispatchCost{per_expert, static_cast<double>(narrow->batch),
                            format_fixed(per_expert * 1e6, 2) + " us per distinct expert of a batch (expert_q4_prefill_single, " +
                                format_fixed(experts(*single), 0) + " experts of one token, against _narrow's " +
                                std::to_string(narrow->batch) + " tokens each; measured at " +
                                std::to_string(single->threads) + " threads, each call less its fork/joins)"};
}

InPassFactor narrow_batch_in_pass(const DeviceProfile& profile, const Team& team, double gap_s) {
  if (!profile.measurements.kernel_tuning) return {};
  const std::string kernel = "expert_q4_prefill_narrow";
  const KernelThroughputPoint* back_to_back = prefill_point(profile, kernel, team);
  if (!back_to_back) return {};
  std::vector<std::pair<double, double>> curve{{0.0, call_seconds(*back_to_back)}};  // (gap, a call's seconds)
  std::string figures;
  for (const int ms : kIdleGapsMs) {
    const KernelThroughputPoint* idle = prefill_point(profile, idle_point_name(kernel, ms), team);
    if (!idle || idle->threads != back_to_back->threads) return {};
    curve.emplace_back(ms * 1e-3, call_seconds(*idle));
    figures += ", after " + std::to_string(ms) + " ms " + format_fixed(curve.back().second * 1e6, 0);
  }
  double at = curve.back().second;
  for (std::size_t i = 1; i < curve.size(); ++i) {
    if (gap_s > curve[i].first) continue;
    const auto [g0, s0] = curve[i - 1];
    const auto [g1, s1] = curve[i];
    at = s0 + (s1 - s0) * (std::max(gap_s, 0.0) - g0) / (g1 - g0);
    break;
  }
  const double factor = std::max(1.0, at / curve.front().second);
  return {factor, "x " + format_fixed(factor, 2) + " in the pass: its buffers idle " + format_fixed(gap_s * 1e3, 2) +
                      " ms between two layers' batches (" + kernel + " back to back " +
                      format_fixed(curve.front().second * 1e6, 0) + " us a call" + figures + ", measured at " +
                      std::to_string(back_to_back->threads) + " threads)"};
}

// The engine's expert GEMM as the probe's tuning phase timed it, at the
// team size nearest the plan's: a GEMM's rate grows with the tokens each
// expert multiplies, so at `tokens_per_expert` it is interpolated (in log
// tokens) between the prefill call's point and the wide one, held at the
// nearer one outside them; a profile from before the wide point has one.
// With the narrow expert point, a routed row's fixed cost is split off
// (expert_row_cost) and the rate scaled to what is left.
std::optional<ComputeRate> prefill_compute_rate(const DeviceProfile& profile, WeightFormat experts, const Team& team,
                                                double tokens_per_expert, bool row_cost) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  const std::string kernel = experts == WeightFormat::q4_g64 ? "expert_q4_prefill" : "expert_q8_prefill";
  const auto narrow = gemm_point(profile, kernel, team, false);
  const auto wide = gemm_point(profile, kernel + "_wide", team, true);
  if (!narrow && !wide) return std::nullopt;
  double rate = 0;
  std::string how;
  if (!narrow || !wide || wide->tokens_per_expert <= narrow->tokens_per_expert) {
    const GemmPoint& one = narrow ? *narrow : *wide;
    rate = one.macs_per_s, how = one.point->kernel + ", " + std::to_string(one.point->batch) + " tokens per call";
  } else {
    const double at = std::clamp(tokens_per_expert, narrow->tokens_per_expert, wide->tokens_per_expert);
    const double share = std::log(at / narrow->tokens_per_expert) / std::log(wide->tokens_per_expert / narrow->tokens_per_expert);
    rate = std::exp(std::log(narrow->macs_per_s) + share * (std::log(wide->macs_per_s) - std::log(narrow->macs_per_s)));
    how = kernel + " at " + format_fixed(tokens_per_expert, 1) + " tokens per expert, between " +
          format_fixed(narrow->macs_per_s / 1e9, 1) + " at " + format_fixed(narrow->tokens_per_expert, 0) + " and " +
          format_fixed(wide->macs_per_s / 1e9, 1) + " at " + format_fixed(wide->tokens_per_expert, 0);
  }
  // The wide point of this format paid the row cost too: the rate without
  // it. A routed row's own cost leaves out its share of its expert's
  // dispatch, which expert_dispatch_cost prices per distinct expert.
  double row_s = 0;
  std::optional<ExpertDispatchCost> split;
  if (row_cost && wide) {
    const double wide_row_s = per_row(*wide->point, true).seconds;
    if (const auto rows = expert_row_cost(profile, team); rows && wide_row_s > rows->fixed) {
      row_s = rows->fixed;
      rate *= wide_row_s / (wide_row_s - row_s);
      if ((split = expert_dispatch_cost(profile, team))) row_s = std::max(0.0, row_s - split->seconds / split->fitted_tokens);
    }
  }
  return ComputeRate{rate,
                     format_fixed(rate / 1e9, 1) + " GMAC/s (" + how + ", measured at " +
                         std::to_string((narrow ? narrow : wide)->point->threads) + " threads)" +
                         (row_s > 0 ? " + " + format_fixed(row_s * 1e9, 1) +
                                          " ns per routed row (fitted from 2048- and 64-wide experts, expert_q4_prefill_wide and _narrow" +
                                          (split ? std::string(", less its share of its expert's dispatch)") : std::string(")"))
                                    : std::string()),
                     row_s, split ? split->seconds : 0.0, split ? split->text : std::string()};
}

// The engine's prefill attention as the tuning phase timed it
// (attention_prefill: a prompt of `batch` positions over an f16 KV cache in
// the pass's slices, `rows` heads x `cols` head_dim): per unit of
// prompt_attention_units a fixed cost plus 2 x head_dim multiply-adds (a dot
// with K, a weighted sum of V), fitted through the OLMoE-shaped point and
// the narrow one (attention_prefill_narrow: a small model's few narrow
// heads); with one point, no fixed cost.
std::optional<AttentionCost> prefill_attention_cost(const DeviceProfile& profile, const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  auto point = [&](const char* kernel) {
    return nearest_team(profile.measurements.kernel_tuning->points, team, [&](const KernelThroughputPoint& p) {
      return p.kernel == kernel && p.batch >= 1 && p.rows > 0 && p.cols > 0 && p.tokens_per_s.median > 0;
    });
  };
  // Wall seconds per unit at a point's head_dim, its heads and threads.
  auto per_unit = [](const KernelThroughputPoint& p) {
    const double heads = static_cast<double>(p.rows);
    return p.batch / p.tokens_per_s.median / prompt_attention_units(heads, heads, static_cast<int>(p.batch), p.threads);
  };
  const KernelThroughputPoint* wide = point("attention_prefill");
  if (!wide) return std::nullopt;
  const double rate = 2.0 * wide->cols / per_unit(*wide);
  AttentionCost cost{0, rate, format_fixed(rate / 1e9, 1) + " GMAC/s (attention_prefill, " + std::to_string(wide->batch) +
                                  " positions, measured at " + std::to_string(wide->threads) + " threads)"};
  const KernelThroughputPoint* narrow = point("attention_prefill_narrow");
  if (!narrow || narrow->cols >= wide->cols) return cost;
  // Seconds per unit against its multiply-adds (2 x head_dim).
  const auto fit = line_through(2.0 * wide->cols, per_unit(*wide), 2.0 * narrow->cols, per_unit(*narrow));
  if (!fit) return cost;
  return AttentionCost{fit->fixed, 1 / fit->per_unit,
                       format_fixed(fit->fixed * 1e9, 2) + " ns per head and position pair + " + format_fixed(1e-9 / fit->per_unit, 1) +
                           " GMAC/s (attention_prefill fitted at " + std::to_string(wide->rows) + " heads of " +
                           std::to_string(wide->cols) + " and " + std::to_string(narrow->rows) + " of " +
                           std::to_string(narrow->cols) + ", in the pass's slices, measured at " + std::to_string(wide->threads) +
                           " threads)"};
}

double prompt_attention_units(double heads, double kv_heads, int prompt, int threads) {
  const double group = std::max(1.0, heads / std::max(1.0, kv_heads));
  const int per_block = std::max(1, forward::kAttentionRowsPerBlock / static_cast<int>(group));
  double units = 0;
  for (int first = 0; first < prompt; first += kPassSlice) {
    const double n = std::min(kPassSlice, prompt - first), lb = std::min<double>(per_block, n);
    const double pairs = heads * (n * first + n * (n + 1) / 2);  // each query attends its positions up to its own
    const double largest = group * (lb * (first + n) - lb * (lb - 1) / 2);
    units += std::max(pairs, largest * std::max(1, threads));
  }
  return units;
}

double decode_attention_units(double kv_heads, int depth, int threads) {
  const double positions = depth + 1.0, team = std::max(1, threads);
  const double tiles = std::floor(depth / static_cast<double>(forward::kAttentionTile)) + 1;
  const double busiest = std::ceil(kv_heads * tiles / team) * std::min<double>(forward::kAttentionTile, positions);
  return std::max(kv_heads * positions, busiest * team);
}

std::optional<DecodeAttentionCost> decode_attention_cost(const DeviceProfile& profile, const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  auto point = [&](const char* kernel) {
    return nearest_team(profile.measurements.kernel_tuning->points, team, [&](const KernelThroughputPoint& p) {
      return p.kernel == kernel && p.rows > 0 && p.cols > 0 && p.matrices > 0 && p.rows % p.matrices == 0 &&
             p.tokens_per_s.median > 0;
    });
  };
  const KernelThroughputPoint* single = point("attention_decode");
  const KernelThroughputPoint* grouped = point("attention_decode_grouped");
  if (!single || !grouped || grouped->cols != single->cols || grouped->rows / grouped->matrices <= single->rows / single->matrices)
    return std::nullopt;
  // (group, wall seconds per unit) of each point.
  auto unit = [](const KernelThroughputPoint& p) {
    return std::pair{static_cast<double>(p.rows / p.matrices),
                     1 / p.tokens_per_s.median / decode_attention_units(p.matrices, kDecodeAttentionDepth, p.threads)};
  };
  const auto [g1, w1] = unit(*single);
  const auto [g8, w8] = unit(*grouped);
  // A cost per query head, and the rest per (KV head, position); neither below zero.
  const double per_query = std::max(0.0, (w8 - w1) / (g8 - g1));
  const double per_kv = std::max(0.0, w1 - per_query * g1);
  DecodeAttentionCost cost{per_kv, per_query, single->cols, 0, 0,
                           format_fixed(per_kv * 1e9, 2) + " ns per (KV head, position) + " + format_fixed(per_query * 1e9, 2) +
                               " ns per query head of its group (attention_decode and _grouped at depth " +
                               std::to_string(kDecodeAttentionDepth) + ", groups of " + format_fixed(g1, 0) + " and " +
                               format_fixed(g8, 0) + ", head_dim " + std::to_string(single->cols) + ", f16 from RAM, measured at " +
                               std::to_string(single->threads) + " threads"};
  // The grouped point again over narrower heads: how a unit's cost follows
  // head_dim. A narrower unit that cost as much as the wide one or more is
  // the machine's noise, not a price: then in proportion, and said.
  const KernelThroughputPoint* narrow = point("attention_decode_grouped_narrow");
  if (narrow && narrow->cols < single->cols && narrow->rows / narrow->matrices == grouped->rows / grouped->matrices && w8 > 0) {
    const double ratio = unit(*narrow).second / w8;
    cost.text += "; at head_dim " + std::to_string(narrow->cols) + " a unit costs " + format_fixed(ratio, 2) +
                 "x (attention_decode_grouped_narrow), in proportion " +
                 format_fixed(static_cast<double>(narrow->cols) / single->cols, 2) + "x";
    if (ratio < 1) cost.narrow_head_dim = narrow->cols, cost.narrow_ratio = ratio;
    else cost.text += ": not used, other head_dims priced in proportion";
  }
  cost.text += ")";
  return cost;
}

// The engine's float projections over a prompt (dense_bf16_prefill: every
// matrix times `batch` rows of x), multiply-adds per second; with the
// 64-wide point (dense_bf16_prefill_narrow), a cost per (token, output row)
// plus its multiply-adds at a fitted rate.
std::optional<ComputeRate> dense_prefill_rate(const DeviceProfile& profile, const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  const KernelThroughputPoint* wide = prefill_point(profile, "dense_bf16_prefill", team);
  if (!wide) return std::nullopt;
  const double rate = static_cast<double>(wide->matrices) * wide->rows * wide->cols * wide->tokens_per_s.median;
  const std::string measured = std::to_string(wide->batch) + " tokens per call, measured at " + std::to_string(wide->threads) + " threads";
  const KernelThroughputPoint* narrow = prefill_point(profile, "dense_bf16_prefill_narrow", team);
  if (narrow && narrow->cols < wide->cols) {
    const PerRow w = per_row(*wide, false), n = per_row(*narrow, false);
    if (const auto fit = line_through(w.macs, w.seconds, n.macs, n.seconds)) {
      return ComputeRate{1 / fit->per_unit,
                         format_fixed(fit->fixed * 1e9, 2) + " ns per projected row + " + format_fixed(1e-9 / fit->per_unit, 1) +
                             " GMAC/s (dense_bf16_prefill fitted at " + std::to_string(wide->cols) + "- and " +
                             std::to_string(narrow->cols) + "-wide rows, " + measured + ")",
                         fit->fixed};
    }
  }
  return ComputeRate{rate, format_fixed(rate / 1e9, 1) + " GMAC/s (dense_bf16_prefill, " + measured + ")"};
}

std::optional<ComputeRate> quantized_dense_prefill_rate(const DeviceProfile& profile, WeightFormat format, const Team& team) {
  if (!profile.measurements.kernel_tuning || !traits(format).quantized) return std::nullopt;
  const std::string kernel = "dense_" + std::string(format == WeightFormat::q4_g64 ? "q4" : "q8") + "_prefill";
  const KernelThroughputPoint* point = prefill_point(profile, kernel, team);
  if (!point) return std::nullopt;
  const double rate = static_cast<double>(point->matrices) * point->rows * point->cols * point->tokens_per_s.median;
  return ComputeRate{rate, format_fixed(rate / 1e9, 1) + " GMAC/s (" + kernel + ", " + std::to_string(point->batch) +
                               " tokens through " + std::to_string(point->matrices) + " projections, measured at " +
                               std::to_string(point->threads) + " threads)"};
}

std::optional<SamplingCost> sampling_cost(const DeviceProfile& profile, const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  const KernelThroughputPoint* best = nearest_team(profile.measurements.kernel_tuning->points, team, [](const KernelThroughputPoint& p) {
    return p.kernel == "greedy_sample" && p.rows > 0 && p.tokens_per_s.median > 0;
  });
  if (!best) return std::nullopt;
  const double per_entry = 1 / (best->tokens_per_s.median * best->rows);
  // Profiles before the per-team point timed one scan on the first set.
  return SamplingCost{per_entry, "greedy sampling " + format_fixed(per_entry * 1e9, 2) + " ns per vocabulary entry (greedy_sample over " +
                                     std::to_string(best->rows) + " logits the team of " + std::to_string(best->threads) +
                                     " wrote, measured at " + std::to_string(best->threads) + " threads)"};
}

std::optional<RoutingCost> routing_cost(const DeviceProfile& profile, const Team& team, int n_experts, int top_k,
                                        const std::string& kernel) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  auto point = [&](const std::string& name) {
    return nearest_team(profile.measurements.kernel_tuning->points, team, [&](const KernelThroughputPoint& p) {
      return p.kernel == name && p.rows > 0 && p.cols > 0 && p.tokens_per_s.median > 0;
    });
  };
  const KernelThroughputPoint* wide = point(kernel);
  const KernelThroughputPoint* narrow = point(kernel + "_narrow");
  if (!wide && !narrow) return std::nullopt;
  const double x = static_cast<double>(n_experts) * top_k;
  auto size = [](const KernelThroughputPoint* p) { return static_cast<double>(p->rows) * p->cols; };
  auto time = [](const KernelThroughputPoint* p) { return 1.0 / p->tokens_per_s.median; };
  if (const auto fit = wide && narrow && size(wide) > size(narrow)
                           ? line_through(size(wide), time(wide), size(narrow), time(narrow))
                           : std::nullopt) {
    return RoutingCost{fit->fixed + fit->per_unit * x, format_fixed(fit->fixed * 1e9, 0) + " ns + " +
                                                           format_fixed(fit->per_unit * 1e9, 2) +
                                                           " ns per expert x top_k (" + kernel + " fitted at 64 x 8 and 8 x 2)"};
  }
  const KernelThroughputPoint* one = wide && (!narrow || std::abs(std::log(x / size(wide))) <= std::abs(std::log(x / size(narrow))))
                                         ? wide : narrow;
  return RoutingCost{time(one), format_fixed(time(one) * 1e9, 0) + " ns (" + one->kernel + " at " + std::to_string(one->rows) +
                                    " x " + std::to_string(one->cols) + ")"};
}

namespace {
// (rows, value) points of the kernel a record of `rows` rows runs (all of
// them where that kernel has none): linear between them, held before the
// first; past the last, `past` says.
template <class Past>
double along_own_kernel(const std::vector<std::pair<double, double>>& timed, int switch_rows, double rows, Past past) {
  const bool below_switch = switch_rows > 0 && rows < switch_rows;
  std::vector<std::pair<double, double>> own;
  for (const auto& point : timed)
    if (switch_rows == 0 || (point.first < switch_rows) == below_switch) own.push_back(point);
  if (own.empty()) own = timed;  // the profile timed no row count of that kernel: the nearest it has
  if (own.empty()) return 0.0;
  if (rows <= own.front().first) return own.front().second;
  for (std::size_t i = 1; i < own.size(); ++i) {
    const auto [r0, v0] = own[i - 1];
    const auto [r1, v1] = own[i];
    if (rows <= r1) return v0 + (v1 - v0) * (rows - r0) / (r1 - r0);
  }
  return past(own.back(), below_switch);
}
}  // namespace

double StreamCost::seconds_per_byte(double rows, bool warm) const {
  // Below the switch past its last point (3 rows from amx's vnni points at 1
  // and 2): the GEMM is bound by its rows there (the 2-core VM's vnni ran 4
  // rows at 2.0x its 2-row seconds per byte), so the cost grows with them.
  const double fresh = along_own_kernel(points, kernel_switch_rows, rows, [&](std::pair<double, double> last, bool below) {
    return below ? last.second * rows / last.first : last.second;
  });
  if (!warm || warm_ratios.empty()) return fresh;
  return fresh * along_own_kernel(warm_ratios, kernel_switch_rows, rows, [](std::pair<double, double> last, bool) { return last.second; });
}

namespace {
// The probe's stream points by the rows each of their experts carries:
// the name's suffix (kernel_timing.cpp's stream_spec) and the rows.
constexpr std::pair<const char*, int> kStreamPointRows[] = {{"1", 1}, {"", 2}, {"4", 4}};

// The warm stream points beside cost's fresh ones (`kernel`_warm1, _warm,
// _warm4): the GB/s of records re-read after kStreamPointExperts - 1
// others, kept as a ratio to the fresh point's seconds per byte at the same
// rows (a row count whose warm point is missing takes its neighbour's
// ratio). A re-read slower than the fresh point (noise) is taken as fresh.
void add_warm_points(const DeviceProfile& profile, const std::string& kernel, WeightFormat format, const Team& team,
                     StreamCost& cost) {
  std::string rates;
  for (const auto& [suffix, row_count] : kStreamPointRows) {
    const KernelThroughputPoint* point = prefill_point(profile, kernel + "_warm" + suffix, team);
    const double rows = row_count;  // a structured binding a lambda may capture (C++20 compilers before clang 16 refuse one)
    const auto fresh = std::find_if(cost.points.begin(), cost.points.end(), [rows](const auto& p) { return p.first == rows; });
    if (!point || !(point->gb_per_s.median > 0) || fresh == cost.points.end()) continue;
    const double ratio = std::min(1.0, 1.0 / (point->gb_per_s.median * 1e9) / fresh->second);
    cost.warm_ratios.emplace_back(row_count, ratio);
    rates += (rates.empty() ? "" : " / ") + format_fixed(1e-9 / (ratio * fresh->second), 1);
    const std::uint64_t record = 3 * traits(format).matrix_bytes(static_cast<std::uint64_t>(point->rows),
                                                                 static_cast<std::uint64_t>(point->cols));
    cost.warm_distance_bytes = (kStreamPointExperts - 1) * static_cast<double>(record);
  }
  if (cost.warm_ratios.empty()) return;
  cost.text += "; a record its layer read within the last " + format_bytes(static_cast<std::uint64_t>(cost.warm_distance_bytes)) +
               " of records: " + rates + " GB/s (" + kernel + "_warm1, _warm, _warm4)";
}
}  // namespace

std::optional<StreamCost> prefill_stream_cost(const DeviceProfile& profile, WeightFormat experts, const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  const std::string kernel = experts == WeightFormat::q4_g64 ? "expert_q4_prefill_stream" : "expert_q8_prefill_stream";
  StreamCost cost;
  std::string rates, rows, names;
  int threads = 0;
  for (const auto& [suffix, row_count] : kStreamPointRows) {
    const KernelThroughputPoint* point = prefill_point(profile, kernel + suffix, team);
    if (!point || !(point->gb_per_s.median > 0)) continue;
    cost.points.emplace_back(row_count, 1.0 / (point->gb_per_s.median * 1e9));
    const std::string sep = rates.empty() ? "" : " / ";
    rates += sep + format_fixed(point->gb_per_s.median, 1);
    rows += sep + std::to_string(row_count);
    names += (names.empty() ? kernel : ", _stream") + std::string(suffix);
    threads = point->threads;
  }
  if (cost.points.empty()) return std::nullopt;
  cost.text = rates + " GB/s at " + rows + (cost.points.size() == 1 && cost.points[0].first == 1 ? " row" : " rows") +
              " on each expert (" + names + ", measured at " + std::to_string(threads) + " threads)";
  add_warm_points(profile, kernel, experts, team, cost);
  if (tuned_on_amx(profile)) {
    cost.kernel_switch_rows = kernels::cpu::kAmxMinTokens;
    cost.text += "; amx from " + std::to_string(cost.kernel_switch_rows) + " rows, fewer on avx512vnni's GEMM: each priced by its own kernel's points";
  }
  return cost;
}

namespace {
// Elements of one token's ops at a layer: two norms and two residual adds
// over the hidden state, RoPE over q and k, K and V stored, and q/k norms
// where the model has them.
double token_elements(double hidden, double heads, double kv_heads, double head_dim, bool qk_norm) {
  return 4 * hidden + (heads + kv_heads) * head_dim * (qk_norm ? 2 : 1) + 2 * kv_heads * head_dim;
}
}  // namespace

double token_ops_elements(const model::ModelConfig& c) {
  return token_elements(static_cast<double>(c.hidden_size), static_cast<double>(c.num_attention_heads),
                        static_cast<double>(c.num_key_value_heads), static_cast<double>(c.head_dim),
                        c.qk_norm != model::QkNorm::None);
}

std::optional<TokenOpsCost> token_ops_cost(const DeviceProfile& profile, const Team& team) {
  if (!profile.measurements.kernel_tuning) return std::nullopt;
  auto point = [&](const char* kernel) {
    return nearest_team(profile.measurements.kernel_tuning->points, team, [&](const KernelThroughputPoint& p) {
      return p.kernel == kernel && p.rows > 0 && p.cols > 0 && p.matrices > 0 && p.tokens_per_s.median > 0;
    });
  };
  // The probe's shapes: `matrices` heads of `cols` for q and KV alike, no q/k norms.
  auto size = [](const KernelThroughputPoint* p) {
    return token_elements(p->rows, p->matrices, p->matrices, p->cols, false);
  };
  auto time = [](const KernelThroughputPoint* p) { return 1.0 / p->tokens_per_s.median; };
  const KernelThroughputPoint* wide = point("token_ops_prefill");
  const KernelThroughputPoint* narrow = point("token_ops_prefill_narrow");
  if (!wide && !narrow) return std::nullopt;
  if (const auto fit = wide && narrow && size(wide) > size(narrow)
                           ? line_through(size(wide), time(wide), size(narrow), time(narrow))
                           : std::nullopt) {
    return TokenOpsCost{fit->fixed, fit->per_unit,
                        format_fixed(fit->fixed * 1e9, 0) + " ns + " + format_fixed(fit->per_unit * 1e9, 3) +
                            " ns per element (token_ops_prefill fitted at hidden " + std::to_string(wide->rows) + " and " +
                            std::to_string(narrow->rows) + ", one thread)"};
  }
  const KernelThroughputPoint* one = wide ? wide : narrow;
  return TokenOpsCost{0, time(one) / size(one),
                      format_fixed(time(one) / size(one) * 1e9, 3) + " ns per element (" + one->kernel + " at hidden " +
                          std::to_string(one->rows) + ", one thread)"};
}

}  // namespace coli::planner::measured
