#!/bin/bash
# Runs named steps on the GPU machine within one call's budget, each bounded by a watchdog that
# takes cuda-gdb (else gdb) backtraces of a step still running at its limit, and carries the
# disk cache (XDG_CACHE_HOME: PTX, autotune results) from one call to the next through
# $OUT/xdg.tgz, and CubeCL's autotune results under the checkout's target/ through
# $OUT/target-caches.tgz (put both back in the carried folder). CubeCL's PTX cache under
# target/cuda is left behind: reading a carried one of 158 MB made every kernel lookup slow.
# Unpacks *.xz binaries first.
# Run from a folder two levels below the checkout's root (bench-out/carry).
#
#   bash run_steps.sh BUDGET_S "name:limit_s:command" ...
#
# e.g., for reduce-overhead mode (issue 29; binaries built as README.md says, carried with
# this script in one folder; unstripped symbols help the backtraces: `strip --strip-debug`):
#   bash run_steps.sh 570 "tests:170:./gpu --test-threads 1 --nocapture reduce_overhead" \
#     "ro:200:BURN_COMPILE_MODE=reduce-overhead BURN_COMPILE_LOGS=recordings BURN_COMPILE_PROFILE_REPLAY=1 ./w1_bench --dtypes bf16 --systems burn-compile --out \$OUT/w1.jsonl" \
#     "default:120:./w1_bench --dtypes bf16 --systems burn-compile --out \$OUT/w1.jsonl" \
#     "torch:120:DTYPES=bf16 python3 torch_anchor.py reduce-overhead"
# Each step's output is $OUT/<name>.log; its tail is printed.
cd "$(dirname "$0")"
BUDGET=$1; shift
T0=$(date +%s)
# The driver's cache of kernels compiled from PTX (CUDA_CACHE_PATH) lives in xdg/ too: on a fresh
# machine the first tests and benchmarks spent 200-330 s each in cuModuleLoadData (the driver
# compiling Burn's autotune candidates); carried while small enough (see the end).
export CUDA_CACHE_PATH=$PWD/xdg/nv CUDA_CACHE_MAXSIZE=4294967296
export CUDA_PATH=/usr/local/cuda BENCH_GPU=${BENCH_GPU:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o "H[0-9]00" || echo unknown)} BENCH_DATE=${BENCH_DATE:-$(date +%F)} XDG_CACHE_HOME=$PWD/xdg
[ -f xdg.tgz ] && tar xzf xdg.tgz
# CubeCL keeps its autotune results under the checkout's target/ when Burn, not Compiled,
# configures it first (a process that runs Burn eager first): carried as target-caches.tgz.
[ -f target-caches.tgz ] && tar xzf target-caches.tgz -C ../..
for f in *.xz; do [ -f "$f" ] && xz -d -T0 "$f" && chmod +x "${f%.xz}"; done
echo "unpacked in $(( $(date +%s)-T0 ))s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step() {
  local name=$1 t=$2 cmd=$3
  local left=$(( BUDGET - ($(date +%s)-T0) - 25 ))
  [ $left -lt $t ] && t=$left
  if [ $t -le 5 ]; then echo "=== $name skipped: no time left"; return; fi
  echo "=== $name (limit ${t}s, at +$(( $(date +%s)-T0 ))s): $cmd"
  bash -c "$cmd" > $OUT/$name.log 2>&1 &
  local pid=$! s=0
  while kill -0 $pid 2>/dev/null; do
    sleep 1; s=$((s+1))
    if [ $s -ge $t ]; then
      echo "!!! $name still running after ${t}s: backtraces in $name.bt.*"
      for p in $pid $(pgrep -P $pid); do
        timeout 60 cuda-gdb -p $p -batch -ex "thread apply all bt 25" > $OUT/$name.bt.$p 2>&1 \
          || timeout 60 gdb -p $p -batch -ex "thread apply all bt 25" >> $OUT/$name.bt.$p 2>&1
      done
      pkill -9 -P $pid; kill -9 $pid; break
    fi
  done
  wait $pid; echo "rc=$? after $s s"; grep -v "^test .* ok$" $OUT/$name.log | tail -${TAIL:-30}
}
for s in "$@"; do
  IFS=: read -r name t cmd <<< "$s"
  step "$name" "$t" "$cmd"
done
# The carry holds 64 MiB in all: the driver's cache goes with the rest only below 40 MB packed.
tar czf $OUT/xdg.tgz xdg 2>/dev/null
if [ "$(stat -c %s $OUT/xdg.tgz)" -gt 40000000 ]; then
  echo "xdg.tgz over 40 MB with the driver's cache ($(du -sh xdg/nv | cut -f1)): packed without it"
  tar czf $OUT/xdg.tgz --exclude=xdg/nv xdg 2>/dev/null
fi
ls -la $OUT/xdg.tgz
caches=$(cd ../.. && ls -d target/autotune 2>/dev/null)
[ -n "$caches" ] && tar czf $OUT/target-caches.tgz -C ../.. $caches && ls -la $OUT/target-caches.tgz
du -sh xdg/* ../../target/autotune 2>/dev/null
echo "done at +$(( $(date +%s)-T0 ))s"
