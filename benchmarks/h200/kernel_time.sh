#!/usr/bin/env bash
# Issue 30's kernel-time table for W1: launches and summed kernel time per steady step of
# Compiled (ncu) and torch.compile reduce-overhead (torch.profiler), f32 and bf16, inference
# and training, in one call. Carry w1_bench (built with --features cuda), kernel_time.py
# (benchmarks/), torch_workloads.py (this folder). JSON lines in $OUT/kernel_time.jsonl.
# Its steps were run one by one on an H200 (BENCHMARKS.md, 2026-12-07 18:37-18:51), the
# script as a whole not yet.
set -u
out="${OUT:-.}/kernel_time.jsonl"
for dtype in f32 bf16; do
  for phase in infer train; do
    flags="--dtypes $dtype --systems burn-compile-jit --iters 2 --warmup 0"
    [ "$phase" = infer ] && flags="$flags --infer-only"
    # A first pass fills the caches (autotune, NVRTC); ncu then profiles a warm process.
    timeout 150 ./w1_bench $flags > /dev/null 2>&1
    # The attention step's autotune times cubek's flash kernel against the parts at the first
    # replays: under ncu's serialized launches the one kernel wins (718-746 us a layer on the
    # H200, against ~28 us for the parts every timed run keeps), so ncu profiles the parts.
    BURN_COMPILE_ATTENTION=0 timeout 200 ncu --clock-control none \
      --metrics gpu__time_duration.sum --csv ./w1_bench $flags > "ncu-$dtype-$phase.csv" 2> /dev/null
    python3 kernel_time.py "ncu-$dtype-$phase.csv" --workload W1 --dtype "$dtype" \
      --phase "$phase" >> "$out"
  done
done
WORKLOADS=W1 DTYPES=f32,bf16 PROFILE=1 timeout 240 python3 torch_workloads.py reduce-overhead >> "$out"
cat "$out"
