#!/usr/bin/env python3
"""llama_side_by_side.sh's tables: per pair (llama.cpp Q4_0 vs coli int4,
Q8_0 vs int8), pp and tg at each depth as the median and min-max over the
interleaved rounds, the ratio coli / llama.cpp of the medians, and coli
int4's decode bandwidth bound (bytes read per token at depth 0 / measured
read bandwidth) with the fraction of it achieved. Writes side_by_side.md
and side_by_side.json into OUT_DIR.

usage: side_by_side_report.py RAW_DIR OUT_DIR --pairs q4:Q4_0:int4,q8:Q8_0:int8 --bandwidth GB/S --notes TEXT
"""
import argparse
import json
import statistics
from pathlib import Path


def llama_figures(raw, pair):
    """{test: [tok/s per round]} from llama-bench -o json records."""
    out = {}
    for path in sorted(raw.glob(f"llama-{pair}-r*.json")):
        for rec in json.loads(path.read_text()):
            if rec["n_gen"] == 0:
                test = f"pp{rec['n_prompt']}" + (f" @ d{rec['n_depth']}" if rec["n_depth"] else "")
            else:
                test = f"tg{rec['n_gen']} @ d{rec['n_depth']}"
            out.setdefault(test, []).append(rec["avg_ts"])
    return out


def coli_figures(raw, pair):
    out, bytes_per_token = {}, {}
    for path in sorted(raw.glob(f"coli-{pair}-r*.json")):
        d = json.loads(path.read_text())
        for t in d["configs"][0]["tests"]:
            out.setdefault(t["test"], []).extend(t["tok_s"])
        bytes_per_token = dict(zip(d["depths"], d.get("decode_bytes_per_token", [])))
    return out, bytes_per_token


def stats(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def cell(s):
    return "-" if s is None else f"{s['median']:.2f} [{s['min']:.2f} .. {s['max']:.2f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw")
    ap.add_argument("out")
    ap.add_argument("--pairs", default="q4:Q4_0:int4,q8:Q8_0:int8")
    ap.add_argument("--bandwidth", type=float, default=0.0, help="measured read bandwidth, GB/s (0: no bound)")
    ap.add_argument("--notes", default="")
    args = ap.parse_args()
    raw, out = Path(args.raw), Path(args.out)
    report = {"notes": args.notes, "bandwidth_gb_s": args.bandwidth, "pairs": []}
    md = ["# coli vs llama.cpp, same checkpoint", "", args.notes, "",
          "tok/s: median [min .. max] over the interleaved rounds; ratio: coli median / llama.cpp median.", ""]
    for spec in args.pairs.split(","):
        pair, llama_name, coli_name = spec.split(":")
        llama = llama_figures(raw, pair)
        coli, bytes_per_token = coli_figures(raw, pair)
        rows = []
        md += [f"## llama.cpp {llama_name} vs coli {coli_name}", "",
               f"| test | llama.cpp {llama_name} | coli {coli_name} | ratio |", "|---|---|---|---|"]
        for test in dict.fromkeys(list(coli) + list(llama)):
            a, b = stats(llama.get(test, [])), stats(coli.get(test, []))
            ratio = b["median"] / a["median"] if a and b and a["median"] > 0 else None
            rows.append({"test": test, "llama_cpp": a, "coli": b, "ratio": ratio})
            md.append(f"| {test} | {cell(a)} | {cell(b)} | {'-' if ratio is None else f'{ratio:.2f}x'} |")
        entry = {"pair": pair, "llama_cpp": llama_name, "coli": coli_name, "tests": rows}
        if args.bandwidth > 0 and 0 in bytes_per_token and "-ncmoe" not in llama_name:  # no bound for hybrid pairs
            bound = args.bandwidth * 1e9 / bytes_per_token[0]
            tg0 = next((r["coli"] for r in rows if r["test"].endswith("@ d0") and r["test"].startswith("tg") and r["coli"]), None)
            entry["bound"] = {"bytes_per_token_d0": bytes_per_token[0], "tok_s": bound,
                              "achieved": tg0["median"] / bound if tg0 else None}
            md += ["", f"coli {coli_name} decode bound at depth 0: {bytes_per_token[0] / 2**20:.1f} MiB read per token / "
                   f"{args.bandwidth:.1f} GB/s = {bound:.1f} tok/s; achieved "
                   + (f"{100 * tg0['median'] / bound:.0f}%" if tg0 else "-")]
        report["pairs"].append(entry)
        md.append("")
    (out / "side_by_side.md").write_text("\n".join(md) + "\n")
    (out / "side_by_side.json").write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
