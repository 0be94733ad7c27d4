#!/usr/bin/env python3
"""Per-kernel GPU time of one W1 layer from an ncu CSV (one row per kernel launch).

    ncu --metrics gpu__time_duration.sum --csv ./w1_bench --dtypes bf16 \
        --systems burn-compile --infer-only --iters 2 --warmup 0 > run.csv
    python3 benchmarks/ncu_summary.py run.csv [more.csv …]

The launches of the last forward repeat per layer: the shortest tail period of kernel names is
one layer. Kernels of that layer are listed in launch order with their times (ncu runs each
kernel alone, at base clocks: shares, not wall time).
"""
import csv
import re
import sys

for path in sys.argv[1:]:
    lines = [l for l in open(path) if l.startswith('"')]
    rows = [
        (r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1000)
        for r in csv.DictReader(lines)
        if r["Metric Name"] == "gpu__time_duration.sum"
    ]
    names = [n for n, _ in rows]
    layer = next(k for k in range(1, len(names) // 2) if names[-k:] == names[-2 * k : -k])
    print(f"== {path}: {len(rows)} launches profiled; one layer = {layer} launches, "
          f"{sum(t for _, t in rows[-layer:]):.1f} us")
    for name, t in rows[-layer:]:
        print(f"  {t:8.1f} us  {re.sub(r'<.*', '', name)[:72]}")
