#!/usr/bin/env bash
# On the H200 (see README.md here): the GPU suite (Compiled<Cuda> against eager), then W1 with
# Burn eager CubeBackend<Cuda> and Compiled<CubeBackend<Cuda>> (f32, then bf16; one dtype per
# process, both systems in it), then torch.compile reduce-overhead (TF32 for f32).
set -u
cd "$(dirname "$0")"
for f in *.xz; do b=${f%.xz}; [ -x "$b" ] || { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$f" "$b" && chmod +x "$b"; }; done
export CUDA_PATH=/usr/local/cuda BENCH_GPU="NVIDIA H200" BENCH_DATE=${BENCH_DATE:-$(date -u +%F)}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee $OUT/gpu_info.txt
start=$(date +%s)
timeout 150 ./gpu --test-threads 1 > $OUT/gpu_suite.txt 2>&1; echo "gpu suite rc=$? at $(( $(date +%s) - start )) s" | tee -a $OUT/gpu_suite.txt
grep -E "^test |test result|panicked" $OUT/gpu_suite.txt | tail -30
for dt in f32 bf16; do
  timeout 200 ./w1_bench --dtypes $dt --out $OUT/w1.jsonl > $OUT/w1_$dt.log 2>&1
  echo "w1 $dt rc=$? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $OUT/w1_$dt.log | tail -6
done
TF32=1 DTYPES=f32 PYTHONUNBUFFERED=1 timeout 50 python3 torch_anchor.py reduce-overhead > $OUT/torch.log 2>&1
DTYPES=bf16 PYTHONUNBUFFERED=1 timeout 50 python3 torch_anchor.py reduce-overhead >> $OUT/torch.log 2>&1
grep RESULT $OUT/torch.log; echo "total $(( $(date +%s) - start )) s"
