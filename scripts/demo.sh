#!/usr/bin/env bash
# The README's main job: the real model, SmolLM2-135M-Instruct (a Q4_1 GGUF fetched by
# scripts/fetch_model.sh), served by `shardlm serve --tp 2` (a coordinator and two
# tensor-parallel worker processes; its 9 query heads split 5 and 4), a generation streamed
# through the public gRPC API, then a chat completion streamed through the OpenAI-compatible
# HTTP API with the model's own chat template (docs/openai.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${DEMO_MODEL:-third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf}
PORT=${DEMO_PORT:-50051}
HTTP_PORT=${DEMO_HTTP_PORT:-8000}

[ -f "$MODEL" ] || bash scripts/fetch_model.sh

# The server's log (one line per call, the workers' lines too) goes to a file so that it
# does not interleave with the streamed text.
LOG=${DEMO_LOG:-$BUILD/demo-serve.log}
"$BUILD/shardlm" serve --model "$MODEL" --tp 2 --port "$PORT" --http-port "$HTTP_PORT" \
  --served-model-name smollm2 >"$LOG" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true; echo "--- server log: $LOG ---"; tail -n 4 "$LOG"' EXIT

# Wait until the server answers (workers load their shards first).
for _ in $(seq 1 150); do
  if echo '{"text": "ping"}' | "$BUILD/shardlm" tokenize --server "127.0.0.1:$PORT" >/dev/null 2>&1; then break; fi
  sleep 0.2
done

# gRPC's Generate takes the prompt text as it is, so it is written here in the model's chat
# format (ChatML); the HTTP API below renders the model's template itself.
echo "--- streaming from shardlm serve --tp 2 over gRPC (SmolLM2-135M-Instruct, greedy) ---"
prompt=$'<|im_start|>user\nWhat is the capital of France, and what is it famous for?<|im_end|>\n<|im_start|>assistant\n'
"$BUILD/shardlm" generate --server "127.0.0.1:$PORT" --prompt "$prompt" --max-new-tokens 64 --temperature 0

echo
echo "--- the same server over OpenAI's HTTP API: POST /v1/chat/completions, stream: true ---"
curl -sN "http://127.0.0.1:$HTTP_PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "smollm2", "messages": [{"role": "user", "content": "Give me three tips for staying healthy."}],
       "max_tokens": 96, "temperature": 0.2, "seed": 7, "stream": true}' |
  python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("data: {"):
        for choice in json.loads(line[6:])["choices"]:
            sys.stdout.write(choice["delta"].get("content", ""))
            sys.stdout.flush()
print()'
