#!/usr/bin/env python3
"""Launches and kernel time of one steady step from an ncu CSV (one row per kernel launch).

    ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        ./w1_bench --dtypes bf16 --systems burn-compile --iters 3 --warmup 1 > train.csv
    python3 benchmarks/kernel_time.py train.csv --workload W1 --dtype bf16 --phase train

The steady step is the repeating tail of the launches: the longest period k (at most half of
them) whose last k launches repeat the k before by kernel name, cut to its shortest period
that tiles those k launches whole — one step, since the timed steps at the end of the run are
the same cached plan (k spans several steps when more than two ran; a layer repeats inside a
step, but the step's other launches keep it from tiling the tail). Prints one JSON line
(`"metric":"kernel_ms"`, `"launches"`, system `burn-compile`) and, with `--list`, the step's
kernels in launch order (with `--bandwidth`, each launch's DRAM traffic, GB/s, grid and block,
where the CSV has `dram__bytes_read.sum` and `dram__bytes_write.sum`); with `--kinds`, their
launches and time by kernel name. ncu serializes kernels: the sum is GPU time, not wall time.
"""
import argparse
import csv
import json
import os
import re


SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


def launches(path):
    """(kernel name, {metric: value}) per launch, in order; times in µs, bytes in bytes."""
    lines = [l for l in open(path) if l.startswith('"')]
    by_id = {}
    for r in csv.DictReader(lines):
        value = float(r["Metric Value"].replace(",", "")) * SCALE.get(r["Metric Unit"], 1.0)
        name, metrics = by_id.setdefault(r["ID"], (r["Kernel Name"], {}))
        metrics[r["Metric Name"]] = value
        metrics["grid"] = r.get("Grid Size", "")
        metrics["block"] = r.get("Block Size", "")
    return [by_id[k] for k in sorted(by_id, key=int) if "gpu__time_duration.sum" in by_id[k][1]]


def steady_step(launches):
    names = [n for n, _ in launches]
    for k in range(len(names) // 2, 0, -1):
        if names[-k:] == names[-2 * k : -k]:
            tail = names[-k:]
            d = next(d for d in range(1, k + 1) if k % d == 0 and tail == tail[-d:] * (k // d))
            return launches[-d:]
    raise SystemExit("no repeating tail: run more than one timed step")


parser = argparse.ArgumentParser()
parser.add_argument("csv")
parser.add_argument("--workload", default="W1")
parser.add_argument("--dtype", default="bf16")
parser.add_argument("--phase", default="train")
parser.add_argument("--system", default="burn-compile")
parser.add_argument("--list", action="store_true")
parser.add_argument("--kinds", action="store_true", help="launches and time by kernel name")
parser.add_argument(
    "--bandwidth",
    action="store_true",
    help="with --list: each launch's DRAM bytes and GB/s, from dram__bytes_read.sum and "
    "dram__bytes_write.sum in the CSV (and grid and block)",
)
a = parser.parse_args()
everything = launches(a.csv)
step = steady_step([(n, m["gpu__time_duration.sum"]) for n, m in everything])
metrics = [m for _, m in everything[len(everything) - len(step):]]
if a.list:
    for (name, us), m in zip(step, metrics):
        extra = ""
        if a.bandwidth:
            moved = m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
            extra = f"  {moved / 1e6:8.2f} MB {moved / us / 1e3 if us else 0:7.0f} GB/s  grid {m['grid']} block {m['block']}"
        print(f"  {us:8.1f} us{extra}  {re.sub(r'<.*', '', name)[:80]}")
if a.kinds:
    kinds = {}
    for name, us in step:
        kind = re.sub(r"_\d+$", "", re.sub(r"<.*", "", name))[:70]
        n, total = kinds.get(kind, (0, 0.0))
        kinds[kind] = (n + 1, total + us)
    for kind, (n, total) in sorted(kinds.items(), key=lambda k: -k[1][1]):
        print(f"  {n:4d} x {total:9.1f} us  {kind}")
print(json.dumps({
    "workload": a.workload,
    "dtype": a.dtype,
    "phase": a.phase,
    "system": a.system,
    "mode": os.environ.get("BURN_COMPILE_MODE", "default"),
    "metric": "kernel_ms",
    "kernel_ms": round(sum(us for _, us in step) / 1000, 4),
    "launches": len(step),
    "gpu": os.environ.get("BENCH_GPU", "unknown"),
    "date": os.environ.get("BENCH_DATE", "unknown"),
}))
