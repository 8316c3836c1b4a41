#!/usr/bin/python3
"""Speculative decoding on the real models (docs/speculative_decoding.md): `shardlm generate` with each
proposer against plain `generate` on the same prompt, at tp 1 and 2.

  Proposers: prompt lookup (`--speculative ngram`), and a draft model (`--draft-model`): for
      Qwen2.5-Coder-1.5B its 0.5B sibling; for the others, the model itself requantized to Q4_0
      (`--draft-weights q4_0`), which proposes differently from the target now and then; with
      prompt lookup first where it matches 3 tokens (the default), and alone (the 1.5B drafted by
      the 0.5B, greedy, tp 1).
  greedy: every token id equal with and without speculation, and proposals accepted (the JSON's
      "speculation" counts), on a code-editing prompt (rewrite a given function).
  seeded: temperature 0.8, top-p 0.9 and a repetition penalty with a fixed seed: the same tokens
      (each row draws with the seed of the output index it stands for), proposals made in each run
      and accepted over the models (a small model sampled this way seldom repeats its input).
  refused: a draft with another tokenizer (SmolLM2 for Qwen) exits 2 naming --draft-model.
  served: `serve --tp 2` with each proposer on Qwen2.5-Coder-0.5B, a streamed chat completion
      through the official `openai` client equal to the same request opted out
      (`"speculative": false`), with proposals accepted on /metrics; serve exits 0.

Usage:
  python3 tests/integration/speculative_test.py --shardlm build/shardlm [--model FILE ...] \
      [--draft TARGET=DRAFT ...] [--served-model FILE --workdir DIR]
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


def proposer_flags(args, model, proposer):
    """The flags of `proposer` for `model`: ngram, draft (prompt lookup first where the last 3 tokens
    occurred before, the draft elsewhere: the default) or draft-alone (--draft-lookup-min 0)."""
    if proposer == "ngram":
        return ["--speculative", "ngram", "--speculative-tokens", "5"]
    draft = dict(d.split("=", 1) for d in args.draft or []).get(model)
    flags = ["--draft-model", draft] if draft else ["--draft-model", model, "--draft-weights", "q4_0"]
    return flags + (["--draft-lookup-min", "0"] if proposer == "draft-alone" else [])


def check(args, model, tp, sampling, name, proposer, seeded_accepted=None):
    """The same tokens with and without `proposer`, and proposals accepted. A seeded case needs
    proposals only (SmolLM2 sampled at 0.8 under a repetition penalty seldom repeats its input,
    and how often it proposes follows the measured step times): its accepted count is added to
    `seeded_accepted`, which main requires to be positive over all the models."""
    plain = generate(args, model, tp, sampling)
    spec = generate(args, model, tp, sampling + proposer_flags(args, model, proposer))
    counts = spec.get("speculation", {})
    proposed, accepted = counts.get("proposed_tokens", 0), counts.get("accepted_tokens", 0)
    if seeded_accepted is not None:
        seeded_accepted[proposer] = seeded_accepted.get(proposer, 0) + accepted
    ok = plain["token_ids"] == spec["token_ids"] and (proposed > 0 if seeded_accepted is not None else accepted > 0)
    first_diff = next((i for i, (a, b) in enumerate(zip(plain["token_ids"], spec["token_ids"])) if a != b), None)
    print(f"{'PASS' if ok else 'FAIL'} {name} {proposer} {os.path.basename(model)} tp{tp}: "
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


def refused(args, target, draft):
    """A draft with another tokenizer: exit 2, naming the flag, before any worker starts."""
    cmd = [args.shardlm, "generate", "--model", target, "--tp", "2", "--prompt", "x", "--draft-model", draft]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    ok = out.returncode == 2 and "--draft-model" in out.stderr and "tokenizer" in out.stderr
    print(f"{'PASS' if ok else 'FAIL'} refused {os.path.basename(draft)} for {os.path.basename(target)}: "
          f"exit {out.returncode}: {out.stderr.strip()[-300:]}", flush=True)
    return ok


def served(args, model, workdir, proposer):
    import openai
    srv = harness.LoggedProcess([args.shardlm, "serve", "--model", model, "--tp", 2, "--port", 0, "--http-port", 0,
                                 "--served-model-name", "coder"] + proposer_flags(args, model, proposer),
                                os.path.join(workdir, f"serve_{proposer}.log"))
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
        print(f"{'PASS' if ok else 'FAIL'} served {proposer} {os.path.basename(model)} tp2: streamed texts "
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
    ap.add_argument("--draft", action="append", help="TARGET=DRAFT: the draft model for a --model "
                    "(default: the model itself with --draft-weights q4_0)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--served-model", default="", help="also serve this model (needs the openai package)")
    ap.add_argument("--workdir", default="/tmp")
    args = ap.parse_args()
    ok = True
    seeded_accepted = {}
    models = args.model or DEFAULT_MODELS
    for model in models:
        for proposer in ("ngram", "draft"):
            for tp in (1, 2):
                ok &= check(args, model, tp, ["--temperature", "0"], "greedy", proposer)
            ok &= check(args, model, 2, ["--temperature", "0.8", "--top-p", "0.9", "--repetition-penalty", "1.1",
                                         "--seed", "11"], "seeded", proposer, seeded_accepted)
        if model in dict(d.split("=", 1) for d in args.draft or []):  # the pair the benchmark runs
            ok &= check(args, model, 1, ["--temperature", "0"], "greedy", "draft-alone")
    for proposer, accepted in seeded_accepted.items():
        print(f"{'PASS' if accepted > 0 else 'FAIL'} seeded {proposer}: {accepted} proposals accepted over the "
              f"models", flush=True)
        ok &= accepted > 0
    if len(models) >= 2:
        ok &= refused(args, models[1], models[0])
    if args.served_model:
        os.makedirs(args.workdir, exist_ok=True)
        for proposer in ("ngram", "draft"):
            ok &= served(args, args.served_model, args.workdir, proposer)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
