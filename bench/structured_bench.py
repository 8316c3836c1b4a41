"""What constraints cost a batch: 8 concurrent chat requests, 4 of them constrained, against 8
unconstrained, on the real model behind `serve` (docs/structured_outputs.md, docs/benchmarks.md).

Every request generates exactly --tokens tokens (ignore_eos; the constrained ones under a regex
of more words than that, so they stay in the batch to the end), so both batches run the same
steps. Reported: the median over --rounds of the batch's wall time per step, the median of each round's
ratio (the two batches run back to back), and
the engine's own mask time per constrained sequence (p50, p99 from shardlm_constraint_mask_seconds).

  .venv/bin/python bench/structured_bench.py --shardlm build/shardlm \
      --gguf third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf [--tp 1] [--tokens 64] [--rounds 5] [--constraint regex|json] \
      [--serve-arg=--no-overlap-steps]
"""

import argparse
import concurrent.futures
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "testing"))
import harness  # noqa: E402

import openai  # noqa: E402

REGEX = "( [a-z]{1,8}){200}"
# A JSON document longer than any run here: an object holding many short strings.
SCHEMA = {"type": "object", "required": ["lines"],
          "properties": {"lines": {"type": "array", "minItems": 200, "items": {"type": "string", "maxLength": 40}}}}


def batch(client, constrained, tokens, kind):
    def one(i):
        extra = {"ignore_eos": True}
        if i < constrained and kind == "regex":
            extra["guided_regex"] = REGEX
        if i < constrained and kind == "json":
            extra["guided_json"] = SCHEMA
        r = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Tell me a long story about the sea, number %d." % i}],
            max_tokens=tokens, temperature=0.7, seed=i, extra_body=extra)
        return r.usage.completion_tokens
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(one, range(8)))
    return (time.monotonic() - t0) / tokens, counts


def mask_quantiles(metrics_url):
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    buckets = [(float(le) if le != "+Inf" else float("inf"), float(n)) for le, n in
               re.findall(r'^shardlm_constraint_mask_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)]
    total = buckets[-1][1] if buckets else 0
    out = []
    for q in (0.5, 0.99):
        out.append(next((le for le, n in buckets if n >= q * total), float("nan")) if total else float("nan"))
    return out, int(total)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--constraint", choices=["regex", "json"], default="regex",
                    help="the constrained requests' constraint: REGEX or SCHEMA above")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for serve (repeatable), e.g. --serve-arg=--no-overlap-steps")
    args = ap.parse_args()
    port, http, metrics = harness.free_port(), harness.free_port(), harness.free_port()
    log = os.path.join(tempfile.mkdtemp(prefix="structured-bench-"), "serve.log")
    proc = harness.LoggedProcess([args.shardlm, "serve", "--model", args.gguf, "--served-model-name", "m",
                                  "--tp", args.tp, "--port", port, "--http-port", http, "--metrics-port", metrics]
                                 + args.serve_arg,
                                 log)
    try:
        if not proc.wait_for(r"shardlm serving", 180):
            print("serve did not start:\n" + harness.tail(proc.text()), file=sys.stderr)
            return 1
        client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % http, api_key="none", max_retries=0)
        batch(client, 4, 8, args.constraint)  # warm-up: the compiler's first build, caches
        plain, mixed = [], []
        for _ in range(args.rounds):
            for runs, constrained in ((plain, 0), (mixed, 4)):
                seconds, counts = batch(client, constrained, args.tokens, args.constraint)
                if counts != [args.tokens] * 8:
                    print("a request ended early (%s tokens): the batches would differ" % counts, file=sys.stderr)
                    return 1
                runs.append(seconds)
        (p50, p99), n = mask_quantiles("http://127.0.0.1:%d/metrics" % metrics)
        a, b = statistics.median(plain), statistics.median(mixed)
        # Pair by pair (each pair ran back to back), so that the machine's drift cancels.
        ratio = statistics.median(m / p for p, m in zip(plain, mixed))
        print("| batch of 8, tp %d, %d tokens each | ms per step (median of %d) |" % (args.tp, args.tokens,
                                                                                    args.rounds))
        print("|---|---|")
        print("| 8 unconstrained | %.2f |" % (a * 1e3))
        print("| 4 constrained (%s) + 4 unconstrained | %.2f (%.3fx the pair before it, median) |"
              % (args.constraint, b * 1e3, ratio))
        print("mask time per constrained sequence: p50 <= %.0f us, p99 <= %.0f us (%d masks; bucket bounds)"
              % (p50 * 1e6, p99 * 1e6, n))
        return 0
    finally:
        proc.stop()


if __name__ == "__main__":
    sys.exit(main())
