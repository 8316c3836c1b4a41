#!/usr/bin/env python3
"""The stateful APIs' cost (issue 46, docs/stateful_apis.md section 11), with the official `openai`
client against `serve --tp 1` of SmolLM2-135M-Instruct (the Q4_1 GGUF). Every round is printed,
then the medians.

  turns   a conversation of a ~2,000-token history and then 20 turns, each a short user message
          and a 16-token reply (temperature 0, so every path holds the same history): time to
          first token of each turn
            thread      a streamed run on a thread (its KV kept between turns as a handle)
            chain       a streamed response with previous_response_id (likewise)
            chat+cache  chat completions resending the whole history, prefix cache on (what
                        vLLM and SGLang users do)
            chat        the same with --no-prefix-caching (a second serve)
            thread-nc   the thread again on the serve without the prefix cache: only the
                        handle reuses the history
            floor       shardlm.v1 Generate after the previous turn's ChunkResult handle, sending
                        only as many new tokens as the thread's turn prefilled (prompt minus
                        cached), the conversation as long: what a turn's new tokens cost, the
                        target (bench/stateful_floor.py)
            new-only    /v1/completions of just those new tokens with no history at all
  store   the state database holding about 100 threads, then about 10,000 (each with a message):
          the medians of 30 calls of a messages list and a runs list (full pages of 20, the
          same thread at both sizes) and of a run's start (a new one-message thread, the run
          created streamed, to thread.run.in_progress); on SQLite, and on PostgreSQL when
          Debian's postgresql is installed (tests/testing/postgres_server.py)

Usage:
  .venv/bin/python bench/stateful_bench.py --shardlm build/shardlm \\
      --gguf third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf [--rounds 3] [--parts turns,store]
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import harness  # noqa: E402
import postgres_server  # noqa: E402
import openai  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)  # client.beta.*: the clients still call it
START_TIMEOUT_S = 180
TURNS = 20
REPLY_TOKENS = 16
HISTORY = ("The harbour committee met on a grey Tuesday morning to discuss the state of the piers, the "
           "price of rope, and whether the lighthouse keeper should be given a second assistant. ")
QUESTIONS = ["What did they decide about the %s?" % w for w in
             ("piers", "rope", "keeper", "assistant", "budget", "boats", "nets", "storm", "tide", "gulls",
              "harbour", "lamp", "oil", "bell", "fog", "pier", "crane", "quay", "dock", "anchor")]


class Serve:
    def __init__(self, args, workdir, name, *extra):
        argv = [args.shardlm, "serve", "--model", args.gguf, "--tp", "1", "--port", 0, "--http-port", 0,
                "--kv-cache-mb", "512"] + list(extra)
        self.proc = harness.LoggedProcess(argv, os.path.join(workdir, name + ".log"))
        if not self.proc.wait_for(r"shardlm serving", START_TIMEOUT_S):
            raise RuntimeError("%s did not start: %s" % (name, harness.tail(self.proc.text())))
        base = "http://127.0.0.1:%d/v1" % self.proc.announced_port(harness.HTTP_PORT)
        self.grpc = "127.0.0.1:%d" % self.proc.announced_port(harness.SERVING_PORT)
        self.client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
        self.model = self.client.models.list().data[0].id

    def stop(self):
        self.proc.stop()


def first_token(stream, is_text):
    """Seconds from now to the first event `is_text` accepts; the stream is read to its end."""
    t0 = time.perf_counter()
    first = None
    for event in stream:
        if first is None and is_text(event):
            first = time.perf_counter() - t0
    return first


def thread_turns(srv, history):
    oa = srv.client
    a = oa.beta.assistants.create(model=srv.model, temperature=0)
    t = oa.beta.threads.create(messages=[{"role": "user", "content": history}])
    oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=REPLY_TOKENS,
                                         poll_interval_ms=20)
    out = []
    for q in QUESTIONS[:TURNS]:
        oa.beta.threads.messages.create(t.id, role="user", content=q)
        t0 = time.perf_counter()
        first = None
        with oa.beta.threads.runs.stream(thread_id=t.id, assistant_id=a.id,
                                         max_completion_tokens=REPLY_TOKENS) as stream:
            for event in stream:
                if first is None and event.event == "thread.message.delta":
                    first = time.perf_counter() - t0
            run = stream.get_final_run()
        out.append((first, run.usage.prompt_tokens, run.usage.prompt_tokens_details["cached_tokens"]))
    oa.beta.threads.delete(t.id)  # its KV handle goes with it
    return out


def chain_turns(srv, history):
    oa = srv.client
    prev = oa.responses.create(model=srv.model, input=history, temperature=0, max_output_tokens=REPLY_TOKENS)
    made = [prev.id]
    out = []
    for q in QUESTIONS[:TURNS]:
        events = []
        first = first_token((events.append(e) or e for e in oa.responses.create(
            model=srv.model, input=q, previous_response_id=prev.id, temperature=0, max_output_tokens=REPLY_TOKENS,
            stream=True)), lambda e: e.type == "response.output_text.delta")
        prev = events[-1].response
        made.append(prev.id)
        out.append((first, prev.usage.input_tokens, prev.usage.input_tokens_details.cached_tokens))
    for r in made:  # and each response's KV handle with it
        oa.responses.delete(r)
    return out


def chat_turns(srv, history):
    oa = srv.client
    messages = [{"role": "user", "content": history}]
    r = oa.chat.completions.create(model=srv.model, messages=messages, temperature=0, max_tokens=REPLY_TOKENS)
    messages.append({"role": "assistant", "content": r.choices[0].message.content})
    out = []
    for q in QUESTIONS[:TURNS]:
        messages.append({"role": "user", "content": q})
        chunks = []
        first = first_token((chunks.append(c) or c for c in oa.chat.completions.create(
            model=srv.model, messages=messages, temperature=0, max_tokens=REPLY_TOKENS, stream=True,
            stream_options={"include_usage": True})),
            lambda c: c.choices and c.choices[0].delta.content)
        messages.append({"role": "assistant", "content": "".join(
            c.choices[0].delta.content or "" for c in chunks if c.choices)})
        usage = chunks[-1].usage
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        out.append((first, usage.prompt_tokens, cached))
    return out


def new_only_turns(srv, counts):
    """/v1/completions of `n` token ids for each n: a turn's new tokens alone."""
    out = []
    for n in counts:
        ids = [(i * 37) % 20000 + 100 for i in range(n)]
        first = first_token(srv.client.completions.create(model=srv.model, prompt=ids, temperature=0,
                                                          max_tokens=REPLY_TOKENS, stream=True),
                            lambda c: c.choices and c.choices[0].text)
        out.append((first, n, 0))
    return out


def floor_turns(srv, history, counts):
    """shardlm.v1 with ChunkResult handles, the new tokens only (bench/stateful_floor.py, run by
    Debian's python3, which has grpcio)."""
    p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "stateful_floor.py"), srv.grpc, str(history),
                        ",".join(str(n) for n in counts), str(REPLY_TOKENS)],
                       capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        raise RuntimeError("stateful_floor.py failed: %s" % p.stderr[-1500:])
    return [(f, n, 0) for f, n in zip(json.loads(p.stdout.strip().split("\n")[-1]), counts)]


def turns_part(args, workdir):
    history = HISTORY * 60
    on = Serve(args, workdir, "serve-cache", "--state-dir", os.path.join(workdir, "state-cache"))
    off = Serve(args, workdir, "serve-nocache", "--no-prefix-caching", "--state-dir",
                os.path.join(workdir, "state-nocache"))
    rounds = []
    try:
        for rnd in range(args.rounds):
            # Each path's conversation starts differently: no path finds another's blocks in the cache.
            def own(path):
                return "Conversation %d of round %d. %s" % (path, rnd, history)
            paths = {"thread": thread_turns(on, own(1)), "chain": chain_turns(on, own(2)),
                     "chat+cache": chat_turns(on, own(3)), "chat": chat_turns(off, own(4)),
                     "thread-nc": thread_turns(off, own(5))}
            news = [p - c for _, p, c in paths["thread-nc"]]
            paths["floor"] = floor_turns(off, paths["thread-nc"][0][2], news)
            paths["new-only"] = new_only_turns(off, news)
            rounds.append(paths)
            print("round %d: history %d tokens at the first measured turn" % (rnd + 1, paths["chat"][0][1]))
            print("  %-11s %9s %9s %9s %12s %12s" % ("path", "TTFT p50", "turn 1", "turn 20", "prompt (20)",
                                                    "cached (20)"))
            for name, turns in paths.items():
                ttft = [f * 1000 for f, _, _ in turns]
                print("  %-11s %7.1f ms %6.1f ms %6.1f ms %12d %12d" % (
                    name, statistics.median(ttft), ttft[0], ttft[-1], turns[-1][1], turns[-1][2]))
    finally:
        on.stop()
        off.stop()
    print("medians over %d rounds of the per-round TTFT p50:" % args.rounds)
    for name in rounds[0]:
        per_round = [statistics.median(f * 1000 for f, _, _ in r[name]) for r in rounds]
        print("  %-11s %7.1f ms   (rounds: %s)" % (name, statistics.median(per_round),
                                                   ", ".join("%.1f" % x for x in per_round)))


def median_ms(times):
    return statistics.median(times) * 1000


def store_costs(srv, a, listed, n=30):
    """Medians of n calls each: a messages list and a runs list of `listed` (the same pages at
    any store size), and a run's start on a new one-message thread (create to in_progress)."""
    oa = srv.client
    lists = {"messages list": lambda: oa.beta.threads.messages.list(listed.id, limit=20),
             "runs list": lambda: oa.beta.threads.runs.list(listed.id, limit=20)}
    out = {}
    for name, fn in lists.items():
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = median_ms(times)
    starts = []
    for _ in range(n):
        t = oa.beta.threads.create(messages=[{"role": "user", "content": "hi"}])
        t0 = time.perf_counter()
        with oa.beta.threads.runs.stream(thread_id=t.id, assistant_id=a.id, max_completion_tokens=1) as stream:
            for event in stream:
                if event.event == "thread.run.in_progress":
                    starts.append(time.perf_counter() - t0)
            # the rest of the stream (its one token) is read, untimed
    out["run start"] = median_ms(starts)
    return out


def fill_threads(srv, n):
    def one(i):
        srv.client.beta.threads.create(messages=[{"role": "user", "content": "thread %d" % i}])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def store_part(args, workdir):
    backends = [("sqlite", None)]
    try:
        postgres_server.bin_dir()
        backends.append(("postgresql", postgres_server.PostgresServer().start()))
    except RuntimeError as e:
        print("store: PostgreSQL skipped: %s" % e)
    for name, pg in backends:
        flags = (["--state-db", pg.url] if pg else ["--state-dir", os.path.join(workdir, "state-store")])
        srv = Serve(args, workdir, "serve-store-" + name, *flags)
        try:
            a = srv.client.beta.assistants.create(model=srv.model, temperature=0)
            listed = srv.client.beta.threads.create(messages=[{"role": "user", "content": "hi"}] * 10)
            for _ in range(20):  # 20 runs and 30 messages: full pages of both lists
                srv.client.beta.threads.runs.create_and_poll(thread_id=listed.id, assistant_id=a.id,
                                                             max_completion_tokens=1, poll_interval_ms=20)
            fill_threads(srv, 99 - args.rounds * 30)
            small = [store_costs(srv, a, listed) for _ in range(args.rounds)]
            t0 = time.perf_counter()
            fill_threads(srv, 9900)
            fill_s = time.perf_counter() - t0
            large = [store_costs(srv, a, listed) for _ in range(args.rounds)]
            print("store on %s (9,900 threads made in %.1f s, %.2f ms each with 8 clients):" %
                  (name, fill_s, fill_s * 1000 / 9900))
            for label in small[0]:
                print("  %-14s about 100 threads: %s ms   about 10,000: %s ms" % (
                    label, ", ".join("%.2f" % r[label] for r in small), ", ".join("%.2f" % r[label] for r in large)))
        finally:
            srv.stop()
            if pg:
                pg.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default="turns,store")
    ap.add_argument("--workdir", default="")
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="shardlm-stateful-bench-")
    os.makedirs(workdir, exist_ok=True)
    for d in ("state-cache", "state-nocache", "state-store"):
        shutil.rmtree(os.path.join(workdir, d), ignore_errors=True)
    parts = args.parts.split(",")
    if "turns" in parts:
        turns_part(args, workdir)
    if "store" in parts:
        store_part(args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
