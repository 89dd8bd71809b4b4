#!/usr/bin/env python3
"""What a prompt's expert records cost inside the engine's pass, by rows.

Reads the expert batch log of `coli-decode-bench --op-times --batch-log FILE`
(one line per batch: MoE layer, seconds, expert:rows ...) and fits each
batch's time as a sum over its records, one unknown per class of record
(least squares over all batches): by the rows the record carried (1..5, 6 and
more) and by whether its layer read it within the last --near records (LRU
stack distance, counted in this layer's records: a prompt's rounds at one
layer run back to back, so a popular expert is re-read a round or two after
its last use, possibly still in the cache). Prints each class's records,
ms per record and GB/s, beside what the profile's stream points price
(--profile, --threads: the probe's 1-, 2- and 4-row points, each timed on
records fresh from a pool larger than the cache, and its warm points, on
records re-read after 23 others).

Usage: expert_batch_rates.py LOG [--near N] [--profile PROFILE.toml --threads T] [--by-distance 23,40,63]
"""
import argparse
import sys
import tomllib

SCHEMA = 1
MAX_ROWS = 6  # rows classes 1..5 and "6 and more"


def read_log(path):
    """(record_bytes, [(layer, seconds, [(expert, rows)])]) from a batch log."""
    record_bytes, batches = 0, []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split()
            if not words:
                continue
            if words[0] == "#":
                if words[1:5] == ["coli", "expert", "batch", "log,"] and int(words[6]) != SCHEMA:
                    sys.exit(f"{path}:{number}: batch log schema {words[6]}, this script reads {SCHEMA}")
                if len(words) == 3 and words[1] == "record_bytes":
                    record_bytes = int(words[2])
                continue
            try:
                records = [tuple(int(v) for v in word.split(":")) for word in words[2:]]
                batches.append((int(words[0]), float(words[1]), records))
            except ValueError:
                sys.exit(f"{path}:{number}: not 'moe_layer seconds expert:rows ...': {line.strip()}")
    if record_bytes <= 0:
        sys.exit(f"{path}: no '# record_bytes N' line; write it with coli-decode-bench --batch-log")
    return record_bytes, batches


def record_classes(batches, max_rows, edges):
    """Per batch, its records counted by class (min(rows, max_rows) - 1) * buckets + bucket, the bucket
    the first edge its LRU stack distance at its layer is at most (len(edges): further, or a first use)."""
    buckets = len(edges) + 1
    lru = {}  # per layer: experts, most recent last
    counts = []
    for layer, _, records in batches:
        order = lru.setdefault(layer, [])
        row = [0.0] * (max_rows * buckets)
        for expert, rows in records:
            distance = len(order) - 1 - order.index(expert) if expert in order else None
            if expert in order:
                order.remove(expert)
            order.append(expert)
            bucket = next((i for i, edge in enumerate(edges) if distance is not None and distance <= edge), buckets - 1)
            row[(min(rows, max_rows) - 1) * buckets + bucket] += 1
        counts.append(row)
    return counts


def print_by_distance(batches, record_bytes, edges):
    counts = record_classes(batches, 4, edges)
    per_record = least_squares(counts, [b[1] for b in batches])
    buckets = len(edges) + 1
    labels = [f"<= {edge}" for edge in edges] + ["further or first"]
    print("\nGB/s (records) by stack distance at the layer: rows | " + " | ".join(labels))
    for rows in range(4):
        cells = []
        for b in range(buckets):
            j = rows * buckets + b
            n = int(sum(c[j] for c in counts))
            cells.append("-" if not n else f"not separable ({n})" if per_record[j] <= 0
                         else f"{record_bytes / per_record[j] / 1e9:.1f} ({n})")
        print(f"{rows + 1 if rows < 3 else '4+'} | " + " | ".join(cells))


def least_squares(rows, targets):
    """The x minimising |A x - b| (normal equations; columns no batch uses give 0)."""
    used = [j for j in range(len(rows[0])) if any(r[j] for r in rows)]
    a = [[sum(r[i] * r[j] for r in rows) for j in used] for i in used]
    b = [sum(r[i] * t for r, t in zip(rows, targets)) for i in used]
    n = len(used)
    for i in range(n):
        pivot = max(range(i, n), key=lambda k: abs(a[k][i]))
        a[i], a[pivot], b[i], b[pivot] = a[pivot], a[i], b[pivot], b[i]
        if abs(a[i][i]) < 1e-30:
            sys.exit("the batches do not separate the record classes (too few batches of some rows)")
        for k in range(i + 1, n):
            f = a[k][i] / a[i][i]
            a[k] = [x - f * y for x, y in zip(a[k], a[i])]
            b[k] -= f * b[i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (b[i] - sum(a[i][k] * x[k] for k in range(i + 1, n))) / a[i][i]
    out = [0.0] * len(rows[0])
    for j, value in zip(used, x):
        out[j] = value
    return out


def stream_points(profile_path, threads, warm=False):
    """{rows: GB/s} of the profile's q4 stream points (warm: _stream_warm) nearest `threads`."""
    with open(profile_path, "rb") as f:
        profile = tomllib.load(f)
    points = profile.get("measurements", {}).get("kernel_tuning", {}).get("points", [])
    stem = "expert_q4_prefill_stream" + ("_warm" if warm else "")
    names = {stem + "1": 1, stem: 2, stem + "4": 4}
    mine = [p for p in points if p.get("kernel") in names]
    if not mine:
        return {}
    nearest = min({p["threads"] for p in mine}, key=lambda t: abs(t - threads))
    return {names[p["kernel"]]: p["median_gb_per_s"] for p in mine if p["threads"] == nearest}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--near", type=int, default=24, help="re-read within this many of the layer's records (default 24)")
    parser.add_argument("--profile", help="device profile whose stream points to print beside")
    parser.add_argument("--threads", type=int, default=0, help="the run's threads (the profile's points nearest)")
    parser.add_argument("--by-distance", help="also fit by stack distance buckets, e.g. 23,40,63 (records)")
    args = parser.parse_args()
    record_bytes, batches = read_log(args.log)
    if not batches:
        sys.exit(f"{args.log}: no batches")
    counts = record_classes(batches, MAX_ROWS, [args.near - 1])  # bucket 0: re-read within --near records
    seconds = [b[1] for b in batches]
    per_record = least_squares(counts, seconds)
    points = stream_points(args.profile, args.threads) if args.profile else {}
    warm_points = stream_points(args.profile, args.threads, warm=True) if args.profile else {}
    total = [sum(c[j] for c in counts) for j in range(2 * MAX_ROWS)]
    print(f"{len(batches)} batches, {int(sum(total))} records of {record_bytes} bytes, {sum(seconds):.3f} s "
          f"({sum(total) * record_bytes / sum(seconds) / 1e9:.1f} GB/s over all)")
    print(f"rows | records re-read within {args.near} | ms | GB/s | other records | ms | GB/s | stream point GB/s "
          "| warm point GB/s")
    for rows in range(1, MAX_ROWS + 1):
        cells = []
        for bucket in (0, 1):
            j = (rows - 1) * 2 + bucket
            if not total[j]:
                cells.append("0 | - | -")
            elif per_record[j] <= 0:  # the fit gives this class no time of its own: its batches do not tell it apart
                cells.append(f"{int(total[j])} | not separable | -")
            else:
                cells.append(f"{int(total[j])} | {per_record[j] * 1e3:.3f} | {record_bytes / per_record[j] / 1e9:.1f}")
        label = f"{rows}+" if rows == MAX_ROWS else str(rows)
        fresh, warm = (f"{p[rows]:.1f}" if rows in p else "-" for p in (points, warm_points))
        print(f"{label} | {cells[0]} | {cells[1]} | {fresh} | {warm}")
    if args.by_distance:
        try:
            edges = sorted(int(v) for v in args.by_distance.split(","))
        except ValueError:
            sys.exit(f"--by-distance {args.by_distance}: not comma-separated record counts")
        print_by_distance(batches, record_bytes, edges)


if __name__ == "__main__":
    main()
