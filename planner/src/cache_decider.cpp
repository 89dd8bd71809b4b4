// Expert cache capacity: the largest cap whose itemised plan plus safety
// margin fits the RAM headroom, and the refusal that says what to change.
#include <algorithm>

#include "coli/planner/deciders.h"

namespace coli::planner {
namespace {

std::uint64_t needed(const CacheChoice& c) { return c.memory.total(Tier::ram) + c.margin.bytes; }

Result<CacheChoice> evaluate(const ModelFootprint& fp, const CacheRequest& req, int cap, const MemoryKnobs& knobs) {
  int pins = req.pins;
  std::string pins_basis;
  if (!req.pins_forced && req.routing && pins > 0) pins = decide_history_pins(fp, cap, pins, *req.routing, pins_basis);
  auto pins_round = decide_pins_and_round(fp, cap, pins, req.pins_forced, req.requested_round);
  if (!pins_round) return pins_round.error();
  if (!pins_basis.empty()) pins_round->reason += "; " + pins_basis;
  CacheChoice c;
  c.cap = cap;
  c.pins_round = *pins_round;
  MemoryKnobs k = knobs;
  k.cap = cap;
  k.pins = pins_round->pins;
  k.round_tokens = pins_round->round_tokens;
  c.memory = preview_memory(fp, k);
  c.memory.lines.insert(c.memory.lines.end() - 1, req.extra_lines.begin(), req.extra_lines.end());  // before the disk line
  if (req.load_phase_bytes > 0) c.memory.lines.insert(c.memory.lines.end() - 1, load_phase_line(c.memory, req.load_phase_bytes));
  c.margin = decide_safety_margin(c.memory.total(Tier::ram), k.threads, k.io_threads);
  return c;
}

// The largest cap in [top_k, n_experts] that fits, if any.
std::optional<CacheChoice> largest_fitting(const ModelFootprint& fp, const CacheRequest& req, const MemoryKnobs& knobs) {
  const int ceiling = req.useful_cap > 0 ? std::clamp(req.useful_cap, fp.top_k, fp.n_experts) : fp.n_experts;
  // Every line grows with the cap (slots, and the prefill round the cap
  // allows), so the fitting caps are a prefix: binary search keeps planning
  // a 256-expert model well under its 50 ms budget.
  std::optional<CacheChoice> best;
  int low = fp.top_k, high = ceiling;
  while (low <= high) {
    const int cap = low + (high - low) / 2;
    auto c = evaluate(fp, req, cap, knobs);
    if (c && needed(*c) <= req.headroom_bytes) {
      best = std::move(*c);
      low = cap + 1;
    } else {
      high = cap - 1;
    }
  }
  return best;
}

std::string summary(const CacheChoice& c) {
  auto line = [&](const char* name) {
    const MemoryLine* l = c.memory.find(name);
    return l ? format_bytes(l->bytes) : std::string("0");
  };
  return format_bytes(c.memory.total(Tier::ram)) + " (dense " + line("dense weights") + ", KV " + line("KV cache") +
         ", prompt activations " + line("activations: prompt") + ", expert slots " +
         format_bytes(c.memory.expert_cache_bytes()) +
         ") + margin " + format_bytes(c.margin.bytes) + " = " + format_bytes(needed(c));
}

// What would make cap = top_k fit, each with its numbers.
std::vector<std::string> remedies(const ModelFootprint& fp, const CacheRequest& req, const CacheChoice& smallest) {
  std::vector<std::string> out;
  const std::uint64_t short_by = needed(smallest) - req.headroom_bytes;
  if (req.ram_limited_by_user) out.push_back("raise --ram (it is " + format_bytes(req.headroom_bytes) + ")");
  for (int ctx = req.knobs.ctx / 2; ctx >= 256; ctx /= 2) {
    MemoryKnobs k = req.knobs;
    k.ctx = ctx;
    k.prompt_tokens = std::min(k.prompt_tokens, ctx);
    if (auto c = evaluate(fp, req, fp.top_k, k); c && needed(*c) <= req.headroom_bytes) {
      out.push_back("lower --ctx to " + std::to_string(ctx) + " (KV cache " +
                    format_bytes(smallest.memory.find("KV cache")->bytes) + " at ctx " + std::to_string(req.knobs.ctx) + ")");
      break;
    }
  }
  if (fp.expert_format != WeightFormat::q4_g64) {
    out.push_back("use int4 experts (convert --experts q4_g64: " + format_bytes(fp.q4_g64.record_stride) +
                  " per slot instead of " + format_bytes(fp.expert().record_stride) + ")");
  }
  if (fp.dense_format == DenseFormat::source) out.push_back("quantise dense weights (convert --dense q8_row)");
  out.push_back("or free " + format_bytes(short_by) + " of RAM");
  return out;
}

std::string joined(const std::vector<std::string>& advice) {
  std::string text;
  for (const std::string& item : advice) text += "; " + item;
  return text;
}

}  // namespace

Result<CacheChoice> decide_cache(const ModelFootprint& fp, const CacheRequest& req) {
  const std::string headroom = format_bytes(req.headroom_bytes) + " (" + req.headroom_source + ")";
  if (req.cap) {
    int cap = *req.cap;
    if (cap < fp.top_k) {
      return make_error("--cap " + std::to_string(cap) + " is below top_k " + std::to_string(fp.top_k) +
                        ": every token needs its top_k experts resident at once; use --cap " + std::to_string(fp.top_k) +
                        " or more");
    }
    std::string clamp_note;
    if (cap > fp.n_experts) {
      clamp_note = " (clamped from --cap " + std::to_string(cap) + ": only " + std::to_string(fp.n_experts) + " experts exist)";
      cap = fp.n_experts;
    }
    auto c = evaluate(fp, req, cap, req.knobs);
    if (!c) return c.error();
    if (const auto shortfall = cache_shortfall(fp, req)) {
      return make_error("--cap " + std::to_string(cap) + " needs " + shortfall->needs + ", more than the headroom " +
                        headroom + joined(shortfall->advice));
    }
    c->reason = "cap " + std::to_string(cap) + " (forced)" + clamp_note + ": needs " + summary(*c) + " of " + headroom;
    return c;
  }
  if (auto c = largest_fitting(fp, req, req.knobs)) {
    const bool streaming = c->cap < fp.n_experts;
    if (req.useful_cap > 0 && c->cap == std::max(req.useful_cap, fp.top_k) && streaming) {
      c->reason = "cap " + std::to_string(c->cap) + " of " + std::to_string(fp.n_experts) +
                  " experts per layer: the VRAM tier holds the others, so more RAM slots would serve nothing: needs " +
                  summary(*c) + " of " + headroom;
      return *c;
    }
    c->reason = "cap " + std::to_string(c->cap) + " of " + std::to_string(fp.n_experts) + " experts per layer" +
                (streaming ? " (experts stream from disk; cap " + std::to_string(c->cap + 1) + " would exceed the headroom)"
                           : " (every expert resident)") +
                ": needs " + summary(*c) + " of " + headroom;
    return *c;
  }
  auto smallest = evaluate(fp, req, fp.top_k, req.knobs);
  if (!smallest) return make_error("no expert cache fits: " + smallest.error().message);
  const auto shortfall = cache_shortfall(fp, req);
  return make_error("the model does not fit: even cap = top_k = " + std::to_string(fp.top_k) + " needs " +
                    summary(*smallest) + ", but the headroom is " + headroom +
                    (shortfall ? joined(shortfall->advice) : std::string()));
}

std::optional<CacheShortfall> cache_shortfall(const ModelFootprint& fp, const CacheRequest& req) {
  const int cap = req.cap ? std::min(*req.cap, fp.n_experts) : fp.top_k;
  if (cap < fp.top_k) return std::nullopt;
  auto tried = evaluate(fp, req, cap, req.knobs);
  if (!tried || needed(*tried) <= req.headroom_bytes) return std::nullopt;
  CacheShortfall s{cap, needed(*tried), req.headroom_bytes, summary(*tried), {}};
  if (!req.cap) {
    s.advice = remedies(fp, req, *tried);
  } else if (const auto fitting = largest_fitting(fp, req, req.knobs)) {
    s.advice = {"use --cap " + std::to_string(fitting->cap) + " or less"};
  } else {
    s.advice = {"no cap fits: lower --ctx or use a smaller model format"};
  }
  return s;
}

}  // namespace coli::planner
