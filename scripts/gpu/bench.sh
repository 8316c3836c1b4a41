#!/usr/bin/env bash
# Runs ON the GPU machine after scripts/gpu/preflight.sh (or build.sh): the Llama-3-8B-shaped benchmark of
# docs/gpu.md. The random bf16 checkpoint (16 GB) is written on the machine, not carried;
# shardlm_bench prints decode at batch 1/8/32/64 next to the HBM floor (weight bytes / the
# read bandwidth of a device-to-device copy) and cuBLAS' GEMM rate; bench/gpu_eager.py adds
# transformers' generate on the same weights; bench/seed001.sh runs seed 001's workload
# (continuous against static, issue 9's 2.5x) on one GPU when SEED001=1. Output also in
# $OUT/bench.txt.
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
# The same decode without CUDA graphs, for the graphs' share.
"$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-steps 64 \
  --kv-cache-mb 16384 --cuda-graph-max-batch 0 | tee -a "$out/bench.txt"
# What the fused element-wise kernels save (kernels/cuda/elementwise.h): the same decode with
# ATen's operators instead.
"$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-steps 64 \
  --kv-cache-mb 16384 --no-cuda-fused | tee -a "$out/bench.txt"
# Decode over 4096-token contexts, with split keys and without (kernels/cuda/paged_attention.h).
"$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-context 4096 \
  --decode-steps 64 --kv-cache-mb 16384 | tee -a "$out/bench.txt"
"$build/shardlm_bench" --model-dir "$model" --device cuda --dtypes bf16 --batches 1,8 --decode-context 4096 \
  --decode-steps 64 --kv-cache-mb 16384 --cuda-attention-max-splits 1 | tee -a "$out/bench.txt"
python3 "$here/bench/gpu_eager.py" --model "$model" --batches 1,8 --steps 64 | tee -a "$out/bench.txt"
if [ "${SEED001:-0}" = 1 ]; then
  TPS=1 DEVICE=cuda "$here/bench/seed001.sh" "$build/shardlm" "$model" bf16 | tee -a "$out/bench.txt"
fi
