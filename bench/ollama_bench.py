#!/usr/bin/env python3
"""What Ollama's API costs over OpenAI's on the same server: one `serve --tp 2` of SmolLM2, the same
chat (greedy, 32 tokens, streamed) asked in turns through /api/chat (NDJSON) and through
/v1/chat/completions (server-sent events), time to the first text and to the last, every round
printed, then the medians. Both front ends run on the one serving core, so any gap is the front
end's translation and framing.

  .venv/bin/python bench/ollama_bench.py --shardlm build/shardlm [--rounds 20]
"""
import argparse
import json
import os
import statistics
import sys
import time
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import harness  # noqa: E402

GGUF = os.path.join(ROOT, "third_party", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MESSAGES = [{"role": "user", "content": "Explain in a few sentences why the sky is blue."}]


def timed(port, path, body, first_marker):
    """(seconds to the first chunk carrying text, seconds to the end) of one streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    first = None
    for line in r:
        if first is None and first_marker(line):
            first = time.perf_counter() - t0
    end = time.perf_counter() - t0
    conn.close()
    return first, end


def ollama_text(line):
    try:
        return bool(json.loads(line).get("message", {}).get("content"))
    except json.JSONDecodeError:
        return False


def openai_text(line):
    if not line.startswith(b"data: {"):
        return False
    delta = json.loads(line[6:])["choices"][0]["delta"]
    return bool(delta.get("content"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--workdir", default="/tmp/ollama_bench")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    srv = harness.LoggedProcess([args.shardlm, "serve", "--model", GGUF, "--tp", 2, "--port", 0, "--http-port", 0,
                                 "--served-model-name", "smollm2"], os.path.join(args.workdir, "serve.log"))
    try:
        if not srv.wait_for("shardlm serving", 90):
            raise SystemExit("serve did not start: " + srv.text()[-800:])
        port = srv.announced_port(harness.HTTP_PORT)
        ollama = {"model": "smollm2", "messages": MESSAGES, "stream": True,
                  "options": {"temperature": 0, "num_predict": 32}}
        oa = {"model": "smollm2", "messages": MESSAGES, "stream": True, "temperature": 0, "max_tokens": 32}
        timed(port, "/api/chat", ollama, ollama_text)  # warm both paths and the prefix cache
        timed(port, "/v1/chat/completions", oa, openai_text)
        rows = {"ollama": [], "openai": []}
        for k in range(args.rounds):
            for name, path, body, marker in [("ollama", "/api/chat", ollama, ollama_text),
                                             ("openai", "/v1/chat/completions", oa, openai_text)]:
                first, end = timed(port, path, body, marker)
                rows[name].append((first, end))
                print("round %2d %-6s first text %6.1f ms, last %6.1f ms" % (k + 1, name, first * 1e3, end * 1e3))
        for name, r in rows.items():
            print("%-6s median first text %.1f ms, last %.1f ms (%d rounds)" % (
                name, statistics.median(x[0] for x in r) * 1e3, statistics.median(x[1] for x in r) * 1e3, len(r)))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
