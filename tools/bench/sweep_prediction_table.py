#!/usr/bin/env python3
"""Markdown table of a coli-sweep JSON (sweep.json): per configuration the
measured decode and prefill medians, the planner's predictions and their
errors, then the worst error per metric and where the planned configuration
ranked. usage: sweep_prediction_table.py SWEEP_JSON [TITLE]"""
import json
import sys


def main() -> int:
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
    print("| configuration | decode measured | predicted | error | prefill measured | predicted | error |")
    print("|---|---|---|---|---|---|---|")
    for c in configs:
        p = c.get("predicted") or {}
        mark = " (planned)" if c.get("planned") else ""
        label = c['label'].replace(' | ', ', ')  # the table's own separator
        print(f"| {label}{mark} | {c['decode']['median_tok_s']:.1f} | {p.get('decode_tok_s', 0):.1f} | "
              f"{100 * p.get('decode_error', 0):+.0f}% | {c['prefill']['median_tok_s']:.1f} | "
              f"{p.get('prefill_tok_s', 0):.1f} | {100 * p.get('prefill_error', 0):+.0f}% |")
    print()
    for metric in ("decode", "prefill"):
        q = sweep.get("prediction", {}).get(metric, {})
        r = sweep.get("ranking", {}).get(metric, {})
        print(f"- {metric}: worst error {100 * q.get('worst_error', 0):+.1f}%, mean |error| "
              f"{100 * q.get('mean_abs_error', 0):.1f}%, rank correlation {q.get('rank_correlation', 0):.2f}; "
              f"planned rank {r.get('rank')} of {r.get('of')}, {r.get('percent_of_best', 0):.1f}% of the best "
              f"({r.get('best_label')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
