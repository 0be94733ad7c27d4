#!/usr/bin/env bash
# On the H200 (see README.md here): the GPU suite, then W1 bf16 (Burn eager and Compiled in one
# process, vectorized kernels), then Compiled alone with scalar kernels.
set -u
cd "$(dirname "$0")"
for f in *.xz; do b=${f%.xz}; [ -x "$b" ] || { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$f" "$b" && chmod +x "$b"; }; done
export CUDA_PATH=/usr/local/cuda BENCH_GPU="NVIDIA H200" BENCH_DATE=2026-12-02
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee $OUT/gpu_info.txt
start=$(date +%s)
timeout 200 ./gpu --test-threads 1 > $OUT/gpu_suite.txt 2>&1; echo "gpu suite rc=$? in $(( $(date +%s) - start )) s" | tee -a $OUT/gpu_suite.txt
grep -E "^test |test result" $OUT/gpu_suite.txt | tail -30
timeout 330 ./w1_bench --dtypes bf16 --out $OUT/w1.jsonl > $OUT/w1_bf16.log 2>&1; echo "w1 bf16 rc=$? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $OUT/w1_bf16.log | tail -8
BURN_COMPILE_VECTORIZE=0 BENCH_MODE=scalar-kernels timeout 45 ./w1_bench --dtypes bf16 --systems burn-compile --out $OUT/w1.jsonl 2>&1 | tail -4
echo "total $(( $(date +%s) - start )) s"
