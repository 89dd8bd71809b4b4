#!/usr/bin/env python3
"""Device profiles' kernel points side by side: per thread count, each
profile's RAM read bandwidth and the decode and prefill points the speed
model reads most (GB/s for decode, tokens/s for prefill), with the tuning
pool each profile cycled through. For two probes of one machine that differ
in one setting (coli-probe --tuning-pool).

  tools/bench/profile_points.py PROFILE.toml [PROFILE.toml ...]
"""
import signal
import sys
import tomllib

KERNELS = [("expert_q4_decode", "median_gb_per_s", "GB/s"), ("dense_q4_decode", "median_gb_per_s", "GB/s"),
           ("expert_q4_prefill_wide", "tokens_per_s", "tok/s"), ("dense_q4_prefill", "tokens_per_s", "tok/s")]


def load(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        sys.exit(f"profile_points.py: {path}: {e}")


def ram_read(profile, threads):
    points = profile.get("measurements", {}).get("memory_bandwidth", {}).get("points", [])
    reads = [p["median_gb_per_s"] for p in points if p.get("threads") == threads and p.get("kernel") == "read"]
    return max(reads, default=None)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    profiles = [(path, load(path)) for path in sys.argv[1:]]
    for path, p in profiles:
        tuning = p.get("measurements", {}).get("kernel_tuning")
        if not tuning:
            sys.exit(f"profile_points.py: {path}: no [measurements.kernel_tuning] (a --quick profile?)")
        print(f"{path}: pool {tuning['pool_bytes'] / 2**20:.0f} MiB")
    threads = sorted({pt["threads"] for _, p in profiles for pt in p["measurements"]["kernel_tuning"]["points"]})
    header = ["threads", "RAM read GB/s"] + [f"{k} {unit}" for k, _, unit in KERNELS]
    print(" | ".join(header))
    for t in threads:
        row = [str(t), " / ".join(f"{ram_read(p, t) or 0:.1f}" for _, p in profiles)]
        for kernel, field, _ in KERNELS:
            values = []
            for _, p in profiles:
                match = [pt for pt in p["measurements"]["kernel_tuning"]["points"] if pt["kernel"] == kernel and pt["threads"] == t]
                value = match[0][field] if match else None
                if isinstance(value, dict):
                    value = value.get("median")
                values.append("-" if value is None else f"{value:.1f}")
            row.append(" / ".join(values))
        print(" | ".join(row))


if __name__ == "__main__":
    main()
