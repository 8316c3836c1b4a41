#!/usr/bin/env python3
"""Several tensor-parallel ranks on one GPU equal one rank, by numbers.

Usage (scripts/gpu/test.sh runs it on the GPU machine):
    python3 tests/gpu/check_ranks.py --shardlm BUNDLE/shardlm --workdir /tmp/ranks

NCCL refuses two ranks on one GPU; `--collectives host` stages the CPU collectives through host
memory instead, so worker processes sharing the one GPU run the sharded weights, the sharded KV
cache, uneven shards (6 query heads over 4 ranks: 2, 2, 1, 1) and the step protocol on it. For
tp 2, 3 and 4 against tp 1 on the same GPU, f32:
  - score: per-token log-probs of a 40-token prompt within --tol of one rank's;
  - generate: 24 greedy tokens equal one rank's, except at a near tie (the two tokens' eager
    log-probs within --tie-tol), which is reported and accepted.
Exit 0 when every case passes.
"""
import argparse
import os
import subprocess
import sys

from engine_calls import judge_parting, run_json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tps", default="2,3,4")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--tie-tol", type=float, default=1e-3)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.join(args.workdir, "model")
    subprocess.run([args.shardlm, "make-tiny-model", model, "--arch", "llama", "--no-tokenizer",
                    "--vocab-size", "512", "--hidden-size", "192", "--num-heads", "6",
                    "--num-kv-heads", "2", "--intermediate-size", "320", "--num-layers", "2",
                    "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    prompt = ",".join(str((i * 37 + 11) % 512) for i in range(40))
    common = ["--model", model, "--device", args.device, "--dtype", "f32", "--json"]

    def score(ids, tp):
        extra = ["--tp", tp, "--collectives", "host"] if tp > 1 else []
        return run_json([args.shardlm, "score", "--prompt-ids", ids] + common + extra)["scores"]

    def generate(tp):
        extra = ["--tp", tp, "--collectives", "host"] if tp > 1 else []
        return run_json([args.shardlm, "generate", "--prompt-ids", prompt, "--max-new-tokens", 24,
                         "--temperature", 0, "--ignore-eos"] + common + extra)["token_ids"]

    base_scores, base_tokens = score(prompt, 1), generate(1)
    failures = 0
    for tp in [int(t) for t in args.tps.split(",")]:
        scores = score(prompt, tp)
        diff = max(abs(a - b) for a, b in zip(base_scores[1:], scores[1:]))
        ok = diff <= args.tol
        failures += not ok
        print("tp %d score: max |diff| %.3g against one rank (tolerance %g): %s"
              % (tp, diff, args.tol, "ok" if ok else "FAIL"))
        tokens = generate(tp)
        verdict = judge_parting(args.shardlm, model, args.device, "f32", [int(t) for t in prompt.split(",")],
                                base_tokens, tokens, args.tie_tol, "tp %d generate" % tp, ("one rank", "tp %d" % tp))
        if verdict == "same":
            print("tp %d generate: %d tokens equal one rank's" % (tp, len(tokens)))
        failures += verdict == "fail"
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
