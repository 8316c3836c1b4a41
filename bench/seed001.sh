#!/bin/bash
# Seed 001's workload through `shardlm batch`: 32 requests, at most 8 running, every 8th asks for
# 100 new tokens and the rest for 10 (ignore_eos), continuous against static, at tp 1
# (in-process) and tp 2; 3 runs each, alternating. Prints: tp policy wall_s output_tok/s steps.
#   [TPS="1 2"] [DEVICE=cpu|cuda] [FLAGS="--warmup-tokens 0"] bench/seed001.sh [build/shardlm] [build/bench-model] [auto|f32|bf16]
#   (shardlm_bench writes the model)
set -euo pipefail
bin=${1:-build/shardlm}
model=${2:-build/bench-model}
dtype=${3:-auto}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(32):
        ids = [(i * 7919 + k * 104729) % 32000 for k in range(16)]
        f.write(json.dumps({"prompt_ids": ids, "max_new_tokens": 100 if i % 8 == 0 else 10,
                            "ignore_eos": True, "temperature": 0}) + "\n")
PY
for tp in ${TPS:-1 2}; do
  extra=()
  [ "$tp" = 2 ] && extra=(--tp 2)
  # shellcheck disable=SC2206  # FLAGS: extra flags for every run, split as words
  extra+=(${FLAGS:-})
  for run in 1 2 3; do
    for policy in continuous static; do
      "$bin" batch --model "$model" "${extra[@]}" --input "$work/in.jsonl" --output "$work/out.jsonl" \
        --max-num-seqs 8 --dtype "$dtype" --device "${DEVICE:-auto}" --policy $policy --json-summary "$work/sum.json" 2>/dev/null
      python3 -c "import json; d = json.load(open('$work/sum.json')); print('$tp $policy', round(d['wall_s'], 2), round(d['output_tokens_per_s'], 1), d['engine_steps'])"
    done
  done
done
