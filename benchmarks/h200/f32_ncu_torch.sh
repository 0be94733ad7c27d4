#!/usr/bin/env bash
# On the H200 (see README.md here): W1 f32 (eager + compiled), scalar kernels, per-kernel ncu of one bf16
# layer vectorized and scalar, then torch.compile reduce-overhead (TF32 for f32).
set -u
cd "$(dirname "$0")"
for f in *.xz; do b=${f%.xz}; [ -x "$b" ] || { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$f" "$b" && chmod +x "$b"; }; done
export CUDA_PATH=/usr/local/cuda BENCH_GPU="NVIDIA H200" BENCH_DATE=2026-12-02
start=$(date +%s)
timeout 240 ./w1_bench --dtypes f32 --out $OUT/w1.jsonl > $OUT/w1_f32.log 2>&1; echo "w1 f32 rc=$? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $OUT/w1_f32.log | tail -8
BURN_COMPILE_VECTORIZE=0 BENCH_MODE=scalar-kernels timeout 40 ./w1_bench --dtypes f32 --systems burn-compile --out $OUT/w1.jsonl 2>&1 | tail -4
for mode in vec scalar; do
  v=1; [ $mode = scalar ] && v=0
  BURN_COMPILE_VECTORIZE=$v BURN_COMPILE_ATTENTION=0 timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv ./w1_bench --dtypes bf16 --systems burn-compile --infer-only --iters 2 --warmup 0 > $OUT/ncu_$mode.csv 2>/dev/null
  python3 ncu_summary.py $OUT/ncu_$mode.csv | tee $OUT/ncu_$mode.txt
done
echo "after ncu $(( $(date +%s) - start )) s"
TF32=1 DTYPES=f32 PYTHONUNBUFFERED=1 timeout 60 python3 torch_anchor.py reduce-overhead 2>&1 | grep RESULT
DTYPES=bf16 PYTHONUNBUFFERED=1 timeout 60 python3 torch_anchor.py reduce-overhead 2>&1 | grep RESULT
echo "total $(( $(date +%s) - start )) s"
