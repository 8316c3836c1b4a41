#!/bin/bash
# Overlapped steps against step-by-step (docs/scheduler.md): `shardlm serve --tp N` on the
# benchmark model with and without --no-overlap-steps, alternating, then `shardlm bench` with C
# clients back to back (16-token prompts, 64 output tokens). Prints per run:
#   tp concurrency mode output_tok/s tpot_p50_ms tpot_p90_ms
#   [TPS="1 2"] bench/overlap.sh [build/shardlm] [build/bench-model] [runs]
set -euo pipefail
bin=${1:-build/shardlm}
model=${2:-build/bench-model}
runs=${3:-3}
out=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -TERM $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$out"' EXIT
port=52100
for tp in ${TPS:-1 2}; do
  for run in $(seq 1 "$runs"); do
    for mode in overlap step; do
      extra=()
      [ "$mode" = step ] && extra=(--no-overlap-steps)
      port=$((port + 1))
      "$bin" serve --model "$model" --tp "$tp" --port $port --dtype f32 "${extra[@]}" >"$out/serve.log" 2>&1 &
      pid=$!
      for _ in $(seq 1 240); do grep -q "shardlm serving" "$out/serve.log" && break; sleep 0.5; done
      for c in 1 8; do
        "$bin" bench --server 127.0.0.1:$port --concurrency $c --num-requests $((c * 3)) --warmup $c \
          --prompt-len 16 --output-len 64 --seed $run --json >"$out/r.json"
        python3 -c "
import json; d = json.load(open('$out/r.json'))
print('$tp $c $mode', round(d['output_tokens_per_s'], 1), round(d['tpot_ms']['p50'], 2), round(d['tpot_ms']['p90'], 2))"
      done
      kill -TERM $pid; wait $pid 2>/dev/null || true
      pid=
    done
  done
done
