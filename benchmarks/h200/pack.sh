#!/usr/bin/env bash
# Packs what the GPU machine runs into bench-out/carry (ignored by git; carry it whole):
# the step runner, CubeCL's config, the kernel-time and torch scripts, and each named binary
# stripped of debug info (symbols kept for backtraces) and xz-compressed (run_steps.sh unpacks
# them). Run from the checkout's root:
#   bash benchmarks/h200/pack.sh gpu=$CARGO_TARGET_DIR/release/deps/gpu-<hash> \
#     w1_bench=$CARGO_TARGET_DIR/release/examples/w1_bench
set -eu
carry=bench-out/carry
mkdir -p "$carry"
cp benchmarks/h200/run_steps.sh benchmarks/h200/kernel_time.sh benchmarks/h200/cubecl.toml \
  benchmarks/h200/torch_workloads.py \
  benchmarks/kernel_time.py benchmarks/ncu_summary.py "$carry/"
[ -f ../shared/bench/torch_anchor.py ] && cp ../shared/bench/torch_anchor.py "$carry/"
for pair in "$@"; do
  name=${pair%%=*} binary=${pair#*=}
  strip --strip-debug -o "bench-out/$name" "$binary"
  xz -T0 -c "bench-out/$name" > "$carry/$name.xz"
done
du -sh "$carry"; du -ch "$carry"/* | tail -1
