#!/usr/bin/env bash
# On the H200 (see README.md here), right after suite_eager_compiled_torch.sh on the same held
# machine: Burn's own Fusion<CubeBackend<Cuda>> on W1 (its own build, w1_bench_fusion), bf16
# then f32, each in its own process; its first call autotunes Burn's fused kernels for minutes.
set -u
cd "$(dirname "$0")"
for f in w1_bench_fusion.xz; do b=${f%.xz}; [ -x "$b" ] || { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$f" "$b" && chmod +x "$b"; }; done
export CUDA_PATH=/usr/local/cuda BENCH_GPU="NVIDIA H200" BENCH_DATE=${BENCH_DATE:-$(date -u +%F)}
start=$(date +%s)
timeout ${FUSION_BF16_S:-330} ./w1_bench_fusion --dtypes bf16 --out $OUT/w1_fusion.jsonl > $OUT/w1_fusion_bf16.log 2>&1
echo "fusion bf16 rc=$? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $OUT/w1_fusion_bf16.log | tail -4
left=$(( ${FUSION_TOTAL_S:-570} - ($(date +%s) - start) ))
timeout $left ./w1_bench_fusion --dtypes f32 --out $OUT/w1_fusion.jsonl > $OUT/w1_fusion_f32.log 2>&1
echo "fusion f32 rc=$? at $(( $(date +%s) - start )) s"; grep -v "^\s*$" $OUT/w1_fusion_f32.log | tail -4
