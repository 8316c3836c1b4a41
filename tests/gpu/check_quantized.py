#!/usr/bin/env python3
"""Weights kept in GGUF blocks on the GPU (docs/gpu_quantized.md): the few-row product against the
dequantized path, and both against the CPU's kernels on the same blocks.

Usage (scripts/gpu/test.sh runs it on the GPU machine; ctest runs it with --device cpu):
    python3 tests/gpu/check_quantized.py --shardlm BUNDLE/shardlm --workdir /tmp/quant [--gguf FILE]

A tiny llama checkpoint in f32, quantized at load to each of --weights q8_0, q4_0, q4_1, q4_k, q5_k
and q6_k (the host's quantizer: the same blocks on either device; its rows are whole K-quant
super-blocks), and --gguf's file (SmolLM2's, Q4_1 but for
its Q8_0 embedding, which --weights q4_1 requantizes for the tied head, as on the CPU) where
given, with its format and with --weights blocks (the file's own blocks: Q4_1 and a Q8_0 head).
For each, on --device, in f32:
  - `generate` (greedy, 24 tokens): each decode step has one row, the few-row product over the
    blocks (kernels/cuda/quant_gemv.h);
  - `score` of the prompt (over 64 tokens) and those tokens: one step of more rows than the few-row
    product takes, the weight dequantized for the call and multiplied by cuBLAS.
Their log-probs of the generated tokens agree within --same-tol (two orders of summing the same f32
products). `score` on the CPU with the same --weights (whose kernels round the activations to int8
per 32) agrees on average within --cpu-mean-tol (docs/quantized_weights.md's mean bound for
SmolLM2's blocks against the same file dequantized). `score` with --weights dense (the weights
before quantizing, or the file's blocks dequantized) is reported: the quantization's own error.
On --device cpu the first two are the CPU's kernel at one row and at many, which give the same
sums whatever rows are batched together, and the second is the same run. Exit 0 when every
comparison holds.
"""
import argparse
import json
import os
import sys

from engine_calls import run, run_json

NEW_TOKENS = 24
TINY_PROMPT = [1 + (i * 37) % 500 for i in range(72)]
GGUF_PROMPT = ("def parse_ranges(spec):\n    result = []\n    for part in spec.split(\",\"):\n"
               "        part = part.strip()\n        if not part:\n            continue\n"
               "        if \"-\" in part:\n            start, end = part.split(\"-\", 1)\n"
               "            for value in range(int(start), int(end) + 1):\n                result.append(value)\n"
               "        else:\n            result.append(int(part))\n    return sorted(set(result))\n\n\n"
               "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")


def generate(args, model, device, weights, prompt):
    """Greedy tokens and their log-probs."""
    out = run_json([args.shardlm, "generate", "--model", model, "--device", device, "--dtype", "f32",
                    "--weights", weights, "--prompt-ids", ",".join(map(str, prompt)), "--temperature", 0,
                    "--max-new-tokens", NEW_TOKENS, "--ignore-eos", "--json"])
    return out["token_ids"], out["logprobs"]


def score(args, model, device, weights, ids, skip):
    """The log-probs of ids' tokens after the first `skip`, in one prompt step."""
    out = run_json([args.shardlm, "score", "--model", model, "--device", device, "--dtype", "f32",
                    "--weights", weights, "--prompt-ids", ",".join(map(str, ids)), "--json"])
    return out["scores"][skip:]


def gaps(a, b):
    """The largest and the mean absolute difference."""
    d = [abs(x - y) for x, y in zip(a, b)]
    return max(d), sum(d) / len(d)


def check(args, model, weights, prompt):
    """Failures (0 or 1) of one model and weight format."""
    tokens, gen_lp = generate(args, model, args.device, weights, prompt)
    ids = prompt + tokens
    one_step = score(args, model, args.device, weights, ids, len(prompt))
    cpu = score(args, model, "cpu", weights, ids, len(prompt))
    dense = score(args, model, args.device, "dense", ids, len(prompt))
    same, _ = gaps(gen_lp, one_step)
    cpu_max, cpu_mean = gaps(one_step, cpu)
    dense_max, dense_mean = gaps(one_step, dense)
    ok = same <= args.same_tol and cpu_mean <= args.cpu_mean_tol
    print("%s %s (%d prompt tokens): decode against one step %.1e (within %.0e); against the CPU's kernels "
          "mean %.3f (within %.2f), max %.3f; against --weights dense mean %.3f, max %.3f: %s"
          % (os.path.basename(model), weights, len(prompt), same, args.same_tol, cpu_mean, args.cpu_mean_tol,
             cpu_max, dense_mean, dense_max, "ok" if ok else "FAIL"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gguf", help="a GGUF of Q4_1, Q4_0 or Q8_0 blocks (SmolLM2's), checked as it is")
    ap.add_argument("--same-tol", type=float, default=2e-3)
    ap.add_argument("--cpu-mean-tol", type=float, default=0.15)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    tiny = os.path.join(args.workdir, "tiny")
    run([args.shardlm, "make-tiny-model", tiny, "--arch", "llama", "--no-tokenizer", "--vocab-size", "512",
         "--hidden-size", "256", "--intermediate-size", "512", "--num-layers", "2", "--seed", "5"])
    failures = sum(check(args, tiny, w, TINY_PROMPT) for w in ("q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"))
    if args.gguf:
        name = os.path.basename(args.gguf).lower()
        fmt = next((f for f in ("q8_0", "q4_0", "q4_1") if f in name), None)
        if fmt is None:
            sys.exit("--gguf %s: its name does not say Q8_0, Q4_0 or Q4_1" % args.gguf)
        line = run([args.shardlm, "tokenize", "--model", args.gguf], input_text=json.dumps({"text": GGUF_PROMPT}))
        ids = json.loads(line.stdout)["ids"]
        if len(ids) <= 64:
            sys.exit("the GGUF's prompt is %d tokens: it must be over 64 to take the dequantized path" % len(ids))
        failures += check(args, args.gguf, fmt, ids)
        # --weights blocks: the file's own formats kept (its Q8_0 head too, not requantized).
        failures += check(args, args.gguf, "blocks", ids)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
