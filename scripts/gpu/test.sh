#!/usr/bin/env bash
# Runs ON the GPU machine after scripts/gpu/build.sh: the GPU checks of docs/gpu.md, each
# printing PASS/FAIL lines; results under $OUT (the device tool's output folder) when set.
#   scripts/gpu/test.sh [BUILD_DIR]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build-cuda}"
out="${OUT:-/tmp/shardlm-gpu-out}"
mkdir -p "$out"
# shellcheck disable=SC1091
source "$build/env.sh"
status=0
step() {  # step NAME COMMAND...: runs it, logs to $out/NAME.log, records the result
  local name=$1
  shift
  if "$@" >"$out/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name (rc $?)"; status=1; fi
  tail -5 "$out/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
# Kernels against a host reference; the unit tests (the device path, NCCL at world size 1).
step kernels "$build/tests/cuda_paged_attention_check"
# (The tokenizer, chat and coordinator tests need the npm fixtures, 0.5 GB, not carried.)
for t in kernels_test model_test worker_test collectives_test nccl_test kv_test proto_test partitioning_test cli_test; do
  step "$t" "$build/tests/$t"
done
# The engine on cuda against the NumPy reference, f32 and bf16, one rank.
step numpy_reference /usr/bin/env python3 "$here/tests/reference/check_engine.py" --shardlm "$build/shardlm" \
  --workdir /tmp/gpu-ref --device cuda --only llama,mistral,qwen2,qwen3,qwen3_tied,bf16
# Against Hugging Face transformers itself.
step transformers python3 "$here/tests/gpu/check_transformers.py" --shardlm "$build/shardlm" --workdir /tmp/gpu-hf
# A streaming Generate through `serve --device cuda` (one worker process, NCCL world size 1).
serve_stream() {
  "$build/shardlm" make-tiny-model /tmp/gpu-serve-model --arch llama --no-tokenizer --vocab-size 512 || return 1
  "$build/shardlm" serve --model /tmp/gpu-serve-model --device cuda --port 50071 &
  local pid=$! ok=1
  for _ in $(seq 60); do
    if "$build/shardlm" generate --server 127.0.0.1:50071 --prompt-ids 1,2,3 --max-new-tokens 8; then
      ok=0
      break
    fi
    sleep 1
  done
  kill "$pid"
  wait "$pid"
  return $ok
}
step serve_stream serve_stream
# CUDA graphs on and off give the same greedy tokens: 24 requests of mixed lengths, up to 16
# running (buckets 1 to 16 and padding rows), f32 and bf16, through `shardlm batch`.
cuda_graphs() {
  local m=/tmp/gpu-graphs-model dtype
  "$build/shardlm" make-tiny-model "$m" --arch qwen3 --no-tokenizer --vocab-size 512 --hidden-size 256 \
    --num-heads 4 --num-kv-heads 2 --num-layers 3 || return 1
  python3 - >/tmp/gpu-graphs-in.jsonl <<'PY'
import json
for i in range(24):
    ids = [(i * 31 + k * 7) % 512 for k in range(3 + i % 9)]
    print(json.dumps({"prompt_ids": ids, "max_new_tokens": 24 + i % 5, "ignore_eos": True, "temperature": 0}))
PY
  for dtype in f32 bf16; do
    for g in 64 0; do
      "$build/shardlm" batch --model "$m" --device cuda --dtype "$dtype" --cuda-graph-max-batch "$g" \
        --max-num-seqs 16 --input /tmp/gpu-graphs-in.jsonl --output "/tmp/gpu-graphs-$dtype-$g.jsonl" \
        --json-summary "/tmp/gpu-graphs-$dtype-$g.json" 2>"/tmp/gpu-graphs-$dtype-$g.err" || return 1
      echo "$dtype --cuda-graph-max-batch $g: $(cat "/tmp/gpu-graphs-$dtype-$g.json")"
      grep -h "CUDA graphs" "/tmp/gpu-graphs-$dtype-$g.err"
    done
    cmp "/tmp/gpu-graphs-$dtype-64.jsonl" "/tmp/gpu-graphs-$dtype-0.jsonl" || return 1
    echo "$dtype: identical outputs with and without CUDA graphs"
  done
}
step cuda_graphs cuda_graphs
exit $status
