#!/usr/bin/python3
"""Operations II over real processes: /metrics under traffic, request logs, Kubernetes probes.

Cases (a tiny f32 Llama with the Llama-3 tokenizer, `serve --tp 2` unless said):
  metrics             scrape /metrics before and after concurrent streams with shared prefixes,
                      an invalid call and a kill -9 of a worker: requests by method and code,
                      prompt/generated tokens, TTFT/TPOT histograms, per-rank step and
                      collective time, prefix-cache hits, KV blocks back to free, restarts and
                      re-formations all move by exactly what was sent; the exposition parses
                      (HELP/TYPE per family, cumulative buckets ending in +Inf = count); vLLM's
                      names (vllm:*, what GAIE's endpoint picker reads) equal their shardlm
                      series, with inter-token and end-to-end latencies, endings by reason,
                      the cache's usage and configuration; a metrics port in use is refused
                      before any worker starts
  request_log         x-request-id is echoed (or made), one log line per call with method,
                      status, tokens in/out and latency, the workers' lines carry the same id,
                      and no "Logging before InitGoogleLogging" noise
  coordinator_restart a coordinator killed and started again (a rescheduled pod) forms the group
                      with the workers that are still running, within 30 s, same output
  probes              grpc.health.v1 as Kubernetes probes see it, before the group forms:
                      `coordinator`'s worker endpoint and a worker's port answer without the
                      internal token, "liveness" SERVING and "" NOT_SERVING until every rank
                      has joined, then both SERVING

Usage:
  /usr/bin/python3 tests/integration/observability_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import os
import re
import signal
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import operations_test as ops  # noqa: E402  (its servers, stubs and helpers)
from harness import HTTP_PORT, METRICS_PORT, SERVING_PORT, WORKER_PORT, WORKERS_PORT  # noqa: E402

grpc, pb, sc = ops.grpc, ops.pb, ops.sc
health_pb2, health_pb2_grpc = ops.health_pb2, ops.health_pb2_grpc

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        ctype = r.headers.get("Content-Type", "")
        return r.read().decode(), ctype


def parse(text):
    """{(name, frozenset(labels)): value} plus problems found in the exposition."""
    samples, problems, typed, helped = {}, [], {}, set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split(" ")[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            typed[name] = kind
            continue
        m = SAMPLE.match(line)
        if not m:
            problems.append("unparsable line: %r" % line)
            continue
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    for (name, _labels) in samples:
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in typed else name
        if family not in typed or family not in helped:
            problems.append("%s has no TYPE/HELP" % name)
    for (name, labels), count in samples.items():
        if not name.endswith("_count") or typed.get(name[:-6]) != "histogram":
            continue
        base = dict(labels)
        buckets = sorted(((float("inf") if dict(l)["le"] == "+Inf" else float(dict(l)["le"])), v)
                         for (n, l), v in samples.items() if n == name[:-6] + "_bucket" and
                         {k: x for k, x in l if k != "le"} == base)
        values = [v for _, v in buckets]
        if values != sorted(values) or not buckets or buckets[-1][0] != float("inf") or values[-1] != count:
            problems.append("histogram %s%s buckets not cumulative to +Inf = count: %s" % (name, base, buckets))
    return samples, problems


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def serve_with_metrics(ctx, name, *extra):
    srv = ctx.serve(name, 2, "--metrics-port", 0, *extra)
    srv.metrics_port = srv.announced_port(METRICS_PORT)
    return srv


def stream_with_id(st, prompt, n, request_id):
    """Greedy stream; (tokens, usage, echoed x-request-id)."""
    req = pb.GenerateRequest(prompt=sc.to_prompt(prompt), max_new_tokens=n,
                             sampling=pb.SamplingParams(temperature=0), ignore_eos=True)
    call = st.Generate(req, timeout=60, metadata=[("x-request-id", request_id)] if request_id else None)
    toks, usage = [], None
    for r in call:
        toks.extend(r.token_ids)
        if r.HasField("usage"):
            usage = r.usage
    echoed = dict(call.initial_metadata()).get("x-request-id")
    return toks, usage, echoed


# --- cases ---------------------------------------------------------------------------------

# vLLM's names (what the Gateway API Inference Extension's endpoint picker and llm-d read) and
# the shardlm series each stands for.
VLLM_NAMES = [("vllm:num_requests_running", "shardlm_requests_running"),
              ("vllm:num_requests_waiting", "shardlm_requests_waiting"),
              ("vllm:kv_cache_usage_perc", "shardlm_kv_cache_usage_ratio"),
              ("vllm:prompt_tokens_total", "shardlm_prompt_tokens_total"),
              ("vllm:generation_tokens_total", "shardlm_generation_tokens_total"),
              ("vllm:time_to_first_token_seconds_count", "shardlm_time_to_first_token_seconds_count"),
              ("vllm:inter_token_latency_seconds_count", "shardlm_inter_token_latency_seconds_count"),
              ("vllm:time_per_output_token_seconds_sum", "shardlm_inter_token_latency_seconds_sum"),
              ("vllm:request_time_per_output_token_seconds_count", "shardlm_time_per_output_token_seconds_count"),
              ("vllm:e2e_request_latency_seconds_count", "shardlm_e2e_request_latency_seconds_count"),
              ("vllm:prefix_cache_queries_total", "shardlm_prefix_cache_queries_total"),
              ("vllm:prefix_cache_hits_total", "shardlm_prefix_cache_hits_total"),
              ("vllm:num_preemptions_total", "shardlm_preemptions_total")]


def vllm_names(chk, m0, m1, n, peak, stats, st):
    """The vLLM-named series after the metrics case's 8 streams of 12 tokens."""
    model = dict(k for k in next(k for k in m1 if k[0] == "vllm:num_requests_running")[1])["model_name"]
    chk.check(all(value(m1, v, model_name=model) == value(m1, s) for v, s in VLLM_NAMES),
              "each vllm: series (model_name %r) equals its shardlm_ one: %s" % (
                  model, [v for v, s in VLLM_NAMES if value(m1, v, model_name=model) != value(m1, s)]))

    def delta(name, **labels):
        return value(m1, name, **labels) - value(m0, name, **labels)

    chk.check(delta("shardlm_inter_token_latency_seconds_count") == 11 * n and
              delta("shardlm_e2e_request_latency_seconds_count") == n,
              "11 inter-token intervals and one end-to-end latency per stream")
    chk.check(delta("vllm:request_success_total", model_name=model, finished_reason="length") == n,
              "request_success_total{finished_reason=length} +%d" % n)
    info = st.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
    chk.check(value(m1, "vllm:cache_config_info", block_size=str(info.kv_block_size),
                    num_gpu_blocks=str(info.kv_cache_blocks)) == 1,
              "cache_config_info{block_size=%d,num_gpu_blocks=%d} 1" % (info.kv_block_size, info.kv_cache_blocks))
    chk.check(value(m1, "vllm:kv_cache_usage_perc", model_name=model) == 0 and
              value(m0, "vllm:kv_cache_usage_perc", model_name=model) == 0,
              "kv_cache_usage_perc 0 when idle (%s blocks referenced)" % stats.referenced_blocks)
    chk.check(0 < peak.get("usage", 0) <= 1, "kv_cache_usage_perc under load: %.4f" % peak.get("usage", 0))


def metrics(ctx, chk):
    srv = serve_with_metrics(ctx, "metrics", "--http-port", 0)
    ch, st, health = ops.stub(srv.port)
    try:
        text0, ctype = scrape(srv.metrics_port)
        chk.check(ctype.startswith("text/plain") and "version=0.0.4" in ctype, "content type %r" % ctype)
        m0, problems = parse(text0)
        chk.check(not problems, "the idle exposition parses: %s" % problems[:3])
        chk.check(value(m0, "shardlm_group_serving") == 1 and value(m0, "shardlm_group_epoch") == 1,
                  "group serving in epoch 1 before any call")
        idle_free = value(m0, "shardlm_kv_cache_blocks", state="free")
        chk.check(idle_free is not None and idle_free > 0 and value(m0, "shardlm_kv_cache_blocks", state="used") == 0,
                  "the KV gauges show the free pool before the first step (free %s)" % idle_free)
        # 8 concurrent streams, two prompts sharing a long prefix, 12 tokens each.
        shared = ops.PROMPT * 4
        prompts = [shared + " first", shared + " second"] * 4
        results = [None] * len(prompts)

        def run(i):
            results[i] = stream_with_id(st, prompts[i], 12, "obs-%d" % i)

        # The first stream alone, so the prefix it leaves in the cache is there for the rest.
        run(0)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(1, len(prompts))]
        peak = {"running": 0.0, "waiting": 0.0}
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            mid, _ = parse(scrape(srv.metrics_port)[0])
            peak["running"] = max(peak["running"], value(mid, "shardlm_requests_running"))
            peak["waiting"] = max(peak["waiting"], value(mid, "shardlm_requests_waiting"))
            peak["usage"] = max(peak.get("usage", 0.0), value(mid, "shardlm_kv_cache_usage_ratio"))
            time.sleep(0.01)
        for t in threads:
            t.join()
        bad = ops.code_of(lambda: list(st.Generate(pb.GenerateRequest(prompt=sc.to_prompt("x"), n=99), timeout=10)))
        chk.check(bad[0] == grpc.StatusCode.INVALID_ARGUMENT, "n=99 is INVALID_ARGUMENT: %s" % (bad,))
        text1, _ = scrape(srv.metrics_port)
        m1, problems = parse(text1)
        chk.check(not problems, "the exposition under traffic parses: %s" % problems[:3])

        def delta(name, **labels):
            return value(m1, name, **labels) - value(m0, name, **labels)

        n = len(prompts)
        prompt_tokens = sum(r[1].prompt_tokens for r in results)
        cached = sum(r[1].cached_tokens for r in results)
        chk.check(delta("shardlm_requests_total", method="Generate", code="OK") == n,
                  "requests_total{Generate,OK} +%d (%s)" % (n, delta("shardlm_requests_total", method="Generate",
                                                                      code="OK")))
        chk.check(delta("shardlm_requests_total", method="Generate", code="INVALID_ARGUMENT") == 1,
                  "requests_total{Generate,INVALID_ARGUMENT} +1")
        chk.check(delta("shardlm_request_duration_seconds_count", method="Generate") == n + 1,
                  "request_duration_seconds{Generate} counted %d calls" % (n + 1))
        chk.check(delta("shardlm_generation_tokens_total") == 12 * n,
                  "generation_tokens_total +%d (%s)" % (12 * n, delta("shardlm_generation_tokens_total")))
        chk.check(delta("shardlm_prompt_tokens_total") == prompt_tokens,
                  "prompt_tokens_total +%d = the usage's prompt tokens (%s)" %
                  (prompt_tokens, delta("shardlm_prompt_tokens_total")))
        chk.check(delta("shardlm_time_to_first_token_seconds_count") == n and
                  delta("shardlm_time_per_output_token_seconds_count") == n,
                  "a TTFT and a TPOT observation per stream")
        chk.check(cached > 0 and delta("shardlm_prefix_cache_hits_total") == cached,
                  "prefix_cache_hits_total +%d = the usage's cached tokens (%s)" %
                  (cached, delta("shardlm_prefix_cache_hits_total")))
        chk.check(delta("shardlm_prefix_cache_queries_total") >= delta("shardlm_prefix_cache_hits_total"),
                  "prefix-cache queries >= hits")
        steps = delta("shardlm_steps_total")
        for rank in ("0", "1"):
            chk.check(delta("shardlm_rank_step_seconds_count", rank=rank) == steps and
                      delta("shardlm_rank_collective_seconds_count", rank=rank) == steps and
                      delta("shardlm_rank_collective_seconds_sum", rank=rank) > 0,
                      "rank %s: a step time and a collective time for each of the %d steps" % (rank, steps))
        chk.check(value(m1, "shardlm_rank_collective_seconds_sum", rank="0") <
                  value(m1, "shardlm_rank_step_seconds_sum", rank="0"), "collective time is part of step time")
        chk.check(peak["running"] >= 2, "requests_running seen at %d under load" % peak["running"])
        stats = st.GetStats(pb.GetStatsRequest(), timeout=10)
        chk.check(value(m1, "shardlm_kv_cache_blocks", state="used") == 0 and
                  value(m1, "shardlm_requests_running") == 0 and value(m1, "shardlm_requests_waiting") == 0,
                  "after the load: no block used, nothing running or waiting")
        total = sum(value(m1, "shardlm_kv_cache_blocks", state=s) for s in ("used", "free", "cached"))
        chk.check(total == stats.num_blocks and value(m1, "shardlm_kv_cache_blocks", state="cached") ==
                  stats.cached_blocks, "used + free + cached = %d blocks, cached = GetStats' %d" %
                  (stats.num_blocks, stats.cached_blocks))
        vllm_names(chk, m0, m1, n, peak, stats, st)
        # The OpenAI API's port serves the same exposition (where vLLM serves it, and GAIE looks).
        on_api, api_ctype = scrape(srv.announced_port(HTTP_PORT))
        m_api, problems = parse(on_api)
        m_port, _ = parse(scrape(srv.metrics_port)[0])
        chk.check(not problems and api_ctype == ctype and set(m_api) == set(m_port),
                  "GET /metrics on the OpenAI API's port: the same %d series (%r; %s)"
                  % (len(m_api), api_ctype, sorted(set(m_api) ^ set(m_port))[:4]))
        # kill -9 of a worker: serve restarts it and the group is formed again.
        watch = ops.HealthWatch(health)
        workers = ops.workers_of(srv.proc.pid)
        os.kill(workers[1], signal.SIGKILL)
        chk.check(watch.wait_for(["SERVING", "NOT_SERVING", "SERVING"], ops.RECOVER_TIMEOUT_S),
                  "the group recovers: %s" % watch.seen)
        m2, _ = parse(scrape(srv.metrics_port)[0])
        chk.check(value(m2, "shardlm_worker_restarts_total") == 1 and
                  value(m2, "shardlm_group_reforms_total") == 1 and value(m2, "shardlm_group_epoch") == 2 and
                  value(m2, "shardlm_group_serving") == 1,
                  "worker_restarts_total 1, group_reforms_total 1, epoch 2, serving")
        # The metrics port is checked before any worker starts.
        clash = ops.Proc(ctx, "metrics-clash", ["serve", "--model", ctx.model, "--tp", 2, "--port", 0,
                                                "--metrics-port", srv.metrics_port])
        rc = clash.proc.wait(30)
        clash.log.close()
        chk.check(rc == 1 and "--metrics-port" in clash.text() and "started worker" not in clash.text(),
                  "a metrics port in use is refused naming --metrics-port, no worker started (rc %s): %s" %
                  (rc, clash.text()[-300:]))
    finally:
        ch.close()
        chk.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def request_log(ctx, chk):
    srv = ctx.serve("request-log", 2)
    ch, st, _health = ops.stub(srv.port)
    try:
        toks, usage, echoed = stream_with_id(st, ops.PROMPT, 5, "trace-abc.1")
        chk.check(echoed == "trace-abc.1", "the client's x-request-id is echoed: %r" % echoed)
        _, _, made = stream_with_id(st, ops.PROMPT, 3, None)
        chk.check(made is not None and re.fullmatch(r"[0-9a-f]{16}", made) is not None,
                  "without one, a 16-hex id is made and returned: %r" % made)
        _, _, cleaned = stream_with_id(st, ops.PROMPT, 1, "bad id with spaces")
        chk.check(cleaned != "bad id with spaces" and re.fullmatch(r"[0-9a-f]{16}", cleaned or ""),
                  "an unsafe x-request-id is replaced, not logged: %r" % cleaned)
        code, _ = ops.code_of(lambda: st.Score(pb.ScoreRequest(prompt=sc.to_prompt("")), timeout=10,
                                               metadata=[("x-request-id", "score-1")]))
        time.sleep(0.3)
        log = srv.text()
        line = re.search(r"request trace-abc\.1 Generate status=OK tokens_in=(\d+) cached=(\d+) tokens_out=(\d+) "
                         r"latency_ms=[0-9.]+", log)
        chk.check(line is not None and int(line.group(1)) == usage.prompt_tokens and int(line.group(3)) == 5,
                  "one line at the end: method, status, tokens in/out, latency: %s" %
                  (line.group(0) if line else log[-600:]))
        chk.check(len(re.findall(r"request trace-abc\.1 Generate", log)) == 1, "exactly one such line")
        chk.check(re.search(r"request score-1 Score status=%s" % code.name, log) is not None,
                  "a failed call has its line with its status (%s)" % code.name)
        for rank in (0, 1):
            chk.check(re.search(r"request trace-abc\.1: rank %d starts it" % rank, log) is not None,
                      "worker rank %d's log carries the request id" % rank)
        chk.check("Logging before InitGoogleLogging" not in log, "no 'Logging before InitGoogleLogging' noise")
    finally:
        ch.close()
        chk.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def check_health(address, service):
    ch = grpc.insecure_channel(address)
    try:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
    except grpc.RpcError as e:
        return e.code().name
    finally:
        ch.close()


def probes(ctx, chk):
    token = ctx.dir("probe-token")
    with open(token, "w") as f:
        f.write("probe-token-0123456789abcdef0123456789\n")
    coord = ops.Proc(ctx, "probe-coordinator",
                     ["coordinator", "--model", ctx.model, "--tp", 2, "--port", 0,
                      "--worker-listen", "127.0.0.1:0", "--internal-token-file", token],
                     ready_text="shardlm serving")
    procs = [coord]
    try:
        endpoint = "127.0.0.1:%d" % coord.announced_port(WORKERS_PORT)

        def start_worker(rank):
            """The worker, started, and the address it listens on (it binds port 0)."""
            w = ops.Proc(ctx, "probe-worker%d" % rank,
                         ["worker", "--coordinator", endpoint, "--model", ctx.model, "--rank", rank,
                          "--listen", "127.0.0.1:0", "--internal-token-file", token])
            procs.append(w)
            return "127.0.0.1:%d" % w.announced_port(WORKER_PORT)

        worker0 = start_worker(0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "UNAVAILABLE" in (check_health(worker0, "liveness"),
                                                                 check_health(endpoint, "liveness")):
            time.sleep(0.1)
        seen = (check_health(endpoint, "liveness"), check_health(endpoint, ""))
        chk.check(seen == ("SERVING", "NOT_SERVING"),
                  "coordinator's worker endpoint before the group forms: liveness SERVING, readiness "
                  "NOT_SERVING: %s" % (seen,))
        chk.check(check_health(worker0, "liveness") == "SERVING" and check_health(worker0, "") == "NOT_SERVING",
                  "worker 0 waiting for its peer: liveness SERVING, readiness NOT_SERVING")
        chk.check(check_health(worker0, "unknown.Service") == "NOT_FOUND", "an unknown service is NOT_FOUND")
        worker1 = start_worker(1)
        coord.wait_ready()
        api = "127.0.0.1:%d" % coord.announced_port(SERVING_PORT)
        chk.check(all(check_health(a, s) == "SERVING" for a in (endpoint, worker0, worker1, api)
                      for s in ("", "liveness")),
                  "once formed: readiness and liveness SERVING on the worker endpoint, both workers, the API port")
    finally:
        for p in reversed(procs):
            p.stop()


def coordinator_restart(ctx, chk):
    """A coordinator that dies and comes back (a rescheduled pod) gets the running workers back."""
    token = ctx.dir("restart-token")
    with open(token, "w") as f:
        f.write("restart-token-0123456789abcdef012345\n")
    procs = []

    def start_coordinator(name, worker_listen):
        c = ops.Proc(ctx, name, ["coordinator", "--model", ctx.model, "--tp", 2, "--port", 0,
                                 "--worker-listen", worker_listen, "--internal-token-file", token],
                     ready_text="shardlm serving")
        procs.append(c)
        return c

    try:
        # The first coordinator binds a port of its choosing; the second must take the same one
        # (the address the workers know), so only the moment between the two is left to chance.
        first = start_coordinator("restart-coordinator1", "127.0.0.1:0")
        wport = first.announced_port(WORKERS_PORT)
        workers = []
        for rank in (0, 1):
            w = ops.Proc(ctx, "restart-worker%d" % rank,
                         ["worker", "--coordinator", "127.0.0.1:%d" % wport, "--model", ctx.model, "--rank", rank,
                          "--internal-token-file", token, "--coordinator-lost-ms", 60000])
            procs.append(w)
            workers.append(w)
        first.wait_ready()
        ch, st, _ = ops.stub(first.announced_port(SERVING_PORT))
        before = ops.greedy(st)
        ch.close()
        first.stop(signal.SIGKILL)
        second = start_coordinator("restart-coordinator2", "127.0.0.1:%d" % wport)
        t0 = time.monotonic()
        second.wait_ready(timeout=30)
        chk.check(True, "a new coordinator on the same worker endpoint forms the group with the running "
                        "workers (%.1f s)" % (time.monotonic() - t0))
        chk.check(all(w.proc.poll() is None for w in workers), "the same worker processes, none restarted")
        chk.check(all("registering again" in w.text() for w in workers), "each worker says it registers again")
        ch, st, _ = ops.stub(second.announced_port(SERVING_PORT))
        after = ops.greedy(st)
        ch.close()
        chk.check(after == before, "the same greedy output through the new coordinator")
    finally:
        for p in reversed(procs):
            p.stop()


CASES = [("metrics", metrics), ("request_log", request_log), ("probes", probes),
         ("coordinator_restart", coordinator_restart)]


if __name__ == "__main__":
    sys.exit(ops.run_main(__doc__, CASES, "observability"))
