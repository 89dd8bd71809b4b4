#!/usr/bin/env python3
"""Markdown table of a coli-sweep JSON (sweep.json): per configuration the
measured decode and prefill medians, the planner's predictions and their
errors, then the worst error per metric and where the planned configuration
ranked, and (schema 5) the expert records read from disk beside the
predicted reads for the configurations that stream; (schema 9, --retime) the
errors of the predictions from the figures re-timed before each repeat beside
them, and each repeat's drift; the planned configuration against its closest rival
repeat by repeat, and how far the repeats moved; where the planner priced each depth
apart, each depth's decode and reads a token beside their predictions. usage: sweep_prediction_table.py SWEEP_JSON [TITLE]"""
import json
import signal
import statistics
import sys


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the table quietly
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], encoding="utf-8") as f:
            sweep = json.load(f)
        configs = sweep["configs"]
    except (OSError, ValueError, KeyError) as e:
        print(f"{sys.argv[1]}: not a coli-sweep JSON ({e})", file=sys.stderr)
        return 1
    title = sys.argv[2] if len(sys.argv) > 2 else sweep.get("model", "")
    print(f"**{title}**\n")
    retimed = "retimed" in sweep
    extra = " re-timed |" if retimed else ""
    print(f"| configuration | decode measured | predicted | error |{extra} prefill measured | predicted | error |{extra}")
    print("|---|---|---|---|" + ("---|" if retimed else "") + "---|---|---|" + ("---|" if retimed else ""))
    for c in configs:
        p, q = c.get("predicted") or {}, c.get("predicted_retimed") or {}
        mark = " (planned)" if c.get("planned") else ""
        label = c['label'].replace(' | ', ', ')  # the table's own separator
        again = (lambda key: f" {100 * q.get(key, 0):+.0f}% |") if retimed else (lambda key: "")
        print(f"| {label}{mark} | {c['decode']['median_tok_s']:.1f} | {(p.get('decode_tok_s') or 0):.1f} | "
              f"{100 * (p.get('decode_error') or 0):+.0f}% |{again('decode_error')} {c['prefill']['median_tok_s']:.1f} | "
              f"{(p.get('prefill_tok_s') or 0):.1f} | {100 * (p.get('prefill_error') or 0):+.0f}% |{again('prefill_error')}")
    print()
    if retimed:
        for r in sweep["retimed"].get("repeats", []):
            print(f"- repeat {r['repeat'] + 1}, re-timed / profile: {r['drift']}")
        for metric in ("decode", "prefill"):
            q = sweep["retimed"].get("prediction", {}).get(metric, {})
            print(f"- {metric}, re-timed: worst error {100 * (q.get('worst_error') or 0):+.1f}%, mean |error| "
                  f"{100 * (q.get('mean_abs_error') or 0):.1f}%")
    for metric in ("decode", "prefill"):
        q = sweep.get("prediction", {}).get(metric, {})
        r = sweep.get("ranking", {}).get(metric, {})
        rank_corr = q.get('rank_correlation')
        quality = (f"worst error {100 * (q.get('worst_error') or 0):+.1f}%, mean |error| "
                   f"{100 * (q.get('mean_abs_error') or 0):.1f}%, rank correlation "
                   f"{'n/a' if rank_corr is None else f'{rank_corr:.2f}'}" if q.get('points') else "no predictions")
        print(f"- {metric}: {quality}; "
              f"planned rank {r.get('rank')} of {r.get('of')}, {(r.get('percent_of_best') or 0):.1f}% of the best "
              f"({r.get('best_label')}){paired_text(sweep, metric)}")
    for change in sweep.get("machine_changes", []):  # schema 13
        print(f"- repeat {change['repeat']}: not the profile's machine ({change['mismatch']})")
    print_disk_reads(sweep)
    print_depths(sweep)
    return 0


def paired_text(sweep, metric: str) -> str:
    """The planned configuration against each other one repeat by repeat (schema 10's ranking.*.paired,
    computed here from the runs for older files): the median over common repeats of planned / rival
    tok/s for the rival it trails most, and the repeats' own motion (median and widest spread)."""
    configs = sweep["configs"]
    planned = next((c for c in configs if c.get("planned")), None)
    key = f"{metric}_tok_s"
    by_repeat = lambda c: {r["repeat"]: r[key] for r in c.get("runs", []) if r.get(key, 0) > 0}
    if planned is None:
        return ""
    mine, worst = by_repeat(planned), None
    for c in configs:
        if c is planned:
            continue
        theirs = by_repeat(c)
        ratios = [mine[k] / theirs[k] for k in mine if k in theirs]
        if len(ratios) < 2:
            continue
        median = statistics.median(ratios)
        ahead = sum(1 for x in ratios if x >= 1)
        if worst is None or median < worst[0]:
            worst = (median, c["label"], ahead, len(ratios))
    spreads = [c[metric].get("spread", 0) for c in configs if len(c.get("runs", [])) > 1]
    text = ""
    if worst:
        text += (f"; repeat by repeat {100 * worst[0]:.1f}% of its closest rival ({worst[1]}), "
                 f"as fast or faster in {worst[2]} of {worst[3]}")
    if spreads:
        text += f"; repeats moved {100 * statistics.median(spreads):.0f}% (median), up to {100 * max(spreads):.0f}%"
    return text


def print_disk_reads(sweep) -> None:
    """Records read from disk per decode token and per prefill pass, measured (mean of the runs)
    and predicted: whether a speed error comes from the hit rate or from the price of a read."""
    rows = []
    for c in sweep["configs"]:
        runs, p = c.get("runs", []), c.get("predicted") or {}
        if not runs or "prefill_expert_misses" not in runs[0] or c.get("resident"):
            continue
        decode = sum(r["expert_misses"] for r in runs) / max(1, sum(r["decode_tokens"] for r in runs))
        prefill = sum(r["prefill_expert_misses"] for r in runs) / len(runs)
        rows.append(f"| {c['label'].replace(' | ', ', ')} | {decode:.2f} | {(p.get('decode_disk_reads_per_token') or 0):.2f} | "
                    f"{prefill:.0f} | {(p.get('prefill_disk_reads') or 0):.0f} |")
    if rows:
        print("\n| configuration | decode reads/token | predicted | prefill reads/pass | predicted |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))


def print_depths(sweep) -> None:
    """Decode at each depth (a test at depth 0 starts a fresh context, a deeper one follows its
    prompt), measured and predicted, with each depth's reads a token where the experts stream."""
    depths = sweep.get("workload", {}).get("depths", [])
    rows = []
    for c in sweep["configs"]:
        p, runs = c.get("predicted") or {}, c.get("runs", [])
        speeds, reads = p.get("decode_tok_s_at_depth") or [], p.get("decode_disk_reads_per_token_at_depth") or []
        if len(speeds) != len(depths) or len(depths) < 2:
            continue
        cells = []
        for d, depth in enumerate(depths):
            measured = next((m["median_tok_s"] for m in c.get("decode_at_depth", []) if m.get("depth") == depth), 0)
            error = f"{100 * (speeds[d] / measured - 1):+.0f}%" if measured > 0 else "-"
            misses = sum(r.get("expert_misses_at_depth", [0] * len(depths))[d] for r in runs)
            tokens = sum(r["decode_tokens"] for r in runs) / len(depths)
            read = f"{misses / tokens:.2f} / {reads[d]:.2f}" if tokens > 0 and not c.get("resident") else "-"
            cells.append(f"{measured:.1f} | {speeds[d]:.1f} | {error} | {read}")
        rows.append(f"| {c['label'].replace(' | ', ', ')} | " + " | ".join(cells) + " |")
    if rows:
        head = " | ".join(f"tg@d{d} measured | predicted | error | reads/token (predicted)" for d in depths)
        print(f"\n| configuration | {head} |")
        print("|---|" + "---|---|---|---|" * len(depths))
        print("\n".join(rows))


if __name__ == "__main__":
    sys.exit(main())
