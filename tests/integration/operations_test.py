#!/usr/bin/python3
"""Operations I over real processes: recovery, drain, security, and the edges a new user probes.

Cases (each starts its own servers and workers; a tiny f32 Llama with the Llama-3 tokenizer):
  recovery_kill9      kill -9 of a worker mid-stream: the stream ends UNAVAILABLE naming the
                      rank within 5 s; health goes NOT_SERVING then SERVING (watched); the
                      worker was started again; an old handle is NOT_FOUND saying it was lost;
                      greedy output equals the output before the failure; no block leaked
  recovery_sigstop    SIGSTOP of rank 0 mid-stream: the error names rank 0 (not its healthy
                      peer); after SIGCONT the group serves again with the same greedy output
  drain               SIGTERM during a stream: health NOT_SERVING and new calls UNAVAILABLE at
                      once, the stream finishes whole, serve exits 0
  deadline_mid_prefill  SmolLM2, a Prefill of 8 x 2000 tokens with top_k 5 and a 1 s deadline: its
                      blocks are free at most two engine steps after the deadline, steps cut
                      to --target-step-ms (under 1,024 tokens on average, free within two
                      steps' time and 0.3 s)
  cancel_mid_stream   8 clients cancelling Generate streams at random points for 8 s: every call
                      ends (none left in flight), only OK/CANCELLED, and serve stops at once
  drain_bounded       --shutdown-grace-s 2 with a running, a queued and an HTTP stream: all three
                      counted in flight, cancelled at 2 s with a status each, exit within 6 s
  internal_security   `coordinator` with a token file and workers started by hand with --rank:
                      a second claim of rank 1 is refused naming the holder; a worker, Step or
                      store write without the token is PERMISSION_DENIED; a coordinator with
                      no token or TLS is refused at start
  internal_tls        coordinator and workers over mutual TLS; a plaintext worker cannot join
  tls_and_api_keys    mutual TLS on the public port (certificates made with openssl) and API
                      keys: no/wrong key UNAUTHENTICATED, another key's handle NOT_FOUND,
                      plaintext and certificate-less clients refused, keys never logged
  probes              port in use refused before workers start; invalid UTF-8 INVALID_ARGUMENT
                      naming the field; ReleaseChunks all-or-nothing; long handles echoed
                      bounded; Score's length error names no max_new_tokens; reflection off

Usage:
  /usr/bin/python3 tests/integration/operations_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
from harness import (METRICS_PORT, SERVING_PORT, WORKERS_PORT, Ctx, Failure, LoggedProcess,  # noqa: E402
                     case_main_args, ps_rows, run_cases, wait_until_empty)
import shardlm_client as sc  # noqa: E402
import grpc  # noqa: E402

GRPC_PROTO = "/usr/share/grpc-proto/grpc"
sc.generate_stubs(os.path.join(GRPC_PROTO, "health", "v1"), "health.proto")
_worker_stubs = sc.generate_stubs(os.path.join(ROOT, "proto"), "shardlm/worker/v1/worker.proto")
import health_pb2, health_pb2_grpc  # noqa: E402,E401
import importlib  # noqa: E402
import shardlm  # noqa: E402  (the inference stubs' package; the worker stubs live in a second folder)
shardlm.__path__.append(os.path.join(_worker_stubs, "shardlm"))
wpb = importlib.import_module("shardlm.worker.v1.worker_pb2")
wpb_grpc = importlib.import_module("shardlm.worker.v1.worker_pb2_grpc")
pb = sc.pb
pb_grpc = sc.pb_grpc

MODEL_FLAGS = ["--arch", "llama", "--hidden-size", "128", "--num-heads", "4", "--num-kv-heads", "2",
               "--intermediate-size", "256", "--num-layers", "4", "--seed", "77", "--dtype", "f32",
               "--max-position-embeddings", "8192"]
PROMPT = "The harbour committee met on a grey Tuesday morning"
START_TIMEOUT_S = 60
RECOVER_TIMEOUT_S = 60



class Proc(LoggedProcess):
    """A shardlm process with its output in a log file; ready once `ready_text` is printed."""

    def __init__(self, ctx, name, args, env=None, ready_text=None, new_session=False):
        super().__init__([ctx.binary] + list(args), ctx.dir(name + ".log"), env, new_session)
        self.ready_text = ready_text

    def wait_ready(self, timeout=START_TIMEOUT_S):
        if not self.wait_for(re.escape(self.ready_text), timeout):
            raise Failure("%s not ready (rc %s): %s" % (self.proc.args[1], self.proc.poll(), self.text()[-1500:]))


class Ops(Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary
        self.model = self.dir("model")
        if not os.path.isdir(self.model):
            p = subprocess.run([binary, "make-tiny-model", self.model, "--tokenizer", "llama3"] + MODEL_FLAGS,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                raise RuntimeError("make-tiny-model failed: %s" % p.stdout.decode(errors="replace"))

    def serve(self, name, tp, *extra, env=None, new_session=False):
        p = Proc(self, name, ["serve", "--model", self.model, "--tp", tp, "--port", 0] + list(extra),
                 env=env, ready_text="shardlm serving", new_session=new_session)
        p.wait_ready()
        p.port = p.announced_port(SERVING_PORT)
        return p


def workers_of(parent_pid):
    """{rank: pid} of the `shardlm worker` children of parent_pid."""
    out = {}
    for pid, ppid, _stat, args in ps_rows():
        if ppid == parent_pid and " worker " in " %s " % args:
            m = re.search(r"--rank (\d+)", args)
            if m:
                out[int(m.group(1))] = pid
    return out


def stub(port, creds=None, metadata_key=None):
    ch = grpc.secure_channel("localhost:%d" % port, creds) if creds else grpc.insecure_channel(
        "127.0.0.1:%d" % port)
    return ch, pb_grpc.InferenceStub(ch), health_pb2_grpc.HealthStub(ch)


def greedy(st, n=12, prompt=PROMPT, metadata=None, prefix_handle=""):
    req = pb.GenerateRequest(prompt=sc.to_prompt(prompt) if prompt else None, prefix_handle=prefix_handle,
                             max_new_tokens=n, sampling=pb.SamplingParams(temperature=0), ignore_eos=True)
    toks = []
    for r in st.Generate(req, timeout=60, metadata=metadata):
        toks.extend(r.token_ids)
    return toks


class Stream:
    """A long greedy stream consumed on a thread: first token time, tokens, final error."""

    def __init__(self, st, n, metadata=None):
        self.tokens, self.error, self.error_at, self.first_at, self.finish = [], None, None, None, None
        req = pb.GenerateRequest(prompt=sc.to_prompt(PROMPT), max_new_tokens=n,
                                 sampling=pb.SamplingParams(temperature=0), ignore_eos=True)
        self.call = st.Generate(req, timeout=120, metadata=metadata)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for r in self.call:
                if r.token_ids and self.first_at is None:
                    self.first_at = time.monotonic()
                self.tokens.extend(r.token_ids)
                for res in r.results:
                    self.finish = res.finish_reason
        except grpc.RpcError as e:
            self.error, self.error_at = e, time.monotonic()

    def wait_first(self, timeout=30):
        deadline = time.monotonic() + timeout
        while self.first_at is None and self.error is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.first_at is None:
            raise Failure("no streamed token within %d s (error: %s)" % (timeout, self.error))


class HealthWatch:
    """Every status grpc.health.v1 Watch reports, in order."""

    def __init__(self, health):
        self.seen = []
        self.call = health.Watch(health_pb2.HealthCheckRequest(), timeout=300)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            for r in self.call:
                self.seen.append(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))
        except grpc.RpcError:
            pass

    def wait_for(self, sequence, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if is_subsequence(sequence, self.seen):
                return True
            time.sleep(0.05)
        return False


def is_subsequence(needle, hay):
    it = iter(hay)
    return all(any(x == y for y in it) for x in needle)


def code_of(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


# --- cases ---------------------------------------------------------------------------------

def recovery_kill9(ctx, chk):
    srv = ctx.serve("kill9", 2, "--collective-timeout-ms", "3000")
    ch, st, health = stub(srv.port)
    try:
        before = greedy(st)
        handle = st.Prefill(pb.PrefillRequest(chunks=[sc.to_prompt(PROMPT)], keep=True), timeout=30).results[0].handle
        watch = HealthWatch(health)
        chk.check(watch.wait_for(["SERVING"], 5), "health SERVING before the failure (%s)" % watch.seen)
        workers = workers_of(srv.proc.pid)
        chk.check(sorted(workers) == [0, 1], "two workers with --rank 0 and 1: %s" % workers)
        stream = Stream(st, 6000)
        stream.wait_first()
        time.sleep(0.3)
        t_kill = time.monotonic()
        os.kill(workers[1], signal.SIGKILL)
        stream.thread.join(15)
        err = stream.error
        chk.check(err is not None and err.code() == grpc.StatusCode.UNAVAILABLE,
                  "the stream in flight ends UNAVAILABLE (%s)" % (err.code() if err else stream.finish))
        if err is not None:
            dt = stream.error_at - t_kill
            chk.check(dt < 5.0, "within 5 s of the kill (%.2f s)" % dt)
            chk.check("rank 1" in err.details(), "the error names rank 1: %s" % err.details()[:300])
        chk.check(watch.wait_for(["SERVING", "NOT_SERVING", "SERVING"], RECOVER_TIMEOUT_S),
                  "health went NOT_SERVING and back to SERVING: %s" % watch.seen)
        again = workers_of(srv.proc.pid)
        chk.check(sorted(again) == [0, 1] and again[1] != workers[1] and again[0] == workers[0],
                  "rank 1 was started again, rank 0 kept its process: %s -> %s" % (workers, again))
        code, details = code_of(lambda: greedy(st, prefix_handle=handle, prompt=" more"))
        chk.check(code == grpc.StatusCode.NOT_FOUND and "lost" in details,
                  "a handle of the old group is NOT_FOUND saying why: %s %s" % (code, details[:200]))
        after = greedy(st)
        chk.check(after == before, "greedy output after recovery equals before (%s vs %s)" % (after, before))
        stats = st.GetStats(pb.GetStatsRequest(), timeout=10)
        chk.check(stats.referenced_blocks == 0 and stats.running == 0,
                  "no block referenced, nothing running: %s" % str(stats).replace("\n", " "))
        chk.check("group formed again" in srv.text(), "the log says the group was formed again")
    finally:
        ch.close()
        chk.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def recovery_sigstop(ctx, chk):
    srv = ctx.serve("sigstop", 2, "--collective-timeout-ms", "2000")
    ch, st, health = stub(srv.port)
    workers = {}
    try:
        before = greedy(st)
        workers = workers_of(srv.proc.pid)
        stream = Stream(st, 6000)
        stream.wait_first()
        os.kill(workers[0], signal.SIGSTOP)
        stream.thread.join(30)
        err = stream.error
        chk.check(err is not None and err.code() == grpc.StatusCode.UNAVAILABLE,
                  "the stream ends UNAVAILABLE (%s)" % (err.code() if err else stream.finish))
        if err is not None:
            chk.check("rank 0" in err.details() and "did not answer" in err.details(),
                      "the stopped rank 0 is named: %s" % err.details()[:300])
        status = health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
        chk.check(status == health_pb2.HealthCheckResponse.NOT_SERVING, "health NOT_SERVING while stopped")
        os.kill(workers[0], signal.SIGCONT)
        watch = HealthWatch(health)
        chk.check(watch.wait_for(["SERVING"], RECOVER_TIMEOUT_S),
                  "SERVING again after SIGCONT: %s" % watch.seen)
        chk.check(greedy(st) == before, "greedy output after recovery equals before")
    finally:
        for pid in workers.values():
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        ch.close()
        chk.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def drain(ctx, chk):
    srv = ctx.serve("drain", 1, "--shutdown-grace-s", "300")
    ch, st, health = stub(srv.port)
    try:
        stream = Stream(st, 1000)
        stream.wait_first()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        code, details = code_of(lambda: greedy(st, n=2))
        chk.check(code == grpc.StatusCode.UNAVAILABLE, "a new call is UNAVAILABLE while draining: %s %s"
                  % (code, details))
        code, _ = code_of(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5))
        status = health.Check(health_pb2.HealthCheckRequest(), timeout=5).status if code == grpc.StatusCode.OK \
            else None
        chk.check(status == health_pb2.HealthCheckResponse.NOT_SERVING, "health NOT_SERVING while draining")
        chk.check(stream.thread.is_alive(), "the stream was still running when checked")
        stream.thread.join(300)
        chk.check(stream.error is None and len(stream.tokens) == 1000 and stream.finish == "length",
                  "the stream in flight finished whole (%d tokens, %s, %s)"
                  % (len(stream.tokens), stream.finish, stream.error))
        rc = srv.proc.wait(30)
        chk.check(rc == 0, "serve exits 0 after draining (rc %s)" % rc)
    finally:
        ch.close()
        srv.stop()


def drain_bounded(ctx, chk):
    """The grace period bounds the whole shutdown: with --shutdown-grace-s 2 and calls that
    cannot finish in it (a running gRPC stream, one queued behind it by --max-num-seqs 1, and
    an HTTP stream), SIGTERM counts all three in flight, cancels what is left at 2 s, every
    call ends with a status, and serve exits 0 within 2 s + 4 s."""
    srv = ctx.serve("drain-bounded", 2, "--shutdown-grace-s", "2", "--max-num-seqs", "1", "--http-port", "0")
    m = re.search(r"OpenAI API on http://[^:]+:(\d+)/v1", srv.text())
    ch, st, _ = stub(srv.port)
    sock = None
    try:
        running = Stream(st, 8000)
        running.wait_first()
        queued = Stream(st, 8000)
        body = json.dumps({"model": "model", "prompt": PROMPT, "max_tokens": 8000, "ignore_eos": True,
                           "stream": True}).encode()
        sock = socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.5)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(30)
        took = time.monotonic() - t0
        chk.check(rc == 0 and took < 6, "serve exits 0 %.1f s after SIGTERM (grace 2 s; rc %s)" % (took, rc))
        m = re.search(r"draining \((\d+) call\(s\) in flight", srv.text())
        chk.check(m is not None and int(m.group(1)) >= 3, "the drain counts the 3 calls in flight: %s"
                  % (m.group(0) if m else srv.text()[-500:]))
        chk.check("past the grace period" in srv.text(), "what was left at 2 s was cancelled")
        for what, s in (("running", running), ("queued", queued)):
            s.thread.join(10)
            chk.check(not s.thread.is_alive() and (s.error is not None or s.finish),
                      "the %s gRPC stream ended with a status: %s" % (
                          what, s.error.code() if s.error is not None else s.finish))
        sock.settimeout(10)
        got = b""
        try:
            while True:
                piece = sock.recv(65536)
                if not piece:
                    break
                got += piece
        except OSError:
            pass
        chk.check(got.startswith(b"HTTP/1.1 200") and (b"server is shutting down" in got or got.endswith(b"0\r\n\r\n")),
                  "the HTTP stream ended, saying why (%r)" % got[-200:])
    finally:
        if sock is not None:
            sock.close()
        ch.close()
        srv.stop()


def deadline_mid_prefill(ctx, chk):
    """A deadline stops work mid-prefill: SmolLM2 (tp 2), a Prefill of 8 x 2000 tokens with
    keep and top_k 5 (logprobs of every position: the heaviest steps) and a 1 s deadline ends
    DEADLINE_EXCEEDED at 1 s, and every block is free once the steps already running when it
    passed have ended: at most two engine steps after the deadline (the one running and the one
    sent ahead of it), counted on shardlm_steps_total, whatever the host's load: past its
    deadline (the engine's own clock, EngineRequest::deadline) a request is planned no more.
    Steps are cut to --target-step-ms (250 ms) from the learnt cost of a token and of the keys it
    attends to: they average under 1,024 of the 2,048 tokens --max-batch-tokens allows (quiet:
    250-270 ms each), and the blocks are free within two of the run's steps (their mean
    duration, shardlm_step_duration_seconds) and 0.3 s of the deadline (quiet: 0.3-0.55 s; a
    fixed 1.2 s failed in the CUDA variant's suite at 1.49 s, its steps then taking 1.24 s
    each with other tests on two cores). Before the cut, 2048-token steps held the blocks 2.2 s
    past it; with a cost per token alone, deep chunks ran to 530 ms. The step count is the
    property, the seconds follow from it and the host: in CI a 0.8 s bound failed at 0.82 s with
    four tests on two cores, a mean step under 400 ms failed at 450 ms beside a compile, and one
    run in twenty saw 3 steps after the client's deadline when the server's cancellation came
    after the next step was planned (the engine did not know the deadline then)."""
    model = os.path.join(ROOT, "third_party", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    srv = Proc(ctx, "deadline-prefill", ["serve", "--model", model, "--tp", 2, "--port", 0,
                                         "--metrics-port", 0], ready_text="shardlm serving")
    srv.wait_ready()
    mport = srv.announced_port(METRICS_PORT)
    ch, st, _ = stub(srv.announced_port(SERVING_PORT))
    try:
        rnd = random.Random(7)
        chunks = [pb.Prompt(token_ids=pb.TokenIds(ids=[rnd.randrange(1000, 40000) for _ in range(2000)]))
                  for _ in range(8)]
        # A first Prefill of the same kind teaches the engine its time per token.
        st.Prefill(pb.PrefillRequest(chunks=chunks[:2], top_k=5), timeout=120)
        for attempt in range(2):
            steps_before = metric(mport, "shardlm_steps_total")
            tokens_before = metric(mport, "shardlm_step_tokens_total")
            seconds_before = metric(mport, "shardlm_step_duration_seconds_sum")
            t0 = time.monotonic()
            code, _ = code_of(lambda: st.Prefill(pb.PrefillRequest(chunks=chunks, keep=True, top_k=5), timeout=1))
            ended = time.monotonic() - t0
            steps_at_deadline = metric(mport, "shardlm_steps_total")
            while True:
                s = st.GetStats(pb.GetStatsRequest(), timeout=10)
                if (s.free_blocks == s.num_blocks and s.running == 0) or time.monotonic() - t0 > 30:
                    break
                time.sleep(0.02)
            freed = time.monotonic() - t0
            steps = metric(mport, "shardlm_steps_total")
            per_step = (metric(mport, "shardlm_step_tokens_total") - tokens_before) / max(1, steps - steps_before)
            # A step's own duration (the metric counts its wait behind the step sent ahead of
            # it too): what this host, loaded as it is now, takes for one of these steps.
            step_s = (metric(mport, "shardlm_step_duration_seconds_sum") - seconds_before) / max(1, steps - steps_before)
            chk.check(code == grpc.StatusCode.DEADLINE_EXCEEDED and ended < 1.3,
                      "run %d: DEADLINE_EXCEEDED after %.2f s" % (attempt, ended))
            chk.check(steps - steps_at_deadline <= 2,
                      "run %d: every block free %.2f s after the call began, %d step(s) after the "
                      "deadline (at most 2)" % (attempt, freed, steps - steps_at_deadline))
            # The blocks come back as the steps running at the deadline end: within two of this
            # run's steps and 0.3 s (quiet: steps of 250-270 ms, free 0.3-0.55 s after it).
            chk.check(per_step < 1024 and freed - 1 <= 2 * step_s + 0.3,
                      "run %d: steps cut to the 250 ms target: %d steps of %.0f tokens (under 1024), %.0f ms "
                      "each, blocks free %.2f s after the deadline (within two steps and 0.3 s: %.2f s)"
                      % (attempt, steps - steps_before, per_step, 1000 * step_s, freed - 1, 2 * step_s + 0.3))
    finally:
        ch.close()
        srv.stop()


def metric(port, name):
    """The sum of a Prometheus series' samples on the metrics port (label sets added up)."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def cancel_mid_stream(ctx, chk):
    """Clients that cancel Generate streams at random points (8 threads, 8 s), some before
    the request even arrives: every call ends (shardlm_calls_in_flight back to 0, each logged),
    none is counted as anything but CANCELLED or OK, and serve then stops at once. Before, a
    cancel that landed while a write was in flight left the call unfinished for ever, and
    SIGTERM hung in gRPC's shutdown waiting for it."""
    srv = ctx.serve("cancel-mid-stream", 2, "--metrics-port", 0)
    mport = srv.announced_port(METRICS_PORT)
    try:
        started = [0]

        def client(seed, until):
            rng = random.Random(seed)
            ch, st, _ = stub(srv.port)
            while time.monotonic() < until:
                call = st.Generate(pb.GenerateRequest(prompt=sc.to_prompt(PROMPT), max_new_tokens=300,
                                                      ignore_eos=True), timeout=60)
                started[0] += 1
                k = rng.randint(0, 30)
                if k == 0:
                    call.cancel()  # before its request is read
                try:
                    for i, _ in enumerate(call, 1):
                        if i == k:
                            call.cancel()
                except grpc.RpcError:
                    pass
            ch.close()
        until = time.monotonic() + 8
        threads = [threading.Thread(target=client, args=(i, until)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + 10
        while metric(mport, "shardlm_calls_in_flight") > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        left = metric(mport, "shardlm_calls_in_flight")
        chk.check(left == 0, "every one of %d cancelled streams ended (%d still in flight)" % (started[0], left))
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=10).read().decode()
        codes = set(re.findall(r'shardlm_requests_total\{[^}]*method="Generate"[^}]*code="([A-Z_]+)"', text) +
                    re.findall(r'shardlm_requests_total\{[^}]*code="([A-Z_]+)"[^}]*method="Generate"', text))
        chk.check(codes <= {"OK", "CANCELLED"}, "Generate ended only OK or CANCELLED: %s" % sorted(codes))
        t0 = time.monotonic()
        rc = srv.stop()
        chk.check(rc == 0 and time.monotonic() - t0 < 5, "serve then stops at once (rc %s, %.1f s)"
                  % (rc, time.monotonic() - t0))
    finally:
        srv.stop()


def drain_group_signal(ctx, chk):
    """SIGTERM to serve's whole process group (a terminal's Ctrl-C, `kill -- -PGID`): the
    local workers are in a process group of their own, so they keep serving while the
    coordinator drains; the stream in flight finishes whole, nothing is restarted, and serve
    exits 0. Before, the workers died with the group and the stream ended UNAVAILABLE."""
    srv = ctx.serve("drain-group", 2, "--shutdown-grace-s", "300", new_session=True)
    ch, st, _ = stub(srv.port)
    try:
        stream = Stream(st, 400)
        stream.wait_first()
        os.killpg(srv.proc.pid, signal.SIGTERM)
        stream.thread.join(300)
        chk.check(stream.error is None and len(stream.tokens) == 400 and stream.finish == "length",
                  "the stream in flight finished whole (%d tokens, %s, %s)"
                  % (len(stream.tokens), stream.finish, stream.error))
        rc = srv.proc.wait(60)
        chk.check(rc == 0, "serve exits 0 after draining (rc %s)" % rc)
        log = srv.text()
        chk.check("starting it again" not in log and "re-forming" not in log,
                  "no worker restarted and no group re-formed during the drain")
    finally:
        ch.close()
        srv.stop()


def internal_security(ctx, chk):
    token = ctx.dir("internal.token")
    with open(token, "w") as f:
        f.write("s3cr3t-group-token-%d\n" % os.getpid())
    r = subprocess.run([ctx.binary, "coordinator", "--model", ctx.model, "--tp", "2", "--port", "0",
                        "--worker-listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    chk.check(r.returncode == 2 and b"--internal-token-file" in r.stderr,
              "a coordinator without token or TLS is refused (rc %d): %s" % (r.returncode, r.stderr[-300:]))
    coord = Proc(ctx, "coordinator", ["coordinator", "--model", ctx.model, "--tp", 2, "--port", 0,
                                      "--worker-listen", "127.0.0.1:0", "--internal-token-file", token],
                 ready_text="shardlm serving")
    procs = [coord]
    try:
        endpoint = "127.0.0.1:%d" % coord.announced_port(WORKERS_PORT)
        procs += [Proc(ctx, "worker%d" % i, ["worker", "--coordinator", endpoint, "--model", ctx.model,
                                             "--rank", i, "--listen", "127.0.0.1:0",
                                             "--internal-token-file", token]) for i in (0, 1)]
        coord.wait_ready()
        ch, st, _ = stub(coord.announced_port(SERVING_PORT))
        rank0 = re.search(r"worker (\S+) registered for rank 0 ", coord.text()).group(1)
        chk.check(len(greedy(st, n=4)) == 4, "the hand-started group serves")
        dup = subprocess.run([ctx.binary, "worker", "--coordinator", endpoint, "--model", ctx.model, "--rank",
                              "1", "--internal-token-file", token], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60)
        chk.check(dup.returncode != 0 and b"already held by the live worker" in dup.stdout,
                  "a second claim of rank 1 is refused naming the holder (rc %d): %s"
                  % (dup.returncode, dup.stdout[-400:]))
        intruder = subprocess.run([ctx.binary, "worker", "--coordinator", endpoint, "--model", ctx.model,
                                   "--rank", "1", "--insecure-internal"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=60)
        chk.check(intruder.returncode != 0 and b"not a member" in intruder.stdout,
                  "a worker without the token is refused: %s" % intruder.stdout[-300:])
        wch = grpc.insecure_channel(rank0)
        code, details = code_of(lambda: wpb_grpc.WorkerStub(wch).Step(wpb.StepRequest(token_ids=[1]), timeout=5))
        chk.check(code == grpc.StatusCode.PERMISSION_DENIED, "a Step without the token: %s %s" % (code, details))
        # A step of another group formation (as one delayed past a regroup):
        # refused at once, naming both epochs, and the rank stays in its group.
        member = [("x-shardlm-internal-token", open(token).read().strip())]
        stale_step = wpb.StepRequest(step_id=7, after_step_id=6, epoch=987654321, token_ids=[1])
        code, details = code_of(lambda: wpb_grpc.WorkerStub(wch).Step(stale_step, timeout=5, metadata=member))
        chk.check(code == grpc.StatusCode.FAILED_PRECONDITION and "epoch 987654321" in (details or ""),
                  "a step of another epoch is refused: %s %s" % (code, details))
        chk.check(len(greedy(st, n=4)) == 4, "the group still serves after the stale step")
        rch = grpc.insecure_channel(endpoint)
        code, details = code_of(lambda: wpb_grpc.RendezvousStub(rch).StoreSet(
            wpb.StoreSetRequest(key="x", value=b"y"), timeout=5))
        chk.check(code == grpc.StatusCode.PERMISSION_DENIED, "a store write without the token: %s" % code)
        code, _ = code_of(lambda: wpb_grpc.RendezvousStub(rch).StoreSet(
            wpb.StoreSetRequest(key="x", value=b"y"), timeout=5, metadata=[("x-shardlm-internal-token", "nope")]))
        chk.check(code == grpc.StatusCode.PERMISSION_DENIED, "a store write with a wrong token: %s" % code)
        chk.check(len(greedy(st, n=4)) == 4, "the group still serves after the intruders")
        wch.close()
        rch.close()
        ch.close()
    finally:
        for p in procs:
            p.stop()
        chk.check(all(open(p.log_path, "rb").read().find(b"s3cr3t") < 0 for p in procs),
                  "the token never appears in a log")


def make_certs(ctx):
    d = ctx.dir("certs")
    os.makedirs(d, exist_ok=True)

    def ssl(*args):
        p = subprocess.run(["openssl"] + list(args), cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            raise Failure("openssl %s: %s" % (" ".join(args), p.stdout.decode(errors="replace")))

    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=shardlm-test-ca")
    for name in ("server", "client"):
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out", name + ".csr", "-subj",
            "/CN=" + ("localhost" if name == "server" else "client"))
        ssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", name + ".pem", "-days", "2", "-extfile", "san.ext")
    return {k: open(os.path.join(d, k), "rb").read() for k in ("ca.pem", "client.key", "client.pem")}, d


def tls_and_api_keys(ctx, chk):
    files, d = make_certs(ctx)
    keys = ctx.dir("api_keys")
    key_a, key_b = "key-alpha-%d" % os.getpid(), "key-beta-%d" % os.getpid()
    with open(keys, "w") as f:
        f.write("# test keys\n%s\n%s\n" % (key_a, key_b))
    srv = ctx.serve("tls", 1, "--tls-cert", os.path.join(d, "server.pem"), "--tls-key",
                    os.path.join(d, "server.key"), "--tls-client-ca", os.path.join(d, "ca.pem"),
                    "--api-key-file", keys)
    creds = grpc.ssl_channel_credentials(root_certificates=files["ca.pem"], private_key=files["client.key"],
                                         certificate_chain=files["client.pem"])
    ch, st, health = stub(srv.port, creds)
    a = [("authorization", "Bearer " + key_a)]
    b = [("authorization", "Bearer " + key_b)]
    try:
        chk.check(len(greedy(st, n=3, metadata=a)) == 3, "mutual TLS + key A generates")
        chk.check(health.Check(health_pb2.HealthCheckRequest(), timeout=5).status ==
                  health_pb2.HealthCheckResponse.SERVING, "health needs no key")
        code, details = code_of(lambda: greedy(st, n=3))
        chk.check(code == grpc.StatusCode.UNAUTHENTICATED, "no key: %s %s" % (code, details))
        code, details = code_of(lambda: greedy(st, n=3, metadata=[("authorization", "Bearer wrong")]))
        chk.check(code == grpc.StatusCode.UNAUTHENTICATED, "wrong key: %s %s" % (code, details))
        handle = st.Prefill(pb.PrefillRequest(chunks=[sc.to_prompt(PROMPT)], keep=True), timeout=30,
                            metadata=a).results[0].handle
        chk.check(re.fullmatch(r"[0-9a-f]{32}", handle) is not None, "a handle is 128 random bits in hex")
        code, details = code_of(lambda: greedy(st, n=2, prompt=" x", prefix_handle=handle, metadata=b))
        chk.check(code == grpc.StatusCode.NOT_FOUND, "key B cannot use key A's handle: %s" % code)
        code, _ = code_of(lambda: st.ReleaseChunks(pb.ReleaseChunksRequest(handles=[handle]), timeout=10,
                                                   metadata=b))
        chk.check(code == grpc.StatusCode.NOT_FOUND, "key B cannot release key A's handle: %s" % code)
        chk.check(len(greedy(st, n=2, prompt=" x", prefix_handle=handle, metadata=a)) == 2,
                  "key A still uses its handle")
        st.ReleaseChunks(pb.ReleaseChunksRequest(handles=[handle]), timeout=10, metadata=a)
        _, plain, _ = stub(srv.port)
        code, _ = code_of(lambda: plain.GetStats(pb.GetStatsRequest(), timeout=5, metadata=a))
        chk.check(code == grpc.StatusCode.UNAVAILABLE, "a plaintext client is refused: %s" % code)
        no_cert = grpc.ssl_channel_credentials(root_certificates=files["ca.pem"])
        _, anon, _ = stub(srv.port, no_cert)
        code, _ = code_of(lambda: anon.GetStats(pb.GetStatsRequest(), timeout=5, metadata=a))
        chk.check(code == grpc.StatusCode.UNAVAILABLE, "a client without a certificate is refused: %s" % code)
    finally:
        ch.close()
        srv.stop()
        log = srv.text()
        chk.check(key_a not in log and key_b not in log, "no API key appears in the server log")


def internal_tls(ctx, chk):
    _files, d = make_certs(ctx)
    tls = ["--internal-tls-cert", os.path.join(d, "server.pem"), "--internal-tls-key",
           os.path.join(d, "server.key"), "--internal-tls-ca", os.path.join(d, "ca.pem")]
    coord = Proc(ctx, "tls_coordinator", ["coordinator", "--model", ctx.model, "--tp", 2, "--port", 0,
                                          "--worker-listen", "127.0.0.1:0"] + tls, ready_text="shardlm serving")
    workers = []
    try:
        endpoint = "127.0.0.1:%d" % coord.announced_port(WORKERS_PORT)
        workers = [Proc(ctx, "tls_worker%d" % i, ["worker", "--coordinator", endpoint, "--model", ctx.model,
                                                  "--rank", i] + tls) for i in (0, 1)]
        coord.wait_ready()
        ch, st, _ = stub(coord.announced_port(SERVING_PORT))
        chk.check(len(greedy(st, n=4)) == 4, "a group over mutual TLS serves")
        plain = subprocess.run([ctx.binary, "worker", "--coordinator", endpoint, "--model", ctx.model,
                                "--rank", "1", "--insecure-internal", "--register-timeout-ms", "3000"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        chk.check(plain.returncode == 1 and b"registration with" in plain.stdout,
                  "a plaintext worker cannot register (rc %d): %s" % (plain.returncode, plain.stdout[-300:]))
        chk.check(len(greedy(st, n=4)) == 4, "the group still serves")
        ch.close()
    finally:
        for p in [coord] + workers:
            p.stop()


def probes(ctx, chk):
    srv = ctx.serve("probes", 1, "--no-reflection", "--kv-cache-mb", "8")
    ch, st, _ = stub(srv.port)
    try:
        t0 = time.monotonic()
        r = subprocess.run([ctx.binary, "serve", "--model", ctx.model, "--tp", "2", "--port", str(srv.port)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        dt = time.monotonic() - t0
        chk.check(r.returncode != 0 and b"Address already in use" in r.stderr,
                  "serve on a port in use fails with the system's reason (rc %d): %s"
                  % (r.returncode, r.stderr[-300:]))
        chk.check(b"started worker" not in r.stderr and dt < 10, "... before any worker starts (%.1f s)" % dt)
        raw = ch.unary_unary("/shardlm.v1.Inference/Score", request_serializer=lambda x: x,
                             response_deserializer=lambda x: x)
        code, details = code_of(lambda: raw(b"\x0a\x03\x0a\x01\xff", timeout=10))
        chk.check(code == grpc.StatusCode.INVALID_ARGUMENT and "prompt.text" in details and "UTF-8" in details,
                  "invalid UTF-8 names the field: %s %s" % (code, details))
        # The same bytes are a Prompt in field 1 of Prefill (repeated) and
        # Generate (streaming) too; all three run on gRPC's callback API,
        # which on its own answers a parse failure with a bare UNIMPLEMENTED.
        raw_prefill = ch.unary_unary("/shardlm.v1.Inference/Prefill", request_serializer=lambda x: x,
                                     response_deserializer=lambda x: x)
        code, details = code_of(lambda: raw_prefill(b"\x0a\x03\x0a\x01\xff", timeout=10))
        chk.check(code == grpc.StatusCode.INVALID_ARGUMENT and "chunks[0].text" in details and "UTF-8" in details,
                  "... in Prefill: %s %s" % (code, details))
        raw_generate = ch.unary_stream("/shardlm.v1.Inference/Generate", request_serializer=lambda x: x,
                                       response_deserializer=lambda x: x)
        code, details = code_of(lambda: list(raw_generate(b"\x0a\x03\x0a\x01\xff", timeout=10)))
        chk.check(code == grpc.StatusCode.INVALID_ARGUMENT and "prompt.text" in details and "UTF-8" in details,
                  "... in Generate: %s %s" % (code, details))
        code, details = code_of(lambda: raw(b"\x0a\x05\xff", timeout=10))
        chk.check(code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid" in details,
                  "bytes that are no ScoreRequest: %s %s" % (code, details))
        chk.check(len(greedy(st, n=4)) == 4, "... and the server still serves")
        good = st.Prefill(pb.PrefillRequest(chunks=[sc.to_prompt(PROMPT)], keep=True), timeout=30).results[0].handle
        code, details = code_of(lambda: st.ReleaseChunks(pb.ReleaseChunksRequest(handles=[good, "f" * 32]),
                                                         timeout=10))
        chk.check(code == grpc.StatusCode.NOT_FOUND and "no handle was released" in details,
                  "ReleaseChunks with an unknown handle: %s %s" % (code, details))
        chk.check(len(greedy(st, n=2, prompt=" x", prefix_handle=good)) == 2, "... and the good one still works")
        st.ReleaseChunks(pb.ReleaseChunksRequest(handles=[good]), timeout=10)
        code, details = code_of(lambda: greedy(st, n=2, prompt=" x", prefix_handle="h" * 10000))
        chk.check(code == grpc.StatusCode.NOT_FOUND and len(details) < 300,
                  "a 10 kB handle: NOT_FOUND with a bounded message (%s, %d chars)" % (code, len(details)))
        info = st.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        too_long = [5] * (info.kv_cache_blocks * info.kv_block_size + 1)
        code, details = code_of(lambda: st.Score(pb.ScoreRequest(prompt=sc.to_prompt(too_long)), timeout=30))
        chk.check(code == grpc.StatusCode.INVALID_ARGUMENT and "max_new_tokens" not in details
                  and "prompt must hold at most" in details, "Score's length error: %s" % details)
        refl = ch.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                request_serializer=lambda x: x, response_deserializer=lambda x: x)
        code, _ = code_of(lambda: list(refl(iter([b"\x3a\x00"]), timeout=5)))
        chk.check(code == grpc.StatusCode.UNIMPLEMENTED, "--no-reflection: reflection is UNIMPLEMENTED (%s)" % code)
    finally:
        ch.close()
        srv.stop()


CASES = [("recovery_kill9", recovery_kill9), ("recovery_sigstop", recovery_sigstop), ("drain", drain),
         ("drain_group_signal", drain_group_signal), ("drain_bounded", drain_bounded),
         ("deadline_mid_prefill", deadline_mid_prefill), ("cancel_mid_stream", cancel_mid_stream),
         ("internal_security", internal_security), ("tls_and_api_keys", tls_and_api_keys), ("internal_tls", internal_tls), ("probes", probes)]


def run_main(doc, cases, label, ctx_class=None):
    """Parses --shardlm/--workdir/--only, runs `cases` on an Ops context (or `ctx_class`, a
    subclass whose close() ends what the cases shared), then checks that no worker of the test
    model is left running."""
    parsed = case_main_args(doc, [n for n, _ in cases])
    if parsed is None:
        return 2
    binary, workdir, only, args = parsed
    ctx = (ctx_class or Ops)(workdir, args, binary)
    try:
        rc = run_cases(cases, only, ctx, label)
    finally:
        if hasattr(ctx, "close"):
            ctx.close()
    left = wait_until_empty(lambda: [r for r in ps_rows() if ctx.model in r[3] and " worker " in r[3]], 10)
    if left:
        print("FAIL workers left behind: %s" % left)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(run_main(__doc__, CASES, "operations"))
