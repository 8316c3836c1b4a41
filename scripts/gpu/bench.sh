#!/usr/bin/env bash
# Runs ON the GPU machine after scripts/gpu/build.sh: the Llama-3-8B-shaped benchmark of
# docs/gpu.md. The random bf16 checkpoint (16 GB) is written on the machine, not carried;
# shardlm_bench prints decode at batch 1/8/32/64 next to the HBM floor (weight bytes / the
# read bandwidth of a device-to-device copy) and cuBLAS' GEMM rate; bench/gpu_eager.py adds
# transformers' generate on the same weights; bench/seed001.sh runs seed 001's workload
# (continuous against static, issue 9's 2.5x) on one GPU. Output also in $OUT/bench.txt.
#   scripts/gpu/bench.sh [BUILD_DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build-cuda}"
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
python3 "$here/bench/gpu_eager.py" --model "$model" --batches 1,8 --steps 64 | tee -a "$out/bench.txt"
TPS=1 DEVICE=cuda "$here/bench/seed001.sh" "$build/shardlm" "$model" bf16 | tee -a "$out/bench.txt"
