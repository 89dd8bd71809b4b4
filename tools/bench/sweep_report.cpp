#include "sweep_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "coli/base/text.h"

namespace coli::bench {
namespace {

std::string csv_quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string ranking_line(const SweepReport& r, Metric metric) {
  const Ranking rank = rank_planned(r.summaries, r.planned, metric);
  std::string out = "planned: rank " + std::to_string(rank.rank) + " of " + std::to_string(rank.of) + ", " +
                    format_fixed(rank.percent_of_best, 1) + "% of the best (" +
                    config_label(r.grid[rank.best], r.n_experts) + ")";
  const PairedStanding paired = paired_standing(r.runs, r.grid.size(), r.planned, metric);
  if (paired.available && paired.repeats > 1) {
    out += "; repeat by repeat " + format_fixed(paired.percent, 1) + "% of its closest rival (" +
           config_label(r.grid[paired.rival], r.n_experts) + "), as fast or faster in " + std::to_string(paired.ahead) +
           " of " + std::to_string(paired.repeats) + " repeats";
  }
  const RepeatNoise noise = repeat_noise(r.summaries, metric);
  if (noise.configs > 0) {
    out += "; runs of one configuration moved " + format_fixed(100 * noise.median_spread, 0) +
           "% between repeats (median), up to " + format_fixed(100 * noise.widest_spread, 0) + "% (" +
           config_label(r.grid[noise.widest], r.n_experts) + ")";
  }
  return out;
}

// A configuration's band for one metric: its slowest and fastest ends.
std::pair<double, double> band_of(const ConfigPrediction& p, Metric metric) {
  return metric == Metric::decode ? std::pair{p.band.decode_slowest, p.band.decode_fastest}
                                  : std::pair{p.band.prefill_slowest, p.band.prefill_fastest};
}

std::string prediction_line(const SweepReport& r, const std::vector<ConfigPrediction>& predictions, Metric metric) {
  const PredictionQuality q = prediction_quality(r.summaries, predictions, metric);
  if (q.points == 0) return "predicted: none (the profile lacks a measurement the prediction needs)";
  std::string out = "predicted vs measured over " + std::to_string(q.points) + " configurations: worst error " +
                    format_fixed(100 * q.worst_error, 1) + "% (" + config_label(r.grid[q.worst], r.n_experts) +
                    "), mean |error| " + format_fixed(100 * q.mean_abs_error, 1) + "%, rank correlation " +
                    (q.rank_correlation ? format_fixed(*q.rank_correlation, 2) : std::string("- (fewer than 2 distinct values)"));
  const BandStanding band = band_standing(r.summaries, predictions, metric);
  if (band.points > 0) {
    out += "; inside the probe's band (its slowest to fastest rounds) " + std::to_string(band.inside) + " of " +
           std::to_string(band.points);
    for (std::size_t i : band.outside) {
      const auto [slowest, fastest] = band_of(predictions[i], metric);
      out += (i == band.outside.front() ? ", outside: " : ", ") + config_label(r.grid[i], r.n_experts) + " " +
             format_fixed(metric_median(r.summaries[i], metric), 1) + " against " + format_fixed(slowest, 1) + "-" +
             format_fixed(fastest, 1);
    }
  }
  return out;
}

// "decode at d0: worst error +13.1% (label), mean |error| 7.0% over N
// configurations", a line per depth, where the sweep has several.
std::string depth_prediction_lines(const SweepReport& r) {
  if (r.depths.size() < 2) return {};
  std::string out;
  for (std::size_t d = 0; d < r.depths.size(); ++d) {
    const PredictionQuality q = depth_prediction_quality(r.summaries, r.predictions, d);
    if (q.points == 0) continue;
    out += "decode at d" + std::to_string(r.depths[d]) + ": worst error " + format_fixed(100 * q.worst_error, 1) + "% (" +
           config_label(r.grid[q.worst], r.n_experts) + "), mean |error| " + format_fixed(100 * q.mean_abs_error, 1) +
           "% over " + std::to_string(q.points) + " configurations\n";
  }
  return out;
}

const ConfigPrediction* prediction_of(const SweepReport& r, std::size_t config) {
  return config < r.predictions.size() && r.predictions[config].available ? &r.predictions[config] : nullptr;
}

nlohmann::ordered_json stats_json(const MetricStats& s) {
  return {{"median_tok_s", s.median}, {"min_tok_s", s.min}, {"max_tok_s", s.max}, {"spread", s.spread}};
}

nlohmann::ordered_json read_batches_json(const std::vector<ReadBatch>& batches) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ReadBatch& b : batches) out.push_back({{"reads", b.reads}, {"rounds", b.rounds}, {"seconds", b.seconds}});
  return out;
}

nlohmann::ordered_json wakes_json(const ReadWakes& wakes) {
  return {{"rounds", wakes.rounds}, {"seconds", wakes.seconds}};
}

nlohmann::ordered_json ranking_json(const SweepReport& r, Metric metric) {
  const Ranking rank = rank_planned(r.summaries, r.planned, metric);
  nlohmann::ordered_json j = {{"rank", rank.rank}, {"of", rank.of}, {"percent_of_best", rank.percent_of_best},
                              {"best_config", rank.best}, {"best_label", config_label(r.grid[rank.best], r.n_experts)}};
  if (const PairedStanding p = paired_standing(r.runs, r.grid.size(), r.planned, metric); p.available) {
    j["paired"] = {{"percent_of_rival", p.percent}, {"rival_config", p.rival},
                   {"rival_label", config_label(r.grid[p.rival], r.n_experts)}, {"repeats", p.repeats},
                   {"as_fast_or_faster", p.ahead}};
  }
  if (const RepeatNoise n = repeat_noise(r.summaries, metric); n.configs > 0) {
    j["repeat_noise"] = {{"configs", n.configs}, {"median_spread", n.median_spread}, {"widest_spread", n.widest_spread},
                         {"widest_config", n.widest}, {"widest_label", config_label(r.grid[n.widest], r.n_experts)}};
  }
  return j;
}

}  // namespace

std::vector<ConfigSummary> summarize(std::size_t configs, const std::vector<RunRecord>& runs) {
  std::vector<ConfigSummary> out(configs);
  for (std::size_t c = 0; c < configs; ++c) {
    std::vector<double> prefill, decode;
    std::vector<std::vector<double>> depths;
    double hits = 0, lookups = 0;
    for (const RunRecord& run : runs) {
      if (run.config != c) continue;
      prefill.push_back(run.prefill_tok_s());
      decode.push_back(run.decode_tok_s());
      depths.resize(std::max(depths.size(), run.depth_tok_s.size()));
      for (std::size_t d = 0; d < run.depth_tok_s.size(); ++d) depths[d].push_back(run.depth_tok_s[d]);
      hits += static_cast<double>(run.expert_hits);
      lookups += static_cast<double>(run.expert_hits + run.expert_misses);
    }
    out[c].repeats = static_cast<int>(decode.size());
    out[c].prefill = metric_stats(prefill);
    out[c].decode = metric_stats(decode);
    for (auto& speeds : depths) out[c].decode_at_depth.push_back(metric_stats(std::move(speeds)));
    out[c].hit_rate = lookups > 0 ? hits / lookups : 0;
  }
  return out;
}

const char* metric_name(Metric metric) { return metric == Metric::decode ? "decode" : "prefill"; }

namespace {

const MetricStats& stats_of(const ConfigSummary& summary, Metric metric) {
  return metric == Metric::decode ? summary.decode : summary.prefill;
}

}  // namespace

double metric_median(const ConfigSummary& summary, Metric metric) { return stats_of(summary, metric).median; }

std::vector<std::size_t> order_by(const std::vector<ConfigSummary>& summaries, Metric metric) {
  std::vector<std::size_t> order(summaries.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return metric_median(summaries[a], metric) > metric_median(summaries[b], metric);
  });
  return order;
}

Ranking rank_planned(const std::vector<ConfigSummary>& summaries, std::size_t planned, Metric metric) {
  Ranking r;
  if (summaries.empty() || planned >= summaries.size()) return r;
  r.of = static_cast<int>(summaries.size());
  r.best = order_by(summaries, metric).front();
  const double mine = metric_median(summaries[planned], metric);
  r.rank = 1 + static_cast<int>(std::count_if(summaries.begin(), summaries.end(), [&](const ConfigSummary& s) {
             return metric_median(s, metric) > mine;
           }));
  const double best = metric_median(summaries[r.best], metric);
  // Ratio first: 100 * x / x can round above 100 (about 7% of values), mine / best cannot.
  r.percent_of_best = best > 0 ? 100.0 * (mine / best) : 0;
  return r;
}

namespace {

double metric_of(const RunRecord& run, Metric metric) {
  return metric == Metric::decode ? run.decode_tok_s() : run.prefill_tok_s();
}

// One configuration's tok/s per repeat (0 where it did not run or measured nothing).
std::vector<double> per_repeat(const std::vector<RunRecord>& runs, std::size_t config, Metric metric) {
  std::vector<double> out;
  for (const RunRecord& run : runs) {
    if (run.config != config || run.repeat < 0) continue;
    if (out.size() <= static_cast<std::size_t>(run.repeat)) out.resize(static_cast<std::size_t>(run.repeat) + 1, 0.0);
    out[static_cast<std::size_t>(run.repeat)] = metric_of(run, metric);
  }
  return out;
}

}  // namespace

PairedStanding paired_standing(const std::vector<RunRecord>& runs, std::size_t configs, std::size_t planned,
                               Metric metric) {
  PairedStanding out;
  const std::vector<double> mine = per_repeat(runs, planned, metric);
  for (std::size_t c = 0; c < configs; ++c) {
    if (c == planned) continue;
    const std::vector<double> theirs = per_repeat(runs, c, metric);
    std::vector<double> ratios;
    int ahead = 0;
    for (std::size_t rep = 0; rep < std::min(mine.size(), theirs.size()); ++rep) {
      if (mine[rep] <= 0 || theirs[rep] <= 0) continue;
      ratios.push_back(mine[rep] / theirs[rep]);
      ahead += mine[rep] >= theirs[rep] ? 1 : 0;
    }
    if (ratios.empty()) continue;
    const int repeats = static_cast<int>(ratios.size());
    const double percent = 100 * metric_stats(std::move(ratios)).median;
    if (out.available && percent >= out.percent) continue;
    out = {.available = true, .rival = c, .percent = percent, .repeats = repeats, .ahead = ahead};
  }
  return out;
}

RepeatNoise repeat_noise(const std::vector<ConfigSummary>& summaries, Metric metric) {
  RepeatNoise out;
  std::vector<double> spreads;
  for (std::size_t c = 0; c < summaries.size(); ++c) {
    if (summaries[c].repeats < 2) continue;
    const double spread = stats_of(summaries[c], metric).spread;
    spreads.push_back(spread);
    if (spreads.size() == 1 || spread > out.widest_spread) out.widest_spread = spread, out.widest = c;
  }
  out.configs = static_cast<int>(spreads.size());
  out.median_spread = metric_stats(std::move(spreads)).median;
  return out;
}

std::optional<std::string> token_mismatch(const std::vector<std::vector<std::int32_t>>& tokens, const std::string& label,
                                          const std::vector<std::vector<std::int32_t>>& reference,
                                          const std::string& reference_label) {
  const std::string both = "'" + label + "' and '" + reference_label + "' differ";
  if (tokens.size() != reference.size()) {
    return both + " in decode tests run: " + std::to_string(tokens.size()) + " vs " + std::to_string(reference.size());
  }
  for (std::size_t p = 0; p < reference.size(); ++p) {
    const auto& a = tokens[p];
    const auto& b = reference[p];
    std::size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    if (i == a.size() && i == b.size()) continue;
    const auto at = [i](const std::vector<std::int32_t>& t) { return i < t.size() ? std::to_string(t[i]) : "(end)"; };
    return both + " on decode test " + std::to_string(p) + " at generated token " + std::to_string(i) + ": " + at(a) +
           " vs " + at(b);
  }
  return std::nullopt;
}

std::optional<double> spearman_rank_correlation(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return std::nullopt;
  auto ranks_of = [](const std::vector<double>& values) {
    std::vector<std::size_t> order(values.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return values[x] < values[y]; });
    std::vector<double> ranks(values.size());
    for (std::size_t first = 0; first < order.size();) {
      std::size_t last = first;  // ties share the mean of ranks first + 1 .. last + 1
      while (last + 1 < order.size() && values[order[last + 1]] == values[order[first]]) ++last;
      for (std::size_t k = first; k <= last; ++k) ranks[order[k]] = (static_cast<double>(first + last) + 2) / 2;
      first = last + 1;
    }
    return ranks;
  };
  const std::vector<double> ra = ranks_of(a), rb = ranks_of(b);
  const double n = static_cast<double>(a.size());
  const double mean_a = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mean_b = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double covariance = 0, var_a = 0, var_b = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    covariance += (ra[i] - mean_a) * (rb[i] - mean_b);
    var_a += (ra[i] - mean_a) * (ra[i] - mean_a);
    var_b += (rb[i] - mean_b) * (rb[i] - mean_b);
  }
  if (var_a <= 0 || var_b <= 0) return std::nullopt;
  return covariance / std::sqrt(var_a * var_b);
}

std::vector<ConfigPrediction> retimed_predictions(const SweepReport& report) {
  if (report.retimed.empty()) return {};
  std::vector<ConfigPrediction> out(report.grid.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<double> decode, prefill;
    for (const RetimedRepeat& rep : report.retimed) {
      if (i >= rep.predictions.size()) continue;
      const ConfigPrediction& p = rep.predictions[i];
      if (!p.available) {
        out[i].unavailable = p.unavailable;
        continue;
      }
      decode.push_back(p.decode_tok_s);
      prefill.push_back(p.prefill_tok_s);
      out[i].decode_disk_reads = p.decode_disk_reads;
      out[i].prefill_disk_reads = p.prefill_disk_reads;
      out[i].prefill_tokens = p.prefill_tokens;
      out[i].disk_read_seconds = p.disk_read_seconds;
    }
    if (decode.empty()) continue;
    out[i].available = true;
    out[i].unavailable.clear();
    out[i].decode_tok_s = metric_stats(std::move(decode)).median;
    out[i].prefill_tok_s = metric_stats(std::move(prefill)).median;
  }
  return out;
}

namespace {

// Predicted against measured over the configurations i < n where
// `figures(i)` gives both (predicted, measured), each > 0.
PredictionQuality quality_over(std::size_t n, const std::function<std::pair<double, double>(std::size_t)>& figures) {
  PredictionQuality q;
  std::vector<double> predicted, measured;
  for (std::size_t i = 0; i < n; ++i) {
    const auto [p, m] = figures(i);
    if (p <= 0 || m <= 0) continue;
    const double error = p / m - 1;
    if (q.points == 0 || std::abs(error) > std::abs(q.worst_error)) q.worst_error = error, q.worst = i;
    q.mean_abs_error += std::abs(error);
    ++q.points;
    predicted.push_back(p);
    measured.push_back(m);
  }
  if (q.points > 0) q.mean_abs_error /= q.points;
  q.rank_correlation = spearman_rank_correlation(predicted, measured);
  return q;
}

}  // namespace

PredictionQuality prediction_quality(const std::vector<ConfigSummary>& summaries,
                                     const std::vector<ConfigPrediction>& predictions, Metric metric) {
  return quality_over(std::min(summaries.size(), predictions.size()), [&](std::size_t i) {
    const ConfigPrediction& p = predictions[i];
    if (!p.available) return std::pair{0.0, 0.0};
    return std::pair{metric == Metric::decode ? p.decode_tok_s : p.prefill_tok_s, metric_median(summaries[i], metric)};
  });
}

PredictionQuality depth_prediction_quality(const std::vector<ConfigSummary>& summaries,
                                           const std::vector<ConfigPrediction>& predictions, std::size_t depth) {
  return quality_over(std::min(summaries.size(), predictions.size()), [&](std::size_t i) {
    const ConfigPrediction& p = predictions[i];
    const auto& measured = summaries[i].decode_at_depth;
    if (!p.available || depth >= p.decode_tok_s_at_depth.size() || depth >= measured.size()) return std::pair{0.0, 0.0};
    return std::pair{p.decode_tok_s_at_depth[depth], measured[depth].median};
  });
}

BandStanding band_standing(const std::vector<ConfigSummary>& summaries, const std::vector<ConfigPrediction>& predictions,
                           Metric metric) {
  BandStanding out;
  for (std::size_t i = 0; i < summaries.size() && i < predictions.size(); ++i) {
    const auto [lo, hi] = band_of(predictions[i], metric);
    const double m = metric_median(summaries[i], metric);
    if (!predictions[i].available || lo <= 0 || !planner::SpeedBand::wide(lo, hi) || m <= 0) continue;  // none, or one round per rate
    ++out.points;
    if (m >= lo && m <= hi) ++out.inside;
    else out.outside.push_back(i);
  }
  return out;
}

std::string sweep_csv(const SweepReport& r) {
  std::string out =
      "config,label,planned,threads,pus,cap,pins,round_tokens,kernel,kernel_used,repeat,prefill_tokens,prefill_s,"
      "prefill_tok_s,decode_tokens,decode_s,decode_tok_s,load_s,expert_hits,expert_misses,expert_bytes_read,"
      "predicted_prefill_tok_s,predicted_decode_tok_s,gpu\n";
  for (const RunRecord& run : r.runs) {
    const SweepConfig& c = r.grid[run.config];
    out += std::to_string(run.config) + "," + csv_quoted(config_label(c, r.n_experts)) + "," +
           (c.planned ? "1" : "0") + "," + std::to_string(c.threads.threads()) + "," +
           csv_quoted(c.threads.pus.to_list()) + "," + std::to_string(c.cap) + "," + std::to_string(c.pins) + "," +
           std::to_string(c.round_tokens) + "," + csv_quoted(c.kernel) + "," + csv_quoted(run.kernel_used) + "," +
           std::to_string(run.repeat) + "," + std::to_string(run.prefill_tokens) + "," + format_fixed(run.prefill_seconds, 6) +
           "," + format_fixed(run.prefill_tok_s(), 3) + "," + std::to_string(run.decode_tokens) + "," +
           format_fixed(run.decode_seconds, 6) + "," + format_fixed(run.decode_tok_s(), 3) + "," + format_fixed(run.load_seconds, 3) + "," +
           std::to_string(run.expert_hits) + "," + std::to_string(run.expert_misses) + "," +
           std::to_string(run.expert_bytes_read) + ",";
    const ConfigPrediction* p = prediction_of(r, run.config);
    out += (p ? format_fixed(p->prefill_tok_s, 3) + "," + format_fixed(p->decode_tok_s, 3) : std::string(",")) + "," +
           csv_quoted(c.gpu.label) + "\n";
  }
  return out;
}

namespace {

nlohmann::ordered_json quality_json(const SweepReport& r, const std::vector<ConfigPrediction>& predictions, Metric metric) {
  const PredictionQuality q = prediction_quality(r.summaries, predictions, metric);
  nlohmann::ordered_json out{{"points", q.points}, {"worst_error", q.worst_error}, {"worst_config", q.worst},
                             {"mean_abs_error", q.mean_abs_error}};
  out["rank_correlation"] = q.rank_correlation ? nlohmann::ordered_json(*q.rank_correlation) : nlohmann::ordered_json();
  return out;
}

nlohmann::ordered_json prediction_quality_json(const SweepReport& r, const std::vector<ConfigPrediction>& predictions) {
  nlohmann::ordered_json at_depth = nlohmann::ordered_json::array();
  for (std::size_t d = 0; d < r.depths.size(); ++d) {
    const PredictionQuality q = depth_prediction_quality(r.summaries, predictions, d);
    if (q.points == 0) continue;
    at_depth.push_back({{"depth", r.depths[d]}, {"points", q.points}, {"worst_error", q.worst_error},
                        {"worst_config", q.worst}, {"mean_abs_error", q.mean_abs_error}});
  }
  return {{"decode", quality_json(r, predictions, Metric::decode)},
          {"prefill", quality_json(r, predictions, Metric::prefill)},
          {"decode_at_depth", std::move(at_depth)}};
}

// --retime: each configuration's re-timed prediction (the repeats' median,
// its error and each repeat's figures) and the repeats' drift.
void add_retimed_json(const SweepReport& r, nlohmann::ordered_json& j) {
  const std::vector<ConfigPrediction> retimed = retimed_predictions(r);
  for (std::size_t i = 0; i < j["configs"].size() && i < retimed.size(); ++i) {
    const ConfigSummary& s = r.summaries[i];
    nlohmann::ordered_json per_repeat = nlohmann::ordered_json::array();
    for (const RetimedRepeat& rep : r.retimed) {
      if (i < rep.predictions.size() && rep.predictions[i].available)
        per_repeat.push_back({{"repeat", rep.repeat}, {"decode_tok_s", rep.predictions[i].decode_tok_s},
                              {"prefill_tok_s", rep.predictions[i].prefill_tok_s}});
    }
    j["configs"][i]["predicted_retimed"] =
        retimed[i].available
            ? nlohmann::ordered_json{{"decode_tok_s", retimed[i].decode_tok_s}, {"prefill_tok_s", retimed[i].prefill_tok_s},
                                     {"decode_error", s.decode.median > 0 ? retimed[i].decode_tok_s / s.decode.median - 1 : 0.0},
                                     {"prefill_error", s.prefill.median > 0 ? retimed[i].prefill_tok_s / s.prefill.median - 1 : 0.0},
                                     {"repeats", std::move(per_repeat)}}
            : nlohmann::ordered_json{{"unavailable", retimed[i].unavailable}};
  }
  nlohmann::ordered_json repeats = nlohmann::ordered_json::array();
  for (const RetimedRepeat& rep : r.retimed)
    repeats.push_back({{"repeat", rep.repeat}, {"seconds", rep.seconds}, {"drift", rep.drift}});
  j["retimed"] = {{"repeats", std::move(repeats)}, {"prediction", prediction_quality_json(r, retimed)}};
}

}  // namespace

std::string sweep_json(const SweepReport& r) {
  nlohmann::ordered_json j;
  j["schema_version"] = kSweepSchemaVersion;
  j["tool"] = "coli-sweep";
  j["model"] = r.model;
  j["profile"] = r.profile;
  j["profile_fingerprint"] = r.profile_fingerprint;
  j["workload"] = {{"prompt_tokens", r.prompt_tokens}, {"decode_tokens", r.decode_tokens},
                   {"depths", r.depths}, {"repeats", r.repeats}, {"repeats_asked", r.repeats_asked},
                   {"min_timed_seconds", r.min_timed_seconds}};
  j["stopped_early"] = r.stopped_early;
  j["machine_changes"] = nlohmann::ordered_json::array();
  for (const auto& change : r.machine_changes)
    j["machine_changes"].push_back({{"repeat", change.repeat + 1}, {"mismatch", change.mismatch}});
  j["plan_decisions"] = r.plan_decisions;
  j["planned_config"] = r.planned;
  j["token_check"] = {{"mode", r.token_check}, {"passed", r.token_mismatches.empty()},
                      {"mismatches", r.token_mismatches}, {"between_kernels", r.token_notes}};
  j["ranking"] = {{"decode", ranking_json(r, Metric::decode)}, {"prefill", ranking_json(r, Metric::prefill)}};
  auto& configs = j["configs"] = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < r.grid.size(); ++i) {
    const SweepConfig& c = r.grid[i];
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (const RunRecord& run : r.runs) {
      if (run.config != i) continue;
      runs.push_back({{"repeat", run.repeat}, {"passes", run.passes}, {"prefill_tokens", run.prefill_tokens},
                      {"prefill_s", run.prefill_seconds}, {"prefill_tok_s", run.prefill_tok_s()},
                      {"decode_tokens", run.decode_tokens}, {"decode_s", run.decode_seconds},
                      {"decode_tok_s", run.decode_tok_s()}, {"decode_tok_s_at_depth", run.depth_tok_s},
                      {"load_s", run.load_seconds},
                      {"expert_hits", run.expert_hits}, {"expert_misses", run.expert_misses},
                      {"expert_misses_at_depth", run.depth_misses},
                      {"expert_bytes_read", run.expert_bytes_read},
                      {"prefill_expert_misses", run.prefill_misses},
                      {"prefill_expert_bytes_read", run.prefill_bytes_read},
                      {"expert_read_seconds", run.read_seconds}, {"prefill_expert_read_seconds", run.prefill_read_seconds},
                      {"decode_read_batches", read_batches_json(run.read_batches)},
                      {"prefill_read_batches", read_batches_json(run.prefill_read_batches)},
                      {"decode_wakes", wakes_json(run.decode_wakes)}, {"prefill_wakes", wakes_json(run.prefill_wakes)},
                      {"kernel_used", run.kernel_used}});
    }
    const ConfigSummary& s = r.summaries[i];
    nlohmann::ordered_json at_depth = nlohmann::ordered_json::array();
    for (std::size_t d = 0; d < s.decode_at_depth.size() && d < r.depths.size(); ++d) {
      nlohmann::ordered_json one = stats_json(s.decode_at_depth[d]);
      one["depth"] = r.depths[d];
      at_depth.push_back(std::move(one));
    }
    configs.push_back({{"id", i}, {"label", config_label(c, r.n_experts)}, {"planned", c.planned},
                       {"thread_set", c.threads.label}, {"threads", c.threads.threads()},
                       {"pus", c.threads.pus.to_list()}, {"cap", c.cap}, {"resident", c.cap >= r.n_experts},
                       {"pins", c.pins}, {"round_tokens", c.round_tokens}, {"kernel", c.kernel},
                       {"gpu", c.gpu.label},
                       {"vram_experts", c.gpu.tier ? c.gpu.tier->vram_experts : std::vector<int>{}},
                       {"decode", stats_json(s.decode)}, {"prefill", stats_json(s.prefill)},
                       {"decode_at_depth", std::move(at_depth)}, {"hit_rate", s.hit_rate}, {"runs", std::move(runs)}});
    const ConfigPrediction* p = prediction_of(r, i);
    configs.back()["predicted"] =
        p ? nlohmann::ordered_json{{"decode_tok_s", p->decode_tok_s}, {"prefill_tok_s", p->prefill_tok_s},
                                   {"decode_disk_reads_per_token", p->decode_disk_reads},
                                   {"decode_tok_s_at_depth", p->decode_tok_s_at_depth},
                                   {"decode_disk_reads_per_token_at_depth", p->decode_disk_reads_at_depth},
                                   {"prefill_disk_reads", p->prefill_disk_reads},
                                   {"prefill_disk_reads_prompt_tokens", p->prefill_tokens},
                                   {"disk_read_seconds", p->disk_read_seconds},
                                   {"decode_band_tok_s", {p->band.decode_slowest, p->band.decode_fastest}},
                                   {"prefill_band_tok_s", {p->band.prefill_slowest, p->band.prefill_fastest}},
                                   {"decode_error", s.decode.median > 0 ? p->decode_tok_s / s.decode.median - 1 : 0.0},
                                   {"prefill_error", s.prefill.median > 0 ? p->prefill_tok_s / s.prefill.median - 1 : 0.0}}
          : nlohmann::ordered_json{{"unavailable", i < r.predictions.size() ? r.predictions[i].unavailable : "not predicted"}};
  }
  j["prediction"] = prediction_quality_json(r, r.predictions);
  if (!r.retimed.empty()) add_retimed_json(r, j);
  return j.dump(2) + "\n";
}

std::string sweep_svg(const SweepReport& r) {
  constexpr int kWidth = 1000, kLabelRight = 360, kBarLeft = 370, kBarMax = 520, kRow = 20, kBar = 14;
  const int rows = static_cast<int>(r.grid.size());
  const int panel = 50 + rows * kRow;
  const int height = 60 + 2 * panel;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kWidth) + "\" height=\"" +
                    std::to_string(height) + "\" font-family=\"monospace\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" +
         xml_escaped("coli-sweep: " + r.model + " (pp" + std::to_string(r.prompt_tokens) + ", tg" +
                     std::to_string(r.decode_tokens) + " at " + std::to_string(r.depths.size()) +
                     " depth(s), median of " + std::to_string(r.repeats) + ")") + "</text>\n";
  svg += "<text x=\"10\" y=\"38\">" + xml_escaped("bars: median tok/s; whiskers: min-max over repeats; red: planned") +
         "</text>\n";
  int top = 60;
  for (Metric metric : {Metric::decode, Metric::prefill}) {
    const auto order = order_by(r.summaries, metric);
    double scale_max = 0;
    for (const ConfigSummary& s : r.summaries)
      scale_max = std::max(scale_max, metric == Metric::decode ? s.decode.max : s.prefill.max);
    if (scale_max <= 0) scale_max = 1;
    svg += "<text x=\"10\" y=\"" + std::to_string(top + 16) + "\" font-size=\"13\" font-weight=\"bold\">" +
           xml_escaped(std::string(metric_name(metric)) + " tok/s - " + ranking_line(r, metric)) + "</text>\n";
    int y = top + 30;
    for (std::size_t i : order) {
      const SweepConfig& c = r.grid[i];
      const MetricStats& s = metric == Metric::decode ? r.summaries[i].decode : r.summaries[i].prefill;
      auto x_of = [&](double v) { return kBarLeft + static_cast<int>(kBarMax * v / scale_max); };
      const std::string fill = c.planned ? "#d62728" : "#4c78a8";
      const std::string label = config_label(c, r.n_experts) + (c.planned ? " (planned)" : "");
      svg += "<text x=\"" + std::to_string(kLabelRight) + "\" y=\"" + std::to_string(y + 11) +
             "\" text-anchor=\"end\"" + (c.planned ? " font-weight=\"bold\" fill=\"#d62728\"" : "") + ">" +
             xml_escaped(label) + "</text>\n";
      svg += "<rect class=\"" + std::string(c.planned ? "planned" : "config") + "\" x=\"" + std::to_string(kBarLeft) +
             "\" y=\"" + std::to_string(y) + "\" width=\"" + std::to_string(x_of(s.median) - kBarLeft) +
             "\" height=\"" + std::to_string(kBar) + "\" fill=\"" + fill + "\"/>\n";
      svg += "<line x1=\"" + std::to_string(x_of(s.min)) + "\" x2=\"" + std::to_string(x_of(s.max)) + "\" y1=\"" +
             std::to_string(y + kBar / 2) + "\" y2=\"" + std::to_string(y + kBar / 2) +
             "\" stroke=\"#333\" stroke-width=\"1\"/>\n";
      svg += "<text x=\"" + std::to_string(x_of(s.max) + 6) + "\" y=\"" + std::to_string(y + 11) + "\">" +
             format_fixed(s.median, 2) + "</text>\n";
      y += kRow;
    }
    top += panel;
  }
  return svg + "</svg>\n";
}

namespace {

// "; a read X ms decoding, Y ms in prefill (probed Z)": the I/O threads'
// mean time per read (the pread alone; a prefill round's reads share the
// disk, so each takes longer) beside the profile's bare read of one
// record, so a speed error can be told apart from the disk running faster
// or slower than when it was probed.
std::string read_time(double decode_s, double decode_reads, double prefill_s, double prefill_reads,
                      const ConfigPrediction* p) {
  auto mean = [](double seconds, double reads) { return format_fixed(seconds / reads * 1e3, 3) + " ms"; };
  std::string out;
  if (decode_reads > 0 && decode_s > 0) out += mean(decode_s, decode_reads) + " decoding";
  if (prefill_reads > 0 && prefill_s > 0) out += (out.empty() ? "" : ", ") + mean(prefill_s, prefill_reads) + " in prefill";
  if (out.empty()) return out;
  return "; a read " + out +
         (p && p->disk_read_seconds > 0 ? " (probed alone " + format_fixed(p->disk_read_seconds * 1e3, 3) + ")" : "");
}

// ", 5 waited, woken 12.0 us after the landing": the rounds whose compute
// thread still waited when their last read landed, and its mean wake-up.
std::string wake_text(const ReadWakes& wakes) {
  if (wakes.rounds == 0) return "";
  return ", " + std::to_string(wakes.rounds) + " waited, woken " +
         format_fixed(wakes.seconds / static_cast<double>(wakes.rounds) * 1e6, 1) + " us after the landing";
}

// "    rounds that read, ...: decoding: 1 read 96 x 3.10 ms, 2 reads 12 x
// 3.92 ms, 80 waited, woken 12.0 us after the landing; in prefill: 128
// rounds of 6.0 reads, 9.81 ms a round": the rounds' time from submission
// to the last landing, what the model prices as a batch of m reads (a
// layer's misses, a prefill round's), and the wake-ups it adds.
std::string read_round_line(const SweepReport& r, std::size_t config) {
  std::map<int, ReadBatch> decode;  // by read count, over the repeats
  ReadBatch prefill_all;             // every prefill round together
  ReadWakes decode_wakes, prefill_wakes;
  double prefill_reads = 0;
  for (const RunRecord& run : r.runs) {
    if (run.config != config) continue;
    for (const ReadBatch& b : run.read_batches) {
      ReadBatch& sum = decode[b.reads];
      sum.rounds += b.rounds, sum.seconds += b.seconds;
    }
    for (const ReadBatch& b : run.prefill_read_batches) {
      prefill_all.rounds += b.rounds, prefill_all.seconds += b.seconds;
      prefill_reads += static_cast<double>(b.rounds) * b.reads;
    }
    decode_wakes += run.decode_wakes;
    prefill_wakes += run.prefill_wakes;
  }
  std::string decoding, prefill;
  for (const auto& [reads, b] : decode) {
    if (b.rounds == 0) continue;
    decoding += (decoding.empty() ? "decoding: " : ", ") + std::to_string(reads) + (reads == 1 ? " read " : " reads ") +
                std::to_string(b.rounds) + " x " + format_fixed(b.seconds / static_cast<double>(b.rounds) * 1e3, 2) + " ms";
  }
  if (!decoding.empty()) decoding += wake_text(decode_wakes);
  if (prefill_all.rounds > 0) {
    const auto rounds = static_cast<double>(prefill_all.rounds);
    prefill = "in prefill: " + format_fixed(rounds, 0) + " rounds of " + format_fixed(prefill_reads / rounds, 1) +
              " reads, " + format_fixed(prefill_all.seconds / rounds * 1e3, 2) + " ms a round" + wake_text(prefill_wakes);
  }
  if (decoding.empty() && prefill.empty()) return "";
  return "    rounds that read, submission to last landing: " + decoding + (decoding.empty() || prefill.empty() ? "" : "; ") +
         prefill + "\n";
}

// ", at d0 18.38 (predicted 17.90), at d512 ...": a decode token's reads at
// each depth, measured and predicted, where there are several depths.
std::string reads_at_depths(const std::vector<int>& depths, const std::vector<double>& misses,
                            const std::vector<double>& tokens, const ConfigPrediction* p) {
  const bool measured = std::any_of(tokens.begin(), tokens.end(), [](double t) { return t > 0; });
  const bool predicted = p && p->decode_disk_reads_at_depth.size() == depths.size();
  if (depths.size() < 2 || (!measured && !predicted)) return {};
  std::string out;
  for (std::size_t d = 0; d < depths.size(); ++d) {
    out += ", at d" + std::to_string(depths[d]) + " " + (tokens[d] > 0 ? format_fixed(misses[d] / tokens[d], 2) : std::string("-"));
    if (predicted) out += " (predicted " + format_fixed(p->decode_disk_reads_at_depth[d], 2) + ")";
  }
  return out;
}

// Expert records read from disk, measured (mean per run) beside predicted,
// for the configurations that read any: whether a speed error comes from
// the hit rate or from the price of a read.
std::string disk_reads_lines(const SweepReport& r) {
  std::string out;
  for (std::size_t i = 0; i < r.grid.size(); ++i) {
    double decode_misses = 0, decode_tokens = 0, prefill_misses = 0, passes = 0, decode_read_s = 0, prefill_read_s = 0;
    std::vector<double> depth_misses(r.depths.size(), 0.0), depth_tokens(r.depths.size(), 0.0);
    for (const RunRecord& run : r.runs) {
      if (run.config != i) continue;
      decode_misses += static_cast<double>(run.expert_misses), decode_tokens += run.decode_tokens;
      for (std::size_t d = 0; d < run.depth_misses.size() && d < depth_misses.size(); ++d) {
        depth_misses[d] += static_cast<double>(run.depth_misses[d]);
        depth_tokens[d] += static_cast<double>(run.decode_tokens) / static_cast<double>(run.depth_misses.size());
      }
      prefill_misses += static_cast<double>(run.prefill_misses), passes += 1;
      decode_read_s += run.read_seconds, prefill_read_s += run.prefill_read_seconds;
    }
    const ConfigPrediction* p = prediction_of(r, i);
    const bool predicted_reads = p && (p->decode_disk_reads > 0 || p->prefill_disk_reads > 0);
    if (decode_misses + prefill_misses <= 0 && !predicted_reads) continue;
    const bool same_prompt = p && p->prefill_tokens == r.prompt_tokens;
    out += "  " + config_label(r.grid[i], r.n_experts) + ": decode " +
           format_fixed(decode_tokens > 0 ? decode_misses / decode_tokens : 0, 2) + " per token" +
           (p ? " (predicted " + format_fixed(p->decode_disk_reads, 2) + ")" : "") +
           reads_at_depths(r.depths, depth_misses, depth_tokens, p) + ", prefill " +
           format_fixed(passes > 0 ? prefill_misses / passes : 0, 1) + " per pass" +
           (same_prompt ? " (predicted " + format_fixed(p->prefill_disk_reads, 1) + ")" : "") +
           read_time(decode_read_s, decode_misses, prefill_read_s, prefill_misses, p) + "\n" + read_round_line(r, i);
  }
  return out.empty() ? out : "expert records read from disk, measured (predicted):\n" + out;
}

// One line per distinct mismatch, with the repeats that met it.
std::string machine_change_lines(const std::vector<SweepReport::MachineChange>& changes) {
  std::string out;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    bool seen = false;
    for (std::size_t k = 0; k < i; ++k) seen = seen || changes[k].mismatch == changes[i].mismatch;
    if (seen) continue;
    std::string repeats;
    for (const auto& c : changes)
      if (c.mismatch == changes[i].mismatch) repeats += (repeats.empty() ? "" : ", ") + std::to_string(c.repeat + 1);
    out += "not the profile's machine in repeat(s) " + repeats + " (" + changes[i].mismatch +
           "): those runs measured another machine than the predictions describe\n";
  }
  return out;
}

}  // namespace

std::string sweep_table(const SweepReport& r) {
  char line[512];
  std::snprintf(line, sizeof line, "%4s  %-44s %11s %7s %9s %12s %7s %9s %8s  %s", "rank", "configuration", "decode tok/s",
                "spread", "predicted", "prefill tok/s", "spread", "predicted", "hit rate", "kernel");
  std::string out = line;
  // Each depth's decode, and with predictions its error (the planner prices each depth apart).
  const bool predicted_depths = !r.predictions.empty();
  for (int depth : r.depths) out += "  tg@d" + std::to_string(depth) + (predicted_depths ? " predicted" : "");
  out += "\n";
  int rank = 0;
  for (std::size_t i : order_by(r.summaries, Metric::decode)) {
    const ConfigSummary& s = r.summaries[i];
    std::string kernel;
    for (const RunRecord& run : r.runs)
      if (run.config == i) kernel = run.kernel_used;
    const ConfigPrediction* p = prediction_of(r, i);
    auto error = [&](double predicted, double measured) {
      return p && measured > 0 ? format_fixed(100 * (predicted / measured - 1), 0) + "%" : std::string("-");
    };
    std::snprintf(line, sizeof line, "%4d%s %-44s %11.2f %6.0f%% %9s %12.2f %6.0f%% %9s %7.1f%%  %s\n", ++rank,
                  r.grid[i].planned ? " *" : "  ", config_label(r.grid[i], r.n_experts).c_str(), s.decode.median,
                  100 * s.decode.spread, p ? error(p->decode_tok_s, s.decode.median).c_str() : "-", s.prefill.median,
                  100 * s.prefill.spread, p ? error(p->prefill_tok_s, s.prefill.median).c_str() : "-", 100 * s.hit_rate,
                  kernel.c_str());
    out.append(line, std::strlen(line) - 1);  // the depth columns go before the newline
    for (std::size_t d = 0; d < s.decode_at_depth.size(); ++d) {
      std::snprintf(line, sizeof line, "  %*.2f", static_cast<int>(4 + std::to_string(d < r.depths.size() ? r.depths[d] : 0).size()),
                    s.decode_at_depth[d].median);
      out += line;
      if (!predicted_depths) continue;
      const bool predicted = p && d < p->decode_tok_s_at_depth.size();
      std::snprintf(line, sizeof line, " %9s", predicted ? error(p->decode_tok_s_at_depth[d], s.decode_at_depth[d].median).c_str() : "-");
      out += line;
    }
    out += "\n";
  }
  if (!r.stopped_early.empty()) out += r.stopped_early + "\n";
  out += machine_change_lines(r.machine_changes);
  out += "* = planned; tok/s: median of " + std::to_string(r.repeats) + " interleaved repeats" +
         (r.min_timed_seconds > 0 ? ", each the median of its passes (warm-up and timed pass, again until " +
                                        format_fixed(r.min_timed_seconds, 2) + " s were timed)"
                                  : std::string()) +
         "; spread: (max - min) / median;\n"
         "prefill: pp" + std::to_string(r.prompt_tokens) + "; decode: tg" + std::to_string(r.decode_tokens) +
         " over every depth; tg@dD: decode after D tokens are in the KV cache;\n"
         "predicted: the planner's prediction (coli-plan) for that configuration, as its error against the median\n";
  out += "decode:  " + ranking_line(r, Metric::decode) + "\n";
  out += "prefill: " + ranking_line(r, Metric::prefill) + "\n";
  if (!r.predictions.empty()) {
    out += "decode:  " + prediction_line(r, r.predictions, Metric::decode) + "\n";
    out += "prefill: " + prediction_line(r, r.predictions, Metric::prefill) + "\n";
    out += depth_prediction_lines(r);
  }
  if (!r.retimed.empty()) {
    out += "--retime: the profile's kernel points, OpenMP costs and reads beside compute timed again before each repeat (re-timed / profile GB/s):\n";
    for (const RetimedRepeat& rep : r.retimed)
      out += "  repeat " + std::to_string(rep.repeat + 1) + " (" + format_fixed(rep.seconds, 1) + " s): " + rep.drift + "\n";
    const std::vector<ConfigPrediction> retimed = retimed_predictions(r);
    out += "decode, re-timed:  " + prediction_line(r, retimed, Metric::decode) + "\n";
    out += "prefill, re-timed: " + prediction_line(r, retimed, Metric::prefill) + "\n";
  }
  return out + disk_reads_lines(r);
}

}  // namespace coli::bench
