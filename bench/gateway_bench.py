#!/usr/bin/env python3
"""SGLang's model gateway (sglang-router, pinned in the venv) in front of shardlm instances of
SmolLM2-135M-Instruct, measured with streamed OpenAI chat completions (the client users have).

Three parts, each run --rounds times; every round is printed, then the medians:

  latency   one instance on one core; the same requests (concurrency 1, 64 tokens, ignore_eos)
            sent to the instance's own OpenAI API and through the gateway (gRPC to the same
            instance), alternating: time to first token and inter-token latency, p50 and p99.
            The difference is the gateway's cost.
  scaling   throughput at saturation (32 streams in flight, 64-token answers): one instance on
            core 0 behind the gateway, then two instances on cores 0 and 1 behind it. The
            gateway and this client run beside them on the same two cores.
  affinity  a multi-turn workload (12 conversations of 4 turns, each turn sending the whole
            history) through the gateway over two instances, --policy cache_aware against
            round_robin: the instances' prefix-cache hit rate (vllm:prefix_cache_hits over
            queries) and the time to first token of the later turns.

Usage:
  .venv/bin/python bench/gateway_bench.py --shardlm build/shardlm --gguf FILE [--rounds 3]
      [--parts latency,scaling,affinity] [--workdir DIR] [--json OUT]
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import harness  # noqa: E402
import sglang_gateway  # noqa: E402
import openai  # noqa: E402

START_TIMEOUT_S = 180


class Instance:
    """`serve --tp 1` of the GGUF, its worker and coordinator pinned to `cores`."""

    def __init__(self, args, workdir, name, cores, tokenizer_dir):
        env = dict(os.environ, OMP_NUM_THREADS=str(len(cores.split(","))))
        argv = ["taskset", "-c", cores, args.shardlm, "serve", "--model", args.gguf, "--tp", "1", "--port", 0,
                "--http-port", 0, "--metrics-port", 0, "--router-model-path", tokenizer_dir,
                "--kv-cache-mb", "256"]
        self.proc = harness.LoggedProcess(argv, os.path.join(workdir, name + ".log"), env=env)
        if not self.proc.wait_for(r"shardlm serving", START_TIMEOUT_S):
            raise RuntimeError("%s did not start: %s" % (name, harness.tail(self.proc.text())))
        self.grpc = "grpc://127.0.0.1:%d" % self.proc.announced_port(harness.SERVING_PORT)
        self.http = self.proc.announced_port(harness.HTTP_PORT)
        self.metrics = self.proc.announced_port(harness.METRICS_PORT)
        self.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.http, api_key="none",
                                    max_retries=0, timeout=600)
        self.model = self.client.models.list().data[0].id

    def counter(self, name):
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics, timeout=10).read().decode()
        return sum(float(m.group(1)) for m in re.finditer(r"^%s(?:\{[^}]*\})? ([0-9.e+]+)$" % re.escape(name),
                                                           text, re.M))

    def stop(self):
        self.proc.stop()


class Gateway:
    def __init__(self, args, workdir, name, workers, policy, tokenizer_dir, tiktoken_dir):
        self.proc, self.port, self.metrics = sglang_gateway.start(
            [w.grpc for w in workers], policy, tokenizer_dir, tiktoken_dir, os.path.join(workdir, name + ".log"),
            extra=["--health-check-interval-secs", "5"], timeout_s=START_TIMEOUT_S)
        self.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key="none",
                                    max_retries=0, timeout=600)
        self.model = tokenizer_dir

    def stop(self):
        self.proc.stop()


def stream(client, model, messages, max_tokens, ignore_eos=True):
    """(time to first token, [gaps between later chunks], completion tokens) of one streamed chat."""
    t0 = time.perf_counter()
    first, last, gaps, chunks = None, None, [], 0
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                                temperature=0, stream=True,
                                                extra_body={"ignore_eos": ignore_eos}):
        if not (chunk.choices and chunk.choices[0].delta.content):
            continue
        now = time.perf_counter()
        if first is None:
            first = now - t0
        else:
            gaps.append(now - last)
        last = now
        chunks += 1
    return first, gaps, chunks


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def prompts(seed, n):
    rng = random.Random(seed)
    words = ("river stone lantern harbour meadow copper violet engine signal orchard winter canvas "
             "thunder ribbon marble falcon").split()
    return ["Tell me a story about " + " ".join(rng.choice(words) for _ in range(12)) for _ in range(n)]


# --- parts ------------------------------------------------------------------------------------

def latency(ctx, rnd):
    inst, gw = ctx.one, ctx.gw_one
    out = {"direct": {"ttft": [], "itl": []}, "gateway": {"ttft": [], "itl": []}}
    for i, p in enumerate(prompts(100 + rnd, 16)):
        order = [("direct", inst.client, inst.model), ("gateway", gw.client, gw.model)]
        if i % 2:
            order.reverse()
        for name, client, model in order:
            ttft, gaps, _ = stream(client, model, [{"role": "user", "content": p}], 64)
            out[name]["ttft"].append(ttft)
            out[name]["itl"].extend(gaps)
    row = {}
    for name, d in out.items():
        row[name] = {"ttft_p50_ms": 1e3 * pct(d["ttft"], 50), "ttft_p99_ms": 1e3 * pct(d["ttft"], 99),
                     "itl_p50_ms": 1e3 * pct(d["itl"], 50), "itl_p99_ms": 1e3 * pct(d["itl"], 99)}
    for name in ("direct", "gateway"):
        r = row[name]
        print("  latency round %d %-8s TTFT p50 %6.1f p99 %6.1f ms   ITL p50 %6.2f p99 %6.2f ms"
              % (rnd, name, r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p50_ms"], r["itl_p99_ms"]), flush=True)
    return row


def saturate(gw, seed, streams=32, requests=64, max_tokens=64):
    """Completion tokens per second with `streams` in flight."""
    ps = prompts(seed, requests)
    lock = threading.Lock()
    tokens = [0]
    it = iter(ps)

    def worker():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            _, _, n = stream(gw.client, gw.model, [{"role": "user", "content": p}], max_tokens)
            with lock:
                tokens[0] += n

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tokens[0] / (time.perf_counter() - t0)


def cpu_seconds(pid, descendants=True):
    """User + system CPU seconds of `pid` and (unless not asked) its descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    children = {}
    for child, parent, _stat, _args in harness.ps_rows():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
        if descendants:
            todo.extend(children.get(p, []))
    return total


def cpu_shares(ctx, fn):
    """fn()'s result and the CPU seconds each process spent during it (per second of wall time)."""
    procs = {"gateway": ctx.gw_one.proc.proc.pid, "gateway2": ctx.gw_two.proc.proc.pid,
             "instance0": ctx.pair[0].proc.proc.pid, "instance1": ctx.pair[1].proc.proc.pid,
             "client": os.getpid()}  # the client alone: the others are its children

    def sample():
        return {k: cpu_seconds(p, descendants=k != "client") for k, p in procs.items()}

    before = sample()
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    after = sample()
    used = {k: (after[k] - before[k]) / wall for k in procs}
    return out, used


def scaling(ctx, rnd):
    one, cpu1 = cpu_shares(ctx, lambda: saturate(ctx.gw_one, 200 + rnd))
    two, cpu2 = cpu_shares(ctx, lambda: saturate(ctx.gw_two, 300 + rnd))
    print("  scaling round %d  one instance %6.1f tok/s   two instances %6.1f tok/s   ratio %.2fx"
          % (rnd, one, two, two / one), flush=True)
    for name, cpu in (("one", cpu1), ("two", cpu2)):
        print("    cores busy (%s): instances %.2f + %.2f, gateway %.2f, client %.2f"
              % (name, cpu["instance0"], cpu["instance1"], cpu["gateway"] + cpu["gateway2"], cpu["client"]),
              flush=True)
    return {"one_tok_s": one, "two_tok_s": two, "ratio": two / one, "cpu_one": cpu1, "cpu_two": cpu2}


def conversations(gw, seed, n_conv=12, turns=4):
    """Runs the multi-turn workload; the TTFTs of turns after the first."""
    rng = random.Random(seed)
    topics = [(p, rng.randrange(1 << 30)) for p in prompts(seed, n_conv)]
    ttfts = []
    lock = threading.Lock()

    def one(topic_and_tag):
        topic, tag = topic_and_tag
        msgs = [{"role": "system", "content": "You are a patient storyteller. Answer in a few sentences. "
                 "Conversation %d." % tag},
                {"role": "user", "content": topic}]
        for turn in range(turns):
            t0 = time.perf_counter()
            text = ""
            first = None
            for chunk in gw.client.chat.completions.create(model=gw.model, messages=msgs, max_tokens=32,
                                                           temperature=0, stream=True,
                                                           extra_body={"ignore_eos": True}):
                if chunk.choices and chunk.choices[0].delta.content:
                    if first is None:
                        first = time.perf_counter() - t0
                    text += chunk.choices[0].delta.content
            if turn > 0:
                with lock:
                    ttfts.append(first)
            msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": "And then what happened?"}]

    threads = [threading.Thread(target=one, args=(t,)) for t in topics]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts


def affinity(ctx, rnd):
    row = {}
    for policy in ("cache_aware", "round_robin"):
        gw = ctx.gw_policy[policy]
        before = [(i.counter("vllm:prefix_cache_hits_total"), i.counter("vllm:prefix_cache_queries_total"))
                  for i in ctx.pair]
        ttfts = conversations(gw, 400 + rnd * 2 + (policy == "round_robin"))
        after = [(i.counter("vllm:prefix_cache_hits_total"), i.counter("vllm:prefix_cache_queries_total"))
                 for i in ctx.pair]
        hits = sum(a[0] - b[0] for a, b in zip(after, before))
        queries = sum(a[1] - b[1] for a, b in zip(after, before))
        row[policy] = {"hit_rate": hits / queries if queries else float("nan"),
                       "ttft_p50_ms": 1e3 * pct(ttfts, 50), "ttft_p99_ms": 1e3 * pct(ttfts, 99)}
        r = row[policy]
        print("  affinity round %d %-11s prefix-cache hit rate %5.1f%%   later turns' TTFT p50 %6.1f p99 %6.1f ms"
              % (rnd, policy, 100 * r["hit_rate"], r["ttft_p50_ms"], r["ttft_p99_ms"]), flush=True)
    return row


def median_of(rows, path):
    vals = []
    for r in rows:
        v = r
        for k in path:
            v = v[k]
        vals.append(v)
    return statistics.median(vals)


class Ctx:
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default="latency,scaling,affinity")
    ap.add_argument("--workdir")
    ap.add_argument("--tiktoken-dir", default=os.path.join(ROOT, "third_party", "tiktoken"))
    ap.add_argument("--json")
    args = ap.parse_args()
    parts = args.parts.split(",")
    workdir = args.workdir or tempfile.mkdtemp(prefix="gateway-bench-")
    os.makedirs(workdir, exist_ok=True)
    tokenizer_dir = os.path.join(workdir, "tokenizer")
    subprocess.run([args.shardlm, "export-tokenizer", "--model", args.gguf, "--out", tokenizer_dir], check=True,
                   stdout=subprocess.DEVNULL)
    ctx = Ctx()
    started = []
    results = {"rounds": args.rounds}
    try:
        a = Instance(args, workdir, "serve-core0", "0", tokenizer_dir)
        started.append(a)
        ctx.one = a
        ctx.gw_one = Gateway(args, workdir, "gateway-one", [a], "round_robin", tokenizer_dir, args.tiktoken_dir)
        started.append(ctx.gw_one)
        if "scaling" in parts or "affinity" in parts:
            b = Instance(args, workdir, "serve-core1", "1", tokenizer_dir)
            started.append(b)
            ctx.pair = [a, b]
            ctx.gw_two = Gateway(args, workdir, "gateway-two", [a, b], "round_robin", tokenizer_dir,
                                 args.tiktoken_dir)
            started.append(ctx.gw_two)
            ctx.gw_policy = {"round_robin": ctx.gw_two}
            ctx.gw_policy["cache_aware"] = Gateway(args, workdir, "gateway-cache-aware", [a, b], "cache_aware",
                                                   tokenizer_dir, args.tiktoken_dir)
            started.append(ctx.gw_policy["cache_aware"])
        # One warm-up request per path (first-call costs are not what is measured).
        stream(a.client, a.model, [{"role": "user", "content": "Hi"}], 8)
        stream(ctx.gw_one.client, ctx.gw_one.model, [{"role": "user", "content": "Hi"}], 8)
        for part, fn in (("latency", latency), ("scaling", scaling), ("affinity", affinity)):
            if part not in parts:
                continue
            print("%s:" % part, flush=True)
            rows = [fn(ctx, r) for r in range(1, args.rounds + 1)]
            results[part] = rows
        print("medians over %d rounds:" % args.rounds)
        if "latency" in results:
            for name in ("direct", "gateway"):
                print("  latency %-8s TTFT p50 %6.1f p99 %6.1f ms   ITL p50 %6.2f p99 %6.2f ms" % (
                    name, median_of(results["latency"], [name, "ttft_p50_ms"]),
                    median_of(results["latency"], [name, "ttft_p99_ms"]),
                    median_of(results["latency"], [name, "itl_p50_ms"]),
                    median_of(results["latency"], [name, "itl_p99_ms"])))
        if "scaling" in results:
            print("  scaling one %6.1f tok/s  two %6.1f tok/s  ratio %.2fx" % (
                median_of(results["scaling"], ["one_tok_s"]), median_of(results["scaling"], ["two_tok_s"]),
                median_of(results["scaling"], ["ratio"])))
        if "affinity" in results:
            for policy in ("cache_aware", "round_robin"):
                print("  affinity %-11s hit rate %5.1f%%  TTFT p50 %6.1f p99 %6.1f ms" % (
                    policy, 100 * median_of(results["affinity"], [policy, "hit_rate"]),
                    median_of(results["affinity"], [policy, "ttft_p50_ms"]),
                    median_of(results["affinity"], [policy, "ttft_p99_ms"])))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        for p in reversed(started):
            p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
