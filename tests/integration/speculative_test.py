#!/usr/bin/python3
"""Speculative decoding by prompt lookup on the real models (docs/speculative_decoding.md):
`shardlm generate --speculative ngram` against plain `generate` on the same prompt, at tp 1 and 2.

  greedy: every token id equal with and without speculation, and proposals accepted (the JSON's
      "speculation" counts), on a code-editing prompt (rewrite a given function) where prompt
      lookup pays.
  seeded: temperature 0.8, top-p 0.9 and a repetition penalty with a fixed seed: the same tokens
      (each row draws with the seed of the output index it stands for).
  served: `serve --tp 2 --speculative ngram` on Qwen2.5-Coder-0.5B, a streamed chat completion
      through the official `openai` client equal to the same request opted out
      (`"speculative": false`), with proposals accepted on /metrics; serve exits 0.

Usage:
  python3 tests/integration/speculative_test.py --shardlm build/shardlm [--model FILE ...] \
      [--served-model FILE --workdir DIR]
Prints one line per case; exit 0 iff every case passes.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import harness  # noqa: E402
MODELS = os.path.join(ROOT, "third_party", "models")
DEFAULT_MODELS = [os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf"),
                  os.path.join(MODELS, "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf")]

EDIT_PROMPT = """Rename the variable `total` to `acc` in this function and return the whole function.

def mean(values):
    total = 0
    count = 0
    for value in values:
        total += value
        count += 1
    if count == 0:
        return 0.0
    return total / count

Here is the function with `total` renamed to `acc`:

def mean(values):
"""


def generate(args, model, tp, extra):
    cmd = [args.shardlm, "generate", "--model", model, "--tp", str(tp), "--prompt", EDIT_PROMPT,
           "--max-new-tokens", str(args.tokens), "--ignore-eos", "--json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(args, model, tp, sampling, name):
    plain = generate(args, model, tp, sampling)
    spec = generate(args, model, tp, sampling + ["--speculative", "ngram", "--speculative-tokens", "5"])
    counts = spec.get("speculation", {})
    proposed, accepted = counts.get("proposed_tokens", 0), counts.get("accepted_tokens", 0)
    ok = plain["token_ids"] == spec["token_ids"] and accepted > 0
    first_diff = next((i for i, (a, b) in enumerate(zip(plain["token_ids"], spec["token_ids"])) if a != b), None)
    print(f"{'PASS' if ok else 'FAIL'} {name} {os.path.basename(model)} tp{tp}: "
          f"{len(spec['token_ids'])} tokens, proposed {proposed}, accepted {accepted}"
          + ("" if first_diff is None else f", first difference at token {first_diff}"), flush=True)
    return ok


def stream_text(client, tokens, extra):
    out = []
    for chunk in client.chat.completions.create(
            model="coder", temperature=0, max_tokens=tokens, stream=True, extra_body=extra,
            messages=[{"role": "user", "content": EDIT_PROMPT}]):
        if chunk.choices and chunk.choices[0].delta.content:
            out.append(chunk.choices[0].delta.content)
    return "".join(out)


def served(args, model, workdir):
    import openai
    srv = harness.LoggedProcess([args.shardlm, "serve", "--model", model, "--tp", 2, "--port", 0, "--http-port", 0,
                                 "--served-model-name", "coder", "--speculative", "ngram"],
                                os.path.join(workdir, "serve.log"))
    try:
        if not srv.wait_for("shardlm serving", 180):
            print(f"FAIL served: serve not ready: {srv.text()[-1500:]}")
            return False
        port = srv.announced_port(harness.HTTP_PORT)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
                               timeout=300)
        spec = stream_text(client, args.tokens, {})
        accepted = harness.metric_value(f"http://127.0.0.1:{port}/metrics",
                                        "shardlm_spec_decode_num_accepted_tokens_total") or 0
        plain = stream_text(client, args.tokens, {"speculative": False})
        after = harness.metric_value(f"http://127.0.0.1:{port}/metrics",
                                     "shardlm_spec_decode_num_accepted_tokens_total") or 0
        ok = spec == plain and accepted > 0 and after == accepted
        print(f"{'PASS' if ok else 'FAIL'} served {os.path.basename(model)} tp2: streamed texts "
              f"{'equal' if spec == plain else 'differ'} ({len(spec)} chars), {accepted:.0f} proposals accepted, "
              f"{after - accepted:.0f} more with the request opted out", flush=True)
    finally:
        code = srv.stop()
    if code != 0:
        print(f"FAIL served: serve exited {code}")
    return ok and code == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--model", action="append")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--served-model", default="", help="also serve this model (needs the openai package)")
    ap.add_argument("--workdir", default="/tmp")
    args = ap.parse_args()
    ok = True
    for model in args.model or DEFAULT_MODELS:
        for tp in (1, 2):
            ok &= check(args, model, tp, ["--temperature", "0"], "greedy")
        ok &= check(args, model, 2, ["--temperature", "0.8", "--top-p", "0.9", "--repetition-penalty", "1.1",
                                     "--seed", "11"], "seeded")
    if args.served_model:
        os.makedirs(args.workdir, exist_ok=True)
        ok &= served(args, args.served_model, args.workdir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
