#!/usr/bin/env bash
# The README's main job: a tiny model with the real Llama-3 tokenizer, served
# by `shardlm serve --tp 2` (a coordinator and two tensor-parallel worker
# processes), and a generation streamed through the public gRPC API, then a chat completion
# streamed through the OpenAI-compatible HTTP API (docs/openai.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${DEMO_MODEL:-$BUILD/demo-model}
PORT=${DEMO_PORT:-50051}
HTTP_PORT=${DEMO_HTTP_PORT:-8000}

"$BUILD/shardlm" make-tiny-model "$MODEL" --arch llama --tokenizer llama3 --seed 1 \
  --hidden-size 256 --num-layers 4 --num-heads 8 --num-kv-heads 4 --intermediate-size 512

# The server's log (one line per call, the workers' lines too) goes to a file so that it
# does not interleave with the streamed text.
LOG=${DEMO_LOG:-$BUILD/demo-serve.log}
"$BUILD/shardlm" serve --model "$MODEL" --tp 2 --port "$PORT" --http-port "$HTTP_PORT" \
  --served-model-name demo >"$LOG" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true; echo "--- server log: $LOG ---"; tail -n 4 "$LOG"' EXIT

# Wait until the server answers (workers load their shards first).
for _ in $(seq 1 100); do
  if echo '{"text": "ping"}' | "$BUILD/shardlm" tokenize --server "127.0.0.1:$PORT" >/dev/null 2>&1; then break; fi
  sleep 0.2
done

echo "--- streaming from shardlm serve --tp 2 (random weights: expect gibberish) ---"
"$BUILD/shardlm" generate --server "127.0.0.1:$PORT" --prompt "The capital of France is" \
  --max-new-tokens 32 --temperature 0.8 --top-p 0.95 --seed 7

echo
echo "--- the same server over OpenAI's HTTP API: POST /v1/chat/completions, stream: true ---"
curl -sN "http://127.0.0.1:$HTTP_PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "demo", "messages": [{"role": "user", "content": "Name a capital city."}],
       "max_tokens": 24, "temperature": 0.8, "seed": 7, "stream": true}' |
  python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("data: {"):
        for choice in json.loads(line[6:])["choices"]:
            sys.stdout.write(choice["delta"].get("content", ""))
            sys.stdout.flush()
print()'
