#!/usr/bin/python3
"""Serving under load over real processes: correctness at concurrency, backpressure, deadlines.

Cases (a tiny f32 Llama with the Llama-3 tokenizer):
  concurrency_64   `serve --tp 2` with a 1 MiB KV cache per rank (64 blocks, so sequences are
                   preempted) and --max-num-seqs 32: 64 greedy streams from four shared prefixes
                   (prefix-cache hits) at once, with 12 more streams cancelled at random moments,
                   give exactly the tokens each gives alone; preemptions and cache hits happened
                   (/metrics, GetStats); afterwards no block is referenced and nothing runs or waits
  queue_limit      --max-num-seqs 2 --max-queued-requests 4: of 24 streams sent at once the excess
                   gets RESOURCE_EXHAUSTED naming --max-queued-requests, every admitted one (at
                   least the queue's 4) ends OK
                   with all its tokens; GetStats' waiting and running go back to 0
  deadlines        a Prefill of 64 long chunks with a 0.3 s deadline ends DEADLINE_EXCEEDED and the
                   server stops its work (its log line says DEADLINE_EXCEEDED well before the work
                   could have finished; nothing runs and no block or handle is held after); a
                   cancelled Score ends CANCELLED likewise; Prefill with keep past
                   --max-handle-share gets RESOURCE_EXHAUSTED naming it
  batch_mode       `shardlm batch` on a JSONL file: lines in input order, bad lines reported with
                   their line number (exit 1), greedy lines equal `generate --json`, the static
                   policy and --server mode give the same lines
  many_streams     1000 Generate streams open at once (the first running, then 999 more opened
                   together that queue; at least 800 open together) cost the server fewer than 100 threads; cancelling them
                   frees everything

Usage:
  /usr/bin/python3 tests/integration/load_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import os
import random
import re
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import operations_test as ops  # noqa: E402  (its servers, stubs and helpers)
from harness import METRICS_PORT  # noqa: E402

grpc, pb = ops.grpc, ops.pb


def greedy_ids(st, prompt_ids, n, timeout=120):
    req = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=prompt_ids)), max_new_tokens=n,
                             sampling=pb.SamplingParams(temperature=0), ignore_eos=True)
    toks = []
    for r in st.Generate(req, timeout=timeout):
        toks.extend(r.token_ids)
    return toks


def idle_stats(st, seconds=10):
    """GetStats once nothing runs or waits (or the last one after `seconds`)."""
    deadline = time.time() + seconds
    while True:
        s = st.GetStats(pb.GetStatsRequest(), timeout=10)
        if (s.running == 0 and s.waiting == 0 and s.referenced_blocks == 0) or time.time() > deadline:
            return s
        time.sleep(0.05)


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def concurrency_64(ctx, chk):
    srv = ctx.serve("concurrency", 2, "--kv-cache-mb", 1, "--max-num-seqs", 32, "--metrics-port", 0)
    metrics_port = srv.announced_port(METRICS_PORT)
    _, st, _ = ops.stub(srv.port)
    try:
        info = st.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        chk.check(info.kv_cache_blocks <= 64, "a small cache: %d blocks" % info.kv_cache_blocks)
        rng = random.Random(7)
        prefixes = [[rng.randrange(10, 2000) for _ in range(35)] for _ in range(4)]
        jobs = []
        for i in range(64):
            prompt = prefixes[i % 4] + [rng.randrange(10, 2000) for _ in range(rng.randrange(1, 12))]
            jobs.append((prompt, rng.randrange(16, 48)))
        solo = [greedy_ids(st, p, n) for p, n in jobs]
        chk.check(all(len(t) == n for t, (_, n) in zip(solo, jobs)), "64 solo runs, each with all its tokens")
        hits0 = st.GetStats(pb.GetStatsRequest(), timeout=10).prefix_cache_hits
        preempt0 = metric(metrics_port, "shardlm_preemptions_total")

        got = [None] * len(jobs)
        errors = []

        def run(i):
            try:
                got[i] = greedy_ids(st, *jobs[i])
            except grpc.RpcError as e:
                errors.append("%d: %s %s" % (i, e.code(), e.details()))

        cancelled = []

        def cancel_one(k):
            prompt = prefixes[k % 4] + [rng.randrange(10, 2000) for _ in range(5)]
            req = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=prompt)), max_new_tokens=40,
                                     sampling=pb.SamplingParams(temperature=0), ignore_eos=True)
            call = st.Generate(req, timeout=120)
            delay = 0.05 * (k % 6)
            threading.Timer(delay, call.cancel).start()
            try:
                for _ in call:
                    pass
                cancelled.append("finished")
            except grpc.RpcError as e:
                cancelled.append(e.code().name)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
        threads += [threading.Thread(target=cancel_one, args=(k,)) for k in range(12)]
        rng.shuffle(threads)
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        took = time.time() - t0
        chk.check(not errors, "no stream failed: %s" % errors[:3])
        same = sum(1 for a, b in zip(got, solo) if a == b)
        chk.check(same == len(jobs), "%d of %d concurrent outputs equal their solo runs (%.1f s)" %
                  (same, len(jobs), took))
        chk.check(len(cancelled) == 12 and cancelled.count("CANCELLED") >= 6,
                  "cancelled streams ended: %s" % sorted(set(cancelled)))
        preempted = metric(metrics_port, "shardlm_preemptions_total") - preempt0
        chk.check(preempted > 0, "sequences were preempted under load: %d" % preempted)
        s = idle_stats(st)
        chk.check(s.prefix_cache_hits > hits0, "prefix-cache hits under load: %d" % (s.prefix_cache_hits - hits0))
        chk.check(s.running == 0 and s.waiting == 0 and s.referenced_blocks == 0 and s.handles == 0,
                  "afterwards nothing runs or waits and no block is held: running %d waiting %d referenced %d "
                  "handles %d" % (s.running, s.waiting, s.referenced_blocks, s.handles))
        chk.check(s.free_blocks == s.num_blocks, "every block free or evictable: %d of %d" %
                  (s.free_blocks, s.num_blocks))
    finally:
        srv.stop()


def queue_limit(ctx, chk):
    srv = ctx.serve("queue", 1, "--max-num-seqs", 2, "--max-queued-requests", 4)
    _, st, _ = ops.stub(srv.port)
    try:
        prompt = [11, 12, 13, 14, 15]
        results = []
        lock = threading.Lock()

        def run():
            try:
                toks = greedy_ids(st, prompt, 48)
                with lock:
                    results.append(("OK", len(toks)))
            except grpc.RpcError as e:
                with lock:
                    results.append((e.code().name, e.details()))

        threads = [threading.Thread(target=run) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        ok = [r for r in results if r[0] == "OK"]
        refused = [r for r in results if r[0] == "RESOURCE_EXHAUSTED"]
        chk.check(len(results) == 24 and len(ok) + len(refused) == 24,
                  "every call ended OK or RESOURCE_EXHAUSTED: %s" % sorted(set(r[0] for r in results)))
        chk.check(refused and all("--max-queued-requests" in d for _, d in refused),
                  "%d refused naming --max-queued-requests: %r" % (len(refused), refused[0][1] if refused else ""))
        # At least the queue's 4 are admitted (more when the loop admits between arrivals).
        chk.check(len(ok) >= 4 and all(n == 48 for _, n in ok), "%d admitted, each with all 48 tokens" % len(ok))
        s = idle_stats(st)
        chk.check(s.running == 0 and s.waiting == 0 and s.referenced_blocks == 0,
                  "afterwards running %d waiting %d referenced %d" % (s.running, s.waiting, s.referenced_blocks))
    finally:
        srv.stop()


def deadlines(ctx, chk):
    srv = ctx.serve("deadlines", 1, "--max-handle-share", "0.05")
    _, st, _ = ops.stub(srv.port)
    try:
        rng = random.Random(3)
        chunk = lambda n: pb.Prompt(token_ids=pb.TokenIds(ids=[rng.randrange(10, 2000) for _ in range(n)]))  # noqa
        # How long one long chunk takes, to know the whole call would outlast its deadline.
        t0 = time.time()
        st.Prefill(pb.PrefillRequest(chunks=[chunk(1500)]), timeout=120)
        one = time.time() - t0
        req = pb.PrefillRequest(chunks=[chunk(1500) for _ in range(64)], keep=True)
        t0 = time.time()
        try:
            st.Prefill(req, timeout=0.3)
            chk.check(False, "the Prefill should have missed its deadline")
        except grpc.RpcError as e:
            chk.check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, "client sees %s" % e.code().name)
        s = idle_stats(st, seconds=30)
        stopped = time.time() - t0
        chk.check(s.running == 0 and s.waiting == 0 and s.referenced_blocks == 0 and s.handles == 0,
                  "its work stopped and nothing is held: running %d waiting %d referenced %d handles %d" %
                  (s.running, s.waiting, s.referenced_blocks, s.handles))
        chk.check(stopped < 64 * one / 2, "stopped after %.2f s; the whole call would take ~%.1f s" %
                  (stopped, 64 * one))
        log = srv.text()
        chk.check(re.search(r"Prefill status=DEADLINE_EXCEEDED", log), "the server logs the call DEADLINE_EXCEEDED")

        fut = st.Score.future(pb.ScoreRequest(prompt=chunk(4000)), timeout=60)
        time.sleep(0.05)
        fut.cancel()
        s = idle_stats(st, seconds=30)
        chk.check(s.running == 0 and s.referenced_blocks == 0, "a cancelled Score frees everything")
        deadline = time.time() + 10
        while "Score status=CANCELLED" not in srv.text() and "Score status=OK" not in srv.text() and \
                time.time() < deadline:
            time.sleep(0.05)
        chk.check("Score status=CANCELLED" in srv.text(), "the server ends the Score CANCELLED")

        # Kept handles may pin at most 5% of the cache.
        info = st.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        cap_tokens = int(0.05 * info.kv_cache_blocks) * info.kv_block_size
        handles, refused = [], None
        for _ in range(cap_tokens // 500 + 2):
            try:
                r = st.Prefill(pb.PrefillRequest(chunks=[chunk(500)], keep=True), timeout=60)
                handles.append(r.results[0].handle)
            except grpc.RpcError as e:
                refused = e
                break
        chk.check(refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and
                  "--max-handle-share" in refused.details(),
                  "past the share Prefill keep is refused: %s" % (refused.details() if refused else "never"))
        chk.check(len(handles) >= 1, "%d handles kept before the limit" % len(handles))
        st.ReleaseChunks(pb.ReleaseChunksRequest(handles=handles), timeout=10)
        s = idle_stats(st)
        chk.check(s.handles == 0 and s.referenced_blocks == 0, "released: nothing held")
    finally:
        srv.stop()


def threads_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def many_streams(ctx, chk):
    srv = ctx.serve("many", 1, "--max-num-seqs", 1, "--max-queued-requests", 2000)
    ch, st, _ = ops.stub(srv.port)
    try:
        idle_threads = threads_of(srv.proc.pid)
        # 128 tokens each, one at a time: the queue drains far slower than the calls open.
        req = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=[11, 12, 13])), max_new_tokens=128,
                                 sampling=pb.SamplingParams(temperature=0), ignore_eos=True)
        # The first call is running before the others open: streams opened at
        # once reach the queue in no promised order, and behind a few hundred
        # others (128 steps each) the first one's deadline could pass.
        first_call = st.Generate(req, timeout=120)
        head = next(first_call)
        calls = [first_call] + [st.Generate(req, timeout=120) for _ in range(999)]
        deadline = time.time() + 20
        s = st.GetStats(pb.GetStatsRequest(), timeout=10)
        while s.running + s.waiting < 800 and time.time() < deadline:
            time.sleep(0.1)
            s = st.GetStats(pb.GetStatsRequest(), timeout=10)
        open_threads = threads_of(srv.proc.pid)
        chk.check(s.running + s.waiting >= 800, "%d streams open at once (running %d, waiting %d)" %
                  (s.running + s.waiting, s.running, s.waiting))
        chk.check(open_threads - idle_threads < 100, "the server's threads: %d idle, %d with the streams open" %
                  (idle_threads, open_threads))
        first = list(head.token_ids) + [t for r in first_call for t in r.token_ids]
        chk.check(len(first) == 128, "the first stream ends with its 128 tokens")
        for c in calls:
            c.cancel()
        s = idle_stats(st, seconds=30)
        chk.check(s.running == 0 and s.waiting == 0 and s.referenced_blocks == 0,
                  "cancelling them frees everything: running %d waiting %d referenced %d" %
                  (s.running, s.waiting, s.referenced_blocks))
        chk.check(greedy_ids(st, [11, 12, 13], 128) == first, "the server still answers the same")
    finally:
        ch.close()
        srv.stop()


def batch_mode(ctx, chk):
    """`shardlm batch` in-process (both policies) and against a server."""
    import json
    import subprocess
    lines = ['{"prompt": "The harbour committee met", "max_new_tokens": 8, "temperature": 0, "ignore_eos": true}',
             '{"prompt_ids": [11, 12, 13, 14], "max_new_tokens": 6, "temperature": 0, "ignore_eos": true}',
             'not json',
             '',
             '{"prompt_ids": [11, 999999], "max_new_tokens": 4}',
             '{"prompt": "Once upon a time", "max_new_tokens": 12, "temperature": 0.8, "seed": 5}',
             '{"prompt": "x", "bogus": 1}']
    lines += ['{"prompt_ids": [%d, 20, 30], "max_new_tokens": %d, "temperature": 0, "ignore_eos": true}' %
              (40 + i, 10 if i % 8 else 40) for i in range(16)]
    inp = ctx.dir("batch_in.jsonl")
    with open(inp, "w") as f:
        f.write("\n".join(lines) + "\n")

    def run(name, *extra):
        out = ctx.dir(name + ".jsonl")
        p = subprocess.run([ctx.binary, "batch", "--input", inp, "--output", out] + [str(x) for x in extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        with open(out) as f:
            return p.returncode, [json.loads(x) for x in f], p.stderr.decode()

    rc, cont, err = run("continuous", "--model", ctx.model, "--max-num-seqs", 4)
    chk.check(rc == 1 and "3 of 22 lines failed" in err, "exit 1 naming the failed count: %r" % err[-200:])
    chk.check([r["index"] for r in cont] == list(range(22)), "one output line per input line, in order")
    chk.check(cont[2]["error"] == "line 3: not a JSON object" and "line 5:" in cont[3]["error"] and
              "999999" in cont[3]["error"] and 'unknown key "bogus"' in cont[5]["error"],
              "bad lines name their line number and why: %s" % [cont[i].get("error") for i in (2, 3, 5)])
    gen = subprocess.run([ctx.binary, "generate", "--model", ctx.model, "--prompt", "The harbour committee met",
                          "--max-new-tokens", "8", "--temperature", "0", "--ignore-eos", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
    want = json.loads(gen.stdout.decode().strip().splitlines()[-1])["token_ids"]
    chk.check(cont[0]["token_ids"] == want, "a greedy line equals `generate --json`")
    chk.check(all(len(cont[i]["token_ids"]) == (10 if (i - 6) % 8 else 40) for i in range(6, 22)),
              "every line has its max_new_tokens")
    rc, stat, _ = run("static", "--model", ctx.model, "--max-num-seqs", 4, "--policy", "static")
    chk.check(stat == cont, "--policy static gives the same lines")
    srv = ctx.serve("batch_server", 1)
    try:
        rc, remote, _ = run("remote", "--server", "127.0.0.1:%d" % srv.port, "--concurrency", 8)
        chk.check(remote == cont, "--server gives the same lines: %s" %
                  [i for i, (a, b) in enumerate(zip(remote, cont)) if a != b][:5])
    finally:
        srv.stop()


CASES = [("batch_mode", batch_mode), ("concurrency_64", concurrency_64), ("queue_limit", queue_limit), ("deadlines", deadlines),
         ("many_streams", many_streams)]

if __name__ == "__main__":
    sys.exit(ops.run_main(__doc__, CASES, "load"))
