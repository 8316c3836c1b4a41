#!/bin/bash
# A latency-throughput curve: `shardlm serve` on the benchmark model at tp N, then `shardlm bench`
# at increasing Poisson rates (64-token prompts, 32 output tokens), one JSON report per rate.
#   bench/latency_curve.sh TP [build/shardlm] [build/bench-model] [OUT_DIR]
set -euo pipefail
tp=$1
bin=${2:-build/shardlm}
model=${3:-build/bench-model}
out=${4:-$(mktemp -d)}
port=$((51000 + tp))
"$bin" serve --model "$model" --tp "$tp" --port $port --max-num-seqs 32 >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q "shardlm serving" "$out/serve.log" && break; sleep 0.5; done
"$bin" bench --server 127.0.0.1:$port --num-requests 8 --prompt-len 64 --output-len 32 --json >/dev/null  # warm-up
for rate in 1 2 4 6 8 12 inf; do
  n=24
  [ "$rate" = 1 ] && n=16
  "$bin" bench --server 127.0.0.1:$port --num-requests $n --rate $rate --prompt-len 64 --output-len 32 --seed 1 \
    --json >"$out/rate_$rate.json"
  python3 -c "
import json; d = json.load(open('$out/rate_$rate.json'))
print('$rate', round(d['requests_per_s'], 2), round(d['output_tokens_per_s'], 1),
      *[round(d[k][q], 1) for k in ('ttft_ms', 'tpot_ms', 'e2e_ms') for q in ('p50', 'p99')])"
done
