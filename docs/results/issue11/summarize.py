# Medians and spread ((max - min) / median) of before_after.sh samples: summarize.py DIR
import re, statistics, sys
d = sys.argv[1]
def stats(v):
    m = statistics.median(v); return f"median {m:.2f} tok/s, spread {(max(v)-min(v))/m*100:.0f}% (min {min(v):.2f}, max {max(v):.2f}, n={len(v)})"
for kind, pat in (("decode", r"^(before|after) \d+\s+repeat \d+: .*: ([0-9.]+) tok/s"), ("prefill", r"^(before|after) \d+ prefill ([0-9.]+) tok/s")):
    vals = {"before": [], "after": []}
    for line in open(f"{d}/{kind}_samples.txt"):
        m = re.match(pat, line)
        if m: vals[m.group(1)].append(float(m.group(2)))
    for side in ("before", "after"):
        print(f"{kind:8s} {side:7s} {stats(vals[side])}  samples {vals[side]}")
