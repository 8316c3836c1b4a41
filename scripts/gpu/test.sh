#!/usr/bin/env bash
# Runs ON the GPU machine after scripts/gpu/preflight.sh (the unpacked bundle) or build.sh (a
# build there): the GPU checks of docs/gpu.md, each bounded in time and printing PASS/FAIL/SKIP
# with the end of its log; the logs under $OUT (the device tool's output folder) when set.
#   scripts/gpu/test.sh [DIR]      (DIR: the unpacked bundle or a build folder; default
#                                   /tmp/shardlm-cuda)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-/tmp/shardlm-cuda}"
out="${OUT:-/tmp/shardlm-gpu-out}"
mkdir -p "$out"
# shellcheck disable=SC1091
source "$dir/env.sh"
bin="$dir/shardlm"
status=0
step() {  # step NAME SECONDS COMMAND...: runs it under a time limit, logs to $out/NAME.log
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" >"$out/$name.log" 2>&1
  rc=$?
  if [ $rc = 0 ]; then echo "PASS $name ($((SECONDS - t0)) s)"
  elif [ $rc = 77 ]; then echo "SKIP $name"
  else echo "FAIL $name (rc $rc, $((SECONDS - t0)) s)"; status=1; fi
  tail -4 "$out/$name.log"
}

# The kernels against a host reference: decode and prompt chunks, block tables with holes,
# sliding window, GQA 1/4/8, split and unsplit keys.
step kernels 120 "$dir/tests/cuda_paged_attention_check"
# The W4A16/W8A16 few-row product (docs/gpu_quantized.md) against a host reference, then timed on
# the Llama-3-8B shape's projections in Q4_0 and Q8_0 against a read-only bandwidth probe.
step quant_gemv 180 "$dir/tests/cuda_quant_gemv_check" --time
# The unit tests (device-path tests run on the GPU here; NCCL at world size 1).
for t in kernels_test model_test worker_test collectives_test nccl_test kv_test partitioning_test; do
  step "$t" 120 "$dir/tests/$t"
done
# The engine on cuda against the NumPy reference, f32 and bf16, one rank.
step numpy_reference 240 python3 "$here/tests/reference/check_engine.py" --shardlm "$bin" \
  --workdir /tmp/gpu-ref --device cuda --only llama,mistral,qwen2,qwen3,qwen3_tied,bf16
# Against Hugging Face transformers on the GPU (f32 and bf16).
step transformers 240 python3 "$here/tests/gpu/check_transformers.py" --shardlm "$bin" --workdir /tmp/gpu-hf
# Several ranks on one GPU (host-staged collectives): tp 2 and the uneven tp 3 against one rank.
step ranks_one_gpu 240 python3 "$here/tests/gpu/check_ranks.py" --shardlm "$bin" --workdir /tmp/gpu-ranks
# CUDA graphs on and off: the same greedy tokens up to near ties (judged by log-probs).
step cuda_graphs 240 python3 "$here/tests/gpu/check_graphs.py" --shardlm "$bin" --workdir /tmp/gpu-graphs
# Speculative decoding on the GPU (issue 49): prompt lookup and a draft model on the same device,
# with lookup first and alone, the same greedy tokens as plain decoding up to near ties.
step speculative 240 python3 "$here/tests/gpu/check_speculative.py" --shardlm "$bin" --workdir /tmp/gpu-spec
# Weights kept in GGUF blocks on the GPU (--weights q8_0/q4_0/q4_1; docs/gpu_quantized.md): decode
# steps (the few-row product) against one prompt step (the weight dequantized, cuBLAS), and against
# the CPU's kernels on the same blocks; SmolLM2's Q4_1 file too where it was carried
# (SHARDLM_GGUF: scripts/gpu/model_parts.sh joins it on the machine), as --weights q4_1 and as
# --weights blocks (its own Q4_1 and Q8_0 blocks).
step quantized_weights 360 python3 "$here/tests/gpu/check_quantized.py" --shardlm "$bin" \
  --workdir /tmp/gpu-quant ${SHARDLM_GGUF:+--gguf "$SHARDLM_GGUF"}
# SmolLM2 (the real model) against transformers on the GPU, where its file was carried
# (SHARDLM_GGUF): f32 at one rank and two on one GPU, bf16 likewise, and its blocks kept by
# --weights q4_1; transformers on the CPU in f32, through the bundle's gguf-py.
if [ -n "${SHARDLM_GGUF:-}" ]; then
  step smollm2_transformers 400 python3 "$here/tests/reference/check_hf_transformers.py" --shardlm "$bin" \
    --workdir /tmp/gpu-smollm2 --gguf "$SHARDLM_GGUF" --device cuda \
    --only smollm2_tp1,smollm2_tp2,smollm2_bf16,smollm2_bf16_tp2,smollm2_q4_1
fi
# Constrained requests (regex, choice, JSON Schema) among free ones through `serve --device cuda`,
# steps overlapped: masks computed beside the running step and sent after it (Worker.StepMasks).
step structured 240 python3 "$here/tests/gpu/check_structured.py" --shardlm "$bin" \
  --tokenizer-dir "$dir/fixtures/llama3" --workdir /tmp/gpu-structured
# A streaming Generate through `serve --device cuda`: one worker process running its collectives
# through NCCL at world size 1 (--collectives nccl) with CUDA graphs, then two ranks sharing the GPU.
serve_stream() {  # serve_stream PORT SERVE_FLAGS...
  local port=$1 pid ok=1
  shift
  "$bin" make-tiny-model /tmp/gpu-serve-model --arch llama --no-tokenizer --vocab-size 512 >/dev/null || return 1
  "$bin" serve --model /tmp/gpu-serve-model --device cuda --port "$port" "$@" &
  pid=$!
  for _ in $(seq 90); do
    if "$bin" generate --server "127.0.0.1:$port" --prompt-ids 1,2,3 --max-new-tokens 16 --ignore-eos; then
      ok=0
      break
    fi
    sleep 1
  done
  kill "$pid"
  wait "$pid"
  return $ok
}
export -f serve_stream
export bin
step serve_nccl 150 serve_stream 50071 --collectives nccl
step serve_tp2_one_gpu 150 serve_stream 50072 --tp 2 --collectives host
# A KV cache in another dtype than the compute dtype is the CPU's: on a GPU it is refused naming
# the flag (docs/gpu.md); --weights q8_0 runs there (docs/gpu_quantized.md).
storage_refused() {
  local err
  "$bin" make-tiny-model /tmp/gpu-storage-model --arch llama --no-tokenizer --vocab-size 512 >/dev/null || return 1
  if err=$("$bin" generate --model /tmp/gpu-storage-model --device cuda --dtype f32 --kv-dtype bf16 \
           --prompt-ids 1,2 --max-new-tokens 2 2>&1); then
    echo "--kv-dtype bf16 was accepted on cuda"; return 1
  fi
  echo "$err" | tail -1
  echo "$err" | grep -q -- "kv-dtype" || { echo "the error does not name kv-dtype"; return 1; }
  "$bin" generate --model /tmp/gpu-storage-model --device cuda --weights q8_0 --kv-dtype auto --prompt-ids 1,2 \
    --max-new-tokens 2
}
export -f storage_refused
step storage_refused 120 storage_refused
exit $status
