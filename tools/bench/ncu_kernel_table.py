#!/usr/bin/env python3
"""Per-kernel table from Nsight Compute's CSV (ncu --csv --metrics
gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed):
each kernel's launches, mean duration and mean DRAM throughput (% of peak),
the kernels with the most time first.

usage: ncu_kernel_table.py NCU_CSV
"""
import collections
import csv
import sys

DURATION = "gpu__time_duration.sum"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def main(path):
    # ncu prints its own log lines before the CSV: only rows with the CSV's columns count.
    rows = [r for r in csv.reader(open(path, newline="")) if len(r) > 10]
    if not rows or "Kernel Name" not in rows[0]:
        sys.exit(f"{path}: no ncu CSV table (was ncu run with --csv and did it profile any kernel?)")
    header, data = rows[0], rows[1:]
    kernel, metric, value, launch, unit = (header.index(c) for c in
                                           ("Kernel Name", "Metric Name", "Metric Value", "ID", "Metric Unit"))
    launches = collections.defaultdict(dict)
    for r in data:
        launches[(r[launch], r[kernel][:60])][r[metric]] = (float(r[value].replace(",", "")), r[unit])
    by_kernel = collections.defaultdict(list)
    for (_, name), metrics in launches.items():
        by_kernel[name].append(metrics)

    def total(entries):
        return sum(m.get(DURATION, (0.0, ""))[0] for m in entries)

    for name, entries in sorted(by_kernel.items(), key=lambda kv: -total(kv[1])):
        times = [m.get(DURATION, (0.0, ""))[0] for m in entries]
        dram = [m.get(DRAM, (0.0, ""))[0] for m in entries]
        time_unit = entries[0].get(DURATION, (0.0, "?"))[1]
        print(f"{name:60s} n={len(entries):3d} mean {sum(times) / len(times):9.2f} {time_unit}"
              f"  dram {sum(dram) / len(dram):5.1f}%")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
