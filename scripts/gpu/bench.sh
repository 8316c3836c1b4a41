#!/usr/bin/env bash
# Runs ON the GPU machine after scripts/gpu/preflight.sh (or build.sh): the Llama-3-8B-shaped benchmark of
# docs/gpu.md. The random bf16 checkpoint (16 GB) is written on the machine, not carried;
# shardlm_bench prints decode at batch 1/8/32/64 next to the HBM floor (weight bytes / the
# read bandwidth of a device-to-device copy) and cuBLAS' GEMM rate; bench/gpu_transformers.py adds
# transformers' generate on the same weights, prompt and steps (eager, static cache, and static cache
# under torch.compile's CUDA graphs, each labelled); bench/seed001.sh runs seed 001's workload
# (continuous against static, issue 9's 2.5x) on one GPU when SEED001=1. Output also in
# $OUT/bench.txt. QUICK=1 leaves out what an earlier run measured and nothing since changed:
# graphs off, the long contexts, transformers at batch 8.
#   scripts/gpu/bench.sh [DIR]     (the unpacked bundle or a build folder; default /tmp/shardlm-cuda)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-/tmp/shardlm-cuda}"
out="${OUT:-/tmp/shardlm-gpu-out}"
model="${BENCH_MODEL:-/tmp/llama3-8b-bench}"
mkdir -p "$out"
# shellcheck disable=SC1091
source "$build/env.sh"
"$build/shardlm_bench" --model-dir "$model" --shape llama3-8b --device cuda --dtypes bf16 \
  --batches 1,8,32,64 --decode-steps 64 --kv-cache-mb 16384 | tee "$out/bench.txt"
quick="${QUICK:-0}"
# The same shape kept as Q4_0 blocks on the GPU (--weights q4_0: quantized at load on the host,
# the few-row product over the blocks; docs/gpu_quantized.md) against its own floor (the planes'
# bytes): issue 50's target is 1.4x at batch 1.
"$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --weights q4_0 --batches 1,8 \
  --decode-steps 64 --kv-cache-mb 16384 | tee -a "$out/bench.txt"
# And as Q4_K, the format of most files people download (4.63 bits a weight in the planes), at batch 1.
"$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --weights q4_k --batches 1 \
  --decode-steps 64 --kv-cache-mb 16384 | tee -a "$out/bench.txt"
# What the few-row product kernel saves (kernels/cuda/gemv.h), and where cuBLAS takes over: the
# kernel for every batch it has, then cuBLAS alone.
for rows in 8 0; do
  "$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,2,3,4,6,8 \
    --decode-steps 64 --kv-cache-mb 16384 --cuda-gemv-max-rows "$rows" | tee -a "$out/bench.txt"
done
# The same decode without CUDA graphs, for the graphs' share.
if [ "$quick" != 1 ]; then
  "$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-steps 64 \
    --kv-cache-mb 16384 --cuda-graph-max-batch 0 | tee -a "$out/bench.txt"
fi
# What the fused element-wise kernels save (kernels/cuda/elementwise.h): the same decode with
# ATen's operators instead.
"$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-steps 64 \
  --kv-cache-mb 16384 --no-cuda-fused | tee -a "$out/bench.txt"
# Decode over 4096-token contexts, with split keys and without (kernels/cuda/paged_attention.h).
if [ "$quick" != 1 ]; then
  "$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-context 4096 \
    --decode-steps 64 --kv-cache-mb 16384 | tee -a "$out/bench.txt"
  "$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-context 4096 \
    --decode-steps 64 --kv-cache-mb 16384 --cuda-attention-max-splits 1 | tee -a "$out/bench.txt"
fi
eager_batches=1,8
[ "$quick" = 1 ] && eager_batches=1
python3 "$here/bench/gpu_transformers.py" --model "$model" --batches "$eager_batches" --steps 64 --prompt-len 16 \
  | tee -a "$out/bench.txt"
if [ "${SEED001:-0}" = 1 ]; then
  TPS=1 DEVICE=cuda "$here/bench/seed001.sh" "$build/shardlm" "$model" bf16 | tee -a "$out/bench.txt"
fi
