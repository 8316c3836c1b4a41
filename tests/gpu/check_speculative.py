#!/usr/bin/env python3
"""Speculative decoding on the GPU: the same greedy tokens with each proposer as without.

Usage (scripts/gpu/test.sh runs it on the GPU machine; ctest runs it with --device cpu):
    python3 tests/gpu/check_speculative.py --shardlm BUNDLE/shardlm --workdir /tmp/spec

A tiny qwen3 checkpoint, 12 requests with prompts that repeat themselves, greedy, through
`shardlm batch --max-num-seqs 1` (speculation is on at batch 1 for every proposer), in f32 and
bf16: plainly, then with prompt lookup (`--speculative ngram`), with a draft model on the same
device (`--draft-model`: the model itself, whose proposals its target mostly accepts, and another
seed's weights, whose proposals it mostly rejects), and with that draft alone
(`--draft-lookup-min 0`). Each proposer must have proposed and had proposals accepted (the batch
summary's counts). A verifying step scores several rows of a sequence at once where plain
decoding scores one, so their sums may round differently: where a run's tokens part from plain
decoding's, the position is scored eagerly (`shardlm score`) with each of the two tokens, and a
gap within --tie-tol (f32) or --bf16-tie-tol (bf16) is a near tie, reported and accepted;
otherwise it fails. Exit 0 when every request agrees up to near ties.
"""
import argparse
import json
import os
import sys

from engine_calls import judge_parting, run, tiny_qwen3


def batch(args, model, dtype, inp, name, flags):
    """Runs `shardlm batch` with `flags`; returns each request's tokens and the summary."""
    out = os.path.join(args.workdir, "out-%s-%s.jsonl" % (dtype, name))
    summary = os.path.join(args.workdir, "summary-%s-%s.json" % (dtype, name))
    run([args.shardlm, "batch", "--model", model, "--device", args.device, "--dtype", dtype,
         "--max-num-seqs", 1, "--input", inp, "--output", out, "--json-summary", summary] + flags)
    with open(out) as f:
        tokens = {}
        for line in f:
            row = json.loads(line)
            tokens[row["index"]] = row["token_ids"]
    with open(summary) as f:
        return [tokens[i] for i in sorted(tokens)], json.load(f)


def compare(args, model, dtype, tol, requests, plain, spec, name):
    """Failures and near ties where `spec`'s tokens part from `plain`'s."""
    verdicts = [judge_parting(args.shardlm, model, args.device, dtype, requests[i]["prompt_ids"], a, b, tol,
                              "%s %s request %d" % (dtype, name, i), ("plain", "speculating"))
                for i, (a, b) in enumerate(zip(plain, spec))]
    return verdicts.count("fail"), verdicts.count("tie")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tie-tol", type=float, default=1e-3, help="f32 near tie, in log-prob")
    ap.add_argument("--bf16-tie-tol", type=float, default=0.1, help="bf16 near tie, in log-prob")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model, other = os.path.join(args.workdir, "model"), os.path.join(args.workdir, "other")
    tiny_qwen3(args.shardlm, model, 0)
    tiny_qwen3(args.shardlm, other, 1)
    requests = []
    for i in range(12):
        unit = [(i * 31 + k * 7) % 512 for k in range(3 + i % 4)]
        requests.append({"prompt_ids": unit * 4, "max_new_tokens": 32, "ignore_eos": True, "temperature": 0})
    inp = os.path.join(args.workdir, "in.jsonl")
    with open(inp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in requests)
    proposers = {
        "ngram": ["--speculative", "ngram"],
        "draft-self": ["--draft-model", model],
        "draft-other": ["--draft-model", other],
        "draft-self-alone": ["--draft-model", model, "--draft-lookup-min", 0],
    }
    failures, ties = 0, 0
    for dtype, tol in (("f32", args.tie_tol), ("bf16", args.bf16_tie_tol)):
        plain, _ = batch(args, model, dtype, inp, "plain", [])
        for name, flags in proposers.items():
            spec, summary = batch(args, model, dtype, inp, name, flags)
            counts = summary.get("speculation", {})
            proposed, accepted = counts.get("proposed_tokens", 0), counts.get("accepted_tokens", 0)
            f, t = compare(args, model, dtype, tol, requests, plain, spec, name)
            if proposed == 0 or accepted == 0:
                print("%s %s: proposed %d, accepted %d: FAIL (nothing was verified)" % (dtype, name, proposed,
                                                                                       accepted))
                f += 1
            print("%s %s: %d of %d requests identical to plain decoding, %d proposed, %d accepted, "
                  "%d by lookup" % (dtype, name, sum(a == b for a, b in zip(plain, spec)), len(requests),
                                    proposed, accepted, counts.get("lookup_proposed_tokens", 0)))
            failures += f
            ties += t
    print("speculative: %d failures, %d near ties" % (failures, ties))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
