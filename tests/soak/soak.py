#!/usr/bin/python3
"""Soak test: one `shardlm serve --tp 2` under mixed, misbehaving traffic for a bounded time.

--clients threads (default 16) loop for --minutes (default 10) over a random mix of:
  gRPC    Generate streams (n, stop strings, sampling), some cancelled at a random point;
          calls with short deadlines; Prefill with keep (handles kept, used as the prefix of
          further Prefill and Generate calls, released at once or held up to 2 minutes and
          released later by the same client); ReleaseChunks of unknown or already released
          handles (all-or-nothing); bad requests; Score, Tokenize, Detokenize, GetStats
  HTTP    /v1/completions and /v1/chat/completions, streaming and not; streams dropped
          (socket closed) after a few SSE events; bad requests (malformed JSON, out-of-range
          parameters, unknown model or route, missing key) that must get the expected 4xx
          with a JSON error body
Every outcome is counted. An unexpected one (a 5xx, INTERNAL/UNKNOWN or any status the call
cannot give, a call still running at its 60 s deadline, a malformed answer) fails the run.

At the end (clients stopped, every handle released, a few seconds' wait) the server must be
idle: /metrics shows no KV block used, no chunk handle, no request running or waiting, no
public call in flight (shardlm_calls_in_flight, where the build has it), no worker restart or
group re-formation, no INTERNAL/UNKNOWN in shardlm_requests_total; GetStats agrees; serve exits 0 on SIGTERM and leaves no worker. The RSS, threads and open
files of the coordinator and of each worker, after a 20 s warm-up and at the end, are printed.
The exit status is 0 only if every check passed.

Run (about 10.5 minutes in all; --minutes 1 for a quick one):
  /usr/bin/python3 tests/soak/soak.py --shardlm build/shardlm --minutes 10 --clients 16
"""

import argparse
import collections
import http.client
import json
import os
import random
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import operations_test as ops  # noqa: E402  (the tiny model, `serve`, stubs, workers_of)
import openai_test as oai  # noqa: E402  (the `serve --tp 2 --http-port 0` with an API key)
import observability_test as obs  # noqa: E402  (the /metrics scrape and parser)
from harness import METRICS_PORT, ps_rows, wait_no_workers  # noqa: E402

grpc, pb = ops.grpc, ops.pb
Code = grpc.StatusCode

CALL_TIMEOUT_S = 60        # a call still running after this is a hang
WARMUP_S = 20              # the first RSS sample is taken this long after the traffic starts
PROGRESS_EVERY_S = 30
IDLE_WAIT_S = 3            # after the clients stop, before the final scrape
IDLE_POLL_S = 30           # then at most this long for the gauges to settle
MAX_HOLD_S = 120           # a kept handle is released by its client within this (TTL is 600 s)
MAX_KEPT = 8               # handles a client holds at most
VOCAB = 128256             # the tiny model's (Llama 3) vocabulary
MODEL = "tiny"             # a --served-model-name of openai_test.Server

WORDS = ("harbour committee grey Tuesday morning ship cargo tide lantern rope anchor gull "
         "north wind salt bread market clock bell river stone bridge letter captain").split()
SHARED_PREFIXES = [ops.PROMPT * k for k in (1, 2, 4)] + [" ".join(WORDS)]
BAD_HTTP = [  # (path, body: dict or raw bytes, send the key, expected status)
    ("/v1/completions", b"{not json", True, 400),
    ("/v1/completions", b'{"model": "tiny", "prompt": "cut off', True, 400),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "temperature": 2.5}, True, 400),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "n": 17}, True, 400),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 9000}, True, 400),
    ("/v1/completions", {"model": MODEL, "prompt": [[1, 2, 99999999]]}, True, 400),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "stream": True, "top_p": 0}, True, 400),
    ("/v1/completions", {"model": "no-such-model", "prompt": "x"}, True, 404),
    ("/v1/completions", {"model": MODEL, "prompt": "x"}, False, 401),
    ("/v1/chat/completions", {"model": MODEL, "messages": []}, True, 400),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, True, 400),
    ("/v1/chat/completions", {"model": "no-such-model", "messages": oai.MESSAGES}, True, 404),
    ("/v1/engines", {}, True, 404),
]


def ids_prompt(ids):
    return pb.Prompt(token_ids=pb.TokenIds(ids=ids))


BAD_GRPC = [  # (name, method, request, expected code)
    ("id outside vocab", "Generate", pb.GenerateRequest(prompt=ids_prompt([VOCAB + 5]), max_new_tokens=2),
     Code.INVALID_ARGUMENT),
    ("n 17", "Generate", pb.GenerateRequest(prompt=ids_prompt([1, 2]), max_new_tokens=2, n=17),
     Code.INVALID_ARGUMENT),
    ("past context", "Generate", pb.GenerateRequest(prompt=ids_prompt([1, 2]), max_new_tokens=9000),
     Code.INVALID_ARGUMENT),
    ("temperature 101", "Generate", pb.GenerateRequest(prompt=ids_prompt([1]), max_new_tokens=2,
                                                       sampling=pb.SamplingParams(temperature=101)),
     Code.INVALID_ARGUMENT),
    ("top_logprobs 21", "Generate", pb.GenerateRequest(prompt=ids_prompt([1]), max_new_tokens=2, top_logprobs=21),
     Code.INVALID_ARGUMENT),
    ("unknown prefix handle", "Generate", pb.GenerateRequest(prompt=ids_prompt([1]), max_new_tokens=2,
                                                             prefix_handle="soak-no-such-handle"), Code.NOT_FOUND),
    ("no chunks", "Prefill", pb.PrefillRequest(keep=True), Code.INVALID_ARGUMENT),
    ("2 handles for 3 chunks", "Prefill", pb.PrefillRequest(chunks=[ids_prompt([1])] * 3, keep=True,
                                                            prefix_handles=["a", "b"]), Code.INVALID_ARGUMENT),
    ("unknown prefix of a kept chunk", "Prefill", pb.PrefillRequest(chunks=[ids_prompt([1])], keep=True,
                                                                    prefix_handles=["soak-x"]), Code.NOT_FOUND),
    ("empty Score", "Score", pb.ScoreRequest(), Code.INVALID_ARGUMENT),
]


class Unexpected(Exception):
    """An outcome the call must not have: a failure of the soak test."""


# --- counting --------------------------------------------------------------------------------

class Tally:
    """Outcome counts per operation and the unexpected outcomes, shared by the clients."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.defaultdict(collections.Counter)
        self.unexpected = []          # (operation, detail)

    def count(self, op, outcome, n=1):
        with self.lock:
            self.counts[op][outcome] += n

    def fail(self, op, detail):
        with self.lock:
            self.counts[op]["UNEXPECTED"] += 1
            self.unexpected.append((op, detail))

    def total(self):
        """Operations counted (the "handles" row counts handles, not operations)."""
        with self.lock:
            return sum(sum(c.values()) for op, c in self.counts.items() if op != "handles")


def grpc_outcome(e, allowed):
    """The lower-case name of an RpcError's code if it is in `allowed`, else Unexpected."""
    if e.code() in allowed:
        return e.code().name.lower()
    raise Unexpected("%s: %s" % (e.code().name, (e.details() or "")[:200]))


# --- one client ------------------------------------------------------------------------------

class Client:
    """A thread's channel, random source and kept handles; each op_* method is one operation
    and returns its outcome (or raises Unexpected)."""

    def __init__(self, index, srv, tally, seed):
        self.index = index
        self.srv = srv
        self.tally = tally
        self.rng = random.Random(seed)
        self.ch, self.st, _ = ops.stub(srv.proc.port)
        self.md = srv.md
        self.kept = []  # [(handle, release at monotonic time)]
        self.released = collections.deque(maxlen=4)  # handles this client released lately

    # --- the loop ---

    def run(self, stop):
        ops_by_weight = [(self.op_generate, 14), (self.op_generate_cancelled, 10), (self.op_short_deadline, 6),
                         (self.op_prefill_keep, 14), (self.op_release_bad, 3), (self.op_grpc_bad, 5),
                         (self.op_grpc_misc, 4), (self.op_http, 14), (self.op_http_stream, 10),
                         (self.op_http_dropped, 8), (self.op_http_bad, 8)]
        fns, weights = zip(*ops_by_weight)
        while not stop.is_set():
            self.do("release_due", self.op_release_due)
            fn = self.rng.choices(fns, weights)[0]
            self.do(fn.__name__[3:], fn)
        self.do("release_at_end", self.op_release_all)
        self.ch.close()

    def do(self, name, fn):
        """Runs one operation and counts its outcome; anything it did not expect is a failure."""
        try:
            outcome = fn()
            if outcome:
                self.tally.count(name, outcome)
        except Unexpected as e:
            self.tally.fail(name, str(e))
        except grpc.RpcError as e:
            what = "hang (no status in %d s)" % CALL_TIMEOUT_S if e.code() == Code.DEADLINE_EXCEEDED else e.code().name
            self.tally.fail(name, "%s: %s" % (what, (e.details() or "")[:200]))
        except socket.timeout:
            self.tally.fail(name, "hang (HTTP: nothing for %d s)" % CALL_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001  (a client must never die: count it and go on)
            self.tally.fail(name, "%s: %s" % (type(e).__name__, str(e)[:200]))

    # --- random requests ---

    def text(self):
        rng = self.rng
        return rng.choice(SHARED_PREFIXES) + " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))

    def prompt(self):
        if self.rng.random() < 0.25:
            return ids_prompt([self.rng.randrange(VOCAB) for _ in range(self.rng.randint(1, 64))])
        return pb.Prompt(text=self.text())

    def sampling(self):
        rng = self.rng
        if rng.random() < 0.4:
            return pb.SamplingParams(temperature=0)
        return pb.SamplingParams(temperature=rng.choice([0.5, 1.0, 1.3]), top_k=rng.choice([0, 5, 40]),
                                 top_p=rng.choice([0.9, 1.0]), seed=rng.randrange(1 << 30))

    def generate_request(self, max_new_tokens, **kw):
        """A random GenerateRequest; kw overrides its fields."""
        rng = self.rng
        fields = dict(prompt=self.prompt(), sampling=self.sampling(), max_new_tokens=max_new_tokens,
                      n=rng.choice([1, 1, 1, 2, 4]), ignore_eos=rng.random() < 0.5,
                      stop=["the"] if rng.random() < 0.2 else [], top_logprobs=rng.choice([0, 0, 3]))
        fields.update(kw)
        return pb.GenerateRequest(**fields)

    # --- gRPC operations ---

    def op_generate(self):
        req = self.generate_request(self.rng.randint(1, 48))
        results = read_stream(self.st.Generate(req, timeout=CALL_TIMEOUT_S, metadata=self.md))
        if len(results) != max(req.n, 1):
            raise Unexpected("%d results for n=%d" % (len(results), req.n))
        return "ok"

    def op_generate_cancelled(self):
        """A long stream cancelled after a random number of messages (0: at once); or a
        Prefill (keep=false: a cancelled keep could lose its handle) cancelled at random."""
        rng = self.rng
        if rng.random() < 0.2:
            req = pb.PrefillRequest(chunks=[self.prompt() for _ in range(rng.randint(1, 8))], top_k=rng.choice([0, 4]))
            fut = self.st.Prefill.future(req, timeout=CALL_TIMEOUT_S, metadata=self.md)
            time.sleep(rng.uniform(0, 0.05))
            fut.cancel()
            try:
                fut.result()
                return "prefill finished first"
            except grpc.FutureCancelledError:
                return "prefill cancelled"
        call = self.st.Generate(self.generate_request(rng.randint(100, 600), ignore_eos=True),
                                timeout=CALL_TIMEOUT_S, metadata=self.md)
        cancel_after = rng.randint(0, 30)
        seen = 0
        try:
            if cancel_after == 0:
                call.cancel()
            for _ in call:
                seen += 1
                if seen == cancel_after:
                    call.cancel()
        except grpc.RpcError as e:
            return grpc_outcome(e, {Code.CANCELLED})
        return "finished first"

    def op_short_deadline(self):
        """Generate, Prefill or Score with a deadline of 5-300 ms: DEADLINE_EXCEEDED or OK."""
        rng = self.rng
        timeout = rng.uniform(0.005, 0.3)
        kind = rng.choice(["generate", "prefill", "score"])
        try:
            if kind == "generate":
                read_stream(self.st.Generate(self.generate_request(rng.randint(50, 400)), timeout=timeout,
                                             metadata=self.md))
            elif kind == "prefill":  # no keep: a handle made as the deadline passes would be lost
                self.st.Prefill(pb.PrefillRequest(chunks=[self.prompt() for _ in range(rng.randint(1, 16))]),
                                timeout=timeout, metadata=self.md)
            else:
                self.st.Score(pb.ScoreRequest(prompt=self.prompt()), timeout=timeout, metadata=self.md)
        except grpc.RpcError as e:
            return kind + " " + grpc_outcome(e, {Code.DEADLINE_EXCEEDED})
        return kind + " ok"

    def op_prefill_keep(self):
        """Prefill with keep (maybe after a kept prefix), Generate from a new handle (maybe
        keeping its continuation), then release the new handles now or keep them for later."""
        rng = self.rng
        chunks = [pb.Prompt(text=" " + self.text()) for _ in range(rng.randint(1, 3))]
        prefixes = [rng.choice(self.kept)[0]] if self.kept and rng.random() < 0.4 else []
        res = self.st.Prefill(pb.PrefillRequest(chunks=chunks, prefix_handles=prefixes, keep=True,
                                                top_k=rng.choice([0, 2])), timeout=CALL_TIMEOUT_S, metadata=self.md)
        handles = [r.handle for r in res.results if r.handle]
        self.keep(handles)
        if len(handles) != len(chunks):
            raise Unexpected("%d handles for %d chunks" % (len(handles), len(chunks)))
        self.tally.count("prefill_keep", "ok after a kept prefix" if prefixes else "ok")
        if rng.random() < 0.7:
            keep_continuation = rng.random() < 0.3
            req = pb.GenerateRequest(prefix_handle=rng.choice(handles), max_new_tokens=rng.randint(1, 24),
                                     sampling=self.sampling(), n=rng.choice([1, 2]),
                                     return_chunk_result=keep_continuation)
            if rng.random() < 0.5:
                req.prompt.CopyFrom(pb.Prompt(text=" and then"))
            results = read_stream(self.st.Generate(req, timeout=CALL_TIMEOUT_S, metadata=self.md))
            more = [r.chunk_result.handle for r in results if r.chunk_result.handle]
            self.keep(more)
            handles += more
            if keep_continuation and len(more) != max(req.n, 1):
                raise Unexpected("return_chunk_result gave %d handles for n=%d" % (len(more), req.n))
            self.tally.count("generate_from_handle", "ok, continuation kept" if more else "ok")
        if rng.random() < 0.5:
            self.release(handles, "at once")
        return None

    def keep(self, handles):
        """Tracks new handles, each to be released at a random time within MAX_HOLD_S (unless
        the operation that made them releases them at once)."""
        now = time.monotonic()
        self.kept += [(h, now + self.rng.uniform(1, MAX_HOLD_S)) for h in handles]
        self.tally.count("handles", "made", len(handles))

    def release(self, handles, when):
        """ReleaseChunks; the handles are no longer tracked once it succeeded."""
        self.st.ReleaseChunks(pb.ReleaseChunksRequest(handles=handles), timeout=CALL_TIMEOUT_S, metadata=self.md)
        gone = set(handles)
        self.kept = [k for k in self.kept if k[0] not in gone]
        self.released.extend(handles)
        self.tally.count("release", when)
        self.tally.count("handles", "released " + when, len(handles))

    def op_release_due(self):
        """Releases the kept handles whose time has come, and the oldest past MAX_KEPT."""
        now = time.monotonic()
        self.kept.sort(key=lambda k: k[1])
        due = [h for i, (h, at) in enumerate(self.kept) if at <= now or i < len(self.kept) - MAX_KEPT]
        if due:
            self.release(due, "later")
        return None

    def op_release_all(self):
        if self.kept:
            self.release([h for h, _ in self.kept], "at the end")
        return None

    def op_release_bad(self):
        """ReleaseChunks of an unknown or already released handle, alone or after a kept one
        (all or nothing: the kept handle stays, and its later release must succeed): NOT_FOUND."""
        rng = self.rng
        gone = rng.choice(self.released) if self.released and rng.random() < 0.5 else None
        handles = [gone or "soak-unknown-%d" % rng.randrange(1 << 20)]
        with_kept = self.kept and rng.random() < 0.7
        if with_kept:
            handles.insert(0, rng.choice(self.kept)[0])
        what = ("released" if gone else "unknown") + (" after a kept one" if with_kept else "")
        try:
            self.st.ReleaseChunks(pb.ReleaseChunksRequest(handles=handles), timeout=CALL_TIMEOUT_S, metadata=self.md)
        except grpc.RpcError as e:
            return "%s: %s" % (what, grpc_outcome(e, {Code.NOT_FOUND}))
        raise Unexpected("ReleaseChunks of %s handle: OK" % what)

    def op_grpc_bad(self):
        name, method, req, want = self.rng.choice(BAD_GRPC)
        try:
            call = getattr(self.st, method)(req, timeout=CALL_TIMEOUT_S, metadata=self.md)
            if method == "Generate":
                list(call)
        except grpc.RpcError as e:
            if e.code() != want:
                raise Unexpected("%s: %s (want %s): %s" % (name, e.code().name, want.name, (e.details() or "")[:150]))
            return want.name.lower()
        raise Unexpected("%s: OK (want %s)" % (name, want.name))

    def op_grpc_misc(self):
        kind = self.rng.choice(["Score", "Tokenize", "Detokenize", "GetStats", "GetModelInfo"])
        if kind == "Score":
            res = self.st.Score(pb.ScoreRequest(prompt=self.prompt()), timeout=CALL_TIMEOUT_S, metadata=self.md)
            if not res.token_ids or len(res.scores) != len(res.token_ids):
                raise Unexpected("Score: %d scores for %d tokens" % (len(res.scores), len(res.token_ids)))
        elif kind == "Tokenize":
            if not self.st.Tokenize(pb.TokenizeRequest(text=self.text()), timeout=CALL_TIMEOUT_S,
                                    metadata=self.md).ids:
                raise Unexpected("Tokenize: no ids")
        elif kind == "Detokenize":
            ids = [self.rng.randrange(VOCAB) for _ in range(20)]
            self.st.Detokenize(pb.DetokenizeRequest(ids=ids), timeout=CALL_TIMEOUT_S, metadata=self.md)
        elif kind == "GetStats":
            self.st.GetStats(pb.GetStatsRequest(), timeout=CALL_TIMEOUT_S, metadata=self.md)
        else:
            self.st.GetModelInfo(pb.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S, metadata=self.md)
        return kind + " ok"

    # --- HTTP operations ---

    def http_body(self, stream, max_tokens):
        rng = self.rng
        chat = rng.random() < 0.5
        body = {"model": rng.choice([MODEL, "tiny-alias"]), "max_tokens": max_tokens, "stream": stream,
                "n": rng.choice([1, 1, 2]), "temperature": rng.choice([0, 0.8]), "seed": rng.randrange(1000)}
        if chat:
            body["messages"] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": self.text()}]
        else:
            body["prompt"] = self.text() if rng.random() < 0.8 else [self.text(), self.text()]
        if stream and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
        return ("/v1/chat/completions" if chat else "/v1/completions"), body

    def op_http(self):
        path, body = self.http_body(False, self.rng.randint(1, 32))
        status, data = http_post(self.srv, path, body)
        if status != 200 or not isinstance(data, dict):
            raise Unexpected("%s: %s %s" % (path, status, str(data)[:200]))
        prompts = len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1
        if len(data.get("choices", [])) != prompts * body["n"] or "usage" not in data:
            raise Unexpected("%s: %d choices for %d x n=%d" % (path, len(data.get("choices", [])), prompts, body["n"]))
        return endpoint(path) + " 200"

    def op_http_stream(self):
        path, body = self.http_body(True, self.rng.randint(1, 32))
        conn, sock, resp = http_open(self.srv, path, body)
        try:
            if resp.status != 200:
                raise Unexpected("%s stream: %s %s" % (path, resp.status, resp.read()[:200]))
            events, done = 0, False
            for line in resp:
                line = line.decode().rstrip("\r\n")
                if not line:
                    continue
                if done or not line.startswith("data: "):
                    raise Unexpected("%s stream: stray line %r" % (path, line[:100]))
                if line == "data: [DONE]":
                    done = True
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    raise Unexpected("%s stream: error event %s" % (path, json.dumps(event)[:200]))
                events += 1
            if not done or events == 0:
                raise Unexpected("%s stream: %d events, [DONE] %s" % (path, events, done))
        finally:
            http_close(conn, sock, resp)
        return endpoint(path) + " streamed"

    def op_http_dropped(self):
        """A long stream whose client closes the socket after 1-5 events."""
        path, body = self.http_body(True, self.rng.randint(200, 800))
        body["ignore_eos"] = True
        conn, sock, resp = http_open(self.srv, path, body)
        try:
            if resp.status != 200:
                raise Unexpected("%s stream: %s %s" % (path, resp.status, resp.read()[:200]))
            drop_after, events = self.rng.randint(1, 5), 0
            while events < drop_after:
                line = resp.readline()
                if not line:
                    return endpoint(path) + " ended first"
                if line.startswith(b"data: "):
                    events += 1
        finally:
            http_close(conn, sock, resp, hang_up=True)
        return endpoint(path) + " dropped"

    def op_http_bad(self):
        path, body, with_key, want = self.rng.choice(BAD_HTTP)
        status, data = http_post(self.srv, path, body, with_key)
        err = data.get("error") if isinstance(data, dict) else None
        if status != want or not isinstance(err, dict) or not err.get("message"):
            raise Unexpected("%s %s: %s %s (want %d with a JSON error)" % (path, str(body)[:60], status,
                                                                          str(data)[:150], want))
        return str(status)


def endpoint(path):
    return "chat" if "chat" in path else "completions"


def read_stream(call):
    """Reads a Generate stream to its end; returns the last message's SampleResults."""
    results = []
    for r in call:
        if r.results:
            results = list(r.results)
    return results


def http_open(srv, path, body, with_key=True):
    """(connection, its socket, response) of a POST; body is a dict (sent as JSON) or bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if with_key:
        headers["Authorization"] = "Bearer " + oai.KEY
    conn = http.client.HTTPConnection("127.0.0.1", srv.http, timeout=CALL_TIMEOUT_S)
    conn.request("POST", path, body=data, headers=headers)
    sock = conn.sock  # getresponse() may hand it to the response
    return conn, sock, conn.getresponse()


def http_close(conn, sock, resp, hang_up=False):
    """Closes a connection; hang_up: shuts the socket down first, as a client that goes away."""
    if hang_up:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    resp.close()
    conn.close()
    sock.close()


def http_post(srv, path, body, with_key=True):
    """(status, parsed JSON body or the raw text if it is not JSON)."""
    conn, sock, resp = http_open(srv, path, body, with_key)
    try:
        raw = resp.read()
    finally:
        http_close(conn, sock, resp)
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw[:300].decode(errors="replace")


# --- the server and its processes ------------------------------------------------------------

def start_server(ctx, extra):
    """`serve --tp 2` with the HTTP API (port 0), an API key and a metrics port."""
    srv = oai.Server(ctx, "soak", "--metrics-port", 0, *extra)
    srv.metrics_port = srv.proc.announced_port(METRICS_PORT)
    return srv


def stop_stray_serve(ctx):
    """SIGTERM to a `serve` of our model that did not come up (start_server raised)."""
    for pid, _ppid, _stat, argv in ps_rows():
        if argv.startswith(ctx.binary + " serve ") and ctx.model in argv:
            os.kill(pid, signal.SIGTERM)
    wait_no_workers(ctx.model, 20)


def processes(srv):
    """{name: pid}: the coordinator (serve) and its workers."""
    procs = {"coordinator": srv.proc.proc.pid}
    for rank, pid in sorted(ops.workers_of(srv.proc.proc.pid).items()):
        procs["worker rank %d" % rank] = pid
    return procs


def proc_sample(pid):
    """{rss_kb, hwm_kb, threads, fds} of a live process, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return {"rss_kb": int(fields["VmRSS"].split()[0]), "hwm_kb": int(fields["VmHWM"].split()[0]),
                "threads": int(fields["Threads"]), "fds": len(os.listdir("/proc/%d/fd" % pid))}
    except (OSError, KeyError, ValueError):
        return None


def sample_all(procs):
    return {name: proc_sample(pid) for name, pid in procs.items()}


def metrics_now(srv):
    samples, _ = obs.parse(obs.scrape(srv.metrics_port)[0])
    return samples


def idle_state(srv, st):
    """(problems, metric values, GetStats) of the server that should now be idle."""
    m = metrics_now(srv)
    v = lambda name, **labels: obs.value(m, name, **labels)  # noqa: E731
    s = st.GetStats(pb.GetStatsRequest(), timeout=10, metadata=srv.md)
    want = [("shardlm_kv_cache_blocks{used}", v("shardlm_kv_cache_blocks", state="used"), 0),
            ("shardlm_chunk_handles", v("shardlm_chunk_handles"), 0),
            ("shardlm_requests_running", v("shardlm_requests_running"), 0),
            ("shardlm_requests_waiting", v("shardlm_requests_waiting"), 0),
            ("free + cached blocks", v("shardlm_kv_cache_blocks", state="free") +
             v("shardlm_kv_cache_blocks", state="cached"), s.num_blocks),
            ("GetStats referenced_blocks", s.referenced_blocks, 0), ("GetStats handles", s.handles, 0),
            ("GetStats running", s.running, 0), ("GetStats waiting", s.waiting, 0)]
    if ("shardlm_calls_in_flight", frozenset()) in m:  # builds that have it: every public call ended
        want.append(("shardlm_calls_in_flight", v("shardlm_calls_in_flight"), 0))
    problems = ["%s is %g, want %g" % (name, got, exp) for name, got, exp in want if got != exp]
    return problems, want, m


def wait_idle(srv, st):
    """idle_state once it has no problems, or the last one after IDLE_POLL_S."""
    time.sleep(IDLE_WAIT_S)
    deadline = time.monotonic() + IDLE_POLL_S
    while True:
        problems, want, m = idle_state(srv, st)
        if not problems or time.monotonic() > deadline:
            return problems, want, m
        time.sleep(1)


def request_codes(m):
    """{(method, code): count} from shardlm_requests_total."""
    out = {}
    for (name, labels), count in m.items():
        if name == "shardlm_requests_total":
            d = dict(labels)
            out[(d.get("method", "?"), d.get("code", "?"))] = int(count)
    return out


# --- reports ---------------------------------------------------------------------------------

def print_progress(t0, tally, srv, st, procs):
    """One line: operations so far, GetStats, and the RSS of each process (its trend shows a leak)."""
    rss = " ".join("%.0f" % (x["rss_kb"] / 1024) if x else "gone" for x in sample_all(procs).values())
    try:
        s = st.GetStats(pb.GetStatsRequest(), timeout=10, metadata=srv.md)
        stats = "running %d, waiting %d, handles %d, blocks referenced %d" % (s.running, s.waiting, s.handles,
                                                                               s.referenced_blocks)
    except grpc.RpcError as e:
        stats = "GetStats failed: %s %s" % (e.code().name, e.details())
    print("  %5.0f s  %6d operations, %d unexpected; %s; RSS MiB %s" % (
        time.monotonic() - t0, tally.total(), len(tally.unexpected), stats, rss))
    sys.stdout.flush()


def print_operations(tally):
    print("\noperation              count  outcomes")
    for op in sorted(tally.counts):
        c = tally.counts[op]
        count = "" if op == "handles" else sum(c.values())  # handles made and released: no total
        print("  %-20s %6s  %s" % (op, count, ", ".join("%s %d" % kv for kv in sorted(c.items()))))
    print("  %-20s %6d" % ("total", tally.total()))
    if tally.unexpected:
        print("\nunexpected outcomes (%d; the first 30):" % len(tally.unexpected))
        for op, detail in tally.unexpected[:30]:
            print("  %-20s %s" % (op, detail))


def print_memory(procs, warm, end):
    print("\nprocess          pid      RSS warm MiB  RSS end MiB  growth MiB  peak MiB  threads     fds")
    for name, pid in procs.items():
        a, b = warm.get(name), end.get(name)
        if a is None or b is None:
            print("  %-14s %-8d gone (warm %s, end %s)" % (name, pid, a is not None, b is not None))
            continue
        print("  %-14s %-8d %12.1f %12.1f %+11.1f %9.1f  %3d -> %-3d  %3d -> %-3d" % (
            name, pid, a["rss_kb"] / 1024, b["rss_kb"] / 1024, (b["rss_kb"] - a["rss_kb"]) / 1024,
            b["hwm_kb"] / 1024, a["threads"], b["threads"], a["fds"], b["fds"]))


def print_codes(codes):
    by_method = collections.defaultdict(list)
    for (method, code), n in sorted(codes.items()):
        by_method[method].append("%s %d" % (code, n))
    print("\nshardlm_requests_total")
    for method in sorted(by_method):
        print("  %-22s %s" % (method, ", ".join(by_method[method])))


# --- the run ---------------------------------------------------------------------------------

def run_clients(srv, args, tally, procs):
    """Runs the clients for --minutes; returns (samples of `procs` after the warm-up, clients
    still running at the end: hung)."""
    stop = threading.Event()
    rng = random.Random(args.seed)
    clients = [Client(i, srv, tally, rng.randrange(1 << 30)) for i in range(args.clients)]
    threads = [threading.Thread(target=c.run, args=(stop,), name="client-%d" % c.index, daemon=True)
               for c in clients]
    ch, st, _ = ops.stub(srv.proc.port)
    duration = args.minutes * 60
    warmup = min(WARMUP_S, duration / 2)
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(warmup)
    warm = sample_all(procs)
    print("  warm-up over after %.0f s: RSS sampled (%s)" % (warmup, ", ".join(procs)))
    next_progress = t0 + PROGRESS_EVERY_S
    while time.monotonic() < t0 + duration:
        time.sleep(max(0.0, min(next_progress, t0 + duration) - time.monotonic()))
        if time.monotonic() >= next_progress:
            print_progress(t0, tally, srv, st, procs)
            next_progress += PROGRESS_EVERY_S
    stop.set()
    print("  %.0f s: clients stopping (each finishes its call and releases its handles)" % (time.monotonic() - t0))
    deadline = time.monotonic() + CALL_TIMEOUT_S + 30
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    ch.close()
    hung = [t.name for t in threads if t.is_alive()]
    return warm, hung


def final_checks(srv, procs_warm, hung):
    """Checks (and prints) that the server is at rest and its processes are the same; returns
    the failed checks."""
    failures = []
    if hung:
        failures.append("clients still in a call %d s after the end: %s" % (CALL_TIMEOUT_S + 30, hung))
    ch, st, _ = ops.stub(srv.proc.port)
    problems, want, m = wait_idle(srv, st)
    ch.close()
    print("\nat rest (%d s after the clients stopped, up to %d s more)" % (IDLE_WAIT_S, IDLE_POLL_S))
    for name, got, exp in want:
        print("  %-4s %-32s %g" % ("ok" if got == exp else "FAIL", name, got))
    failures += problems
    for name, exp in (("shardlm_worker_restarts_total", 0), ("shardlm_group_reforms_total", 0),
                      ("shardlm_group_serving", 1)):
        got = obs.value(m, name)
        print("  %-4s %-32s %g" % ("ok" if got == exp else "FAIL", name, got))
        if got != exp:
            failures.append("%s is %g, want %g" % (name, got, exp))
    codes = request_codes(m)
    print_codes(codes)
    bad = {k: n for k, n in codes.items() if k[1] in ("INTERNAL", "UNKNOWN", "DATA_LOSS", "UNAVAILABLE")}
    if bad:
        failures.append("server-side error statuses: %s" % bad)
    procs = processes(srv)
    if procs != procs_warm:
        failures.append("the processes changed: %s at the start, %s at the end" % (procs_warm, procs))
    return failures


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--shardlm", default="build/shardlm", help="the binary (default build/shardlm)")
    ap.add_argument("--minutes", type=float, default=10, help="traffic duration (default 10; fractions allowed)")
    ap.add_argument("--clients", type=int, default=16, help="client threads (default 16)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock, printed)")
    ap.add_argument("--workdir", default=None, help="model and server log (default: a temporary folder, "
                                                     "removed after a run that passes)")
    ap.add_argument("--serve-args", default="", help="extra `serve` flags, e.g. \"--kv-cache-mb 4\"")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time()) % 100000
    return args


def soak(srv, args):
    """The traffic, then the checks and the tables; returns the failed checks."""
    tally = Tally()
    procs = processes(srv)
    warm, hung = run_clients(srv, args, tally, procs)
    failures = final_checks(srv, procs, hung)
    print_memory(procs, warm, sample_all(procs))
    print_operations(tally)
    if tally.unexpected:
        failures.append("%d unexpected outcomes" % len(tally.unexpected))
    handles = tally.counts["handles"]
    released = sum(n for what, n in handles.items() if what.startswith("released"))
    if released != handles["made"]:
        failures.append("the clients made %d handles and released %d" % (handles["made"], released))
    return failures


def stop_server(srv, ctx):
    """SIGTERM, then SIGKILL after 20 s; returns the failed checks of the shutdown."""
    srv.ch.close()
    rc = srv.proc.stop()
    left = wait_no_workers(ctx.model, 10)
    print("\nserve exited %s" % rc)
    failures = []
    if rc == -signal.SIGKILL:
        failures.append("serve did not exit within 20 s of SIGTERM and was killed (a call that never ended "
                        "holds up gRPC's Server::Shutdown?)")
    elif rc != 0:
        failures.append("serve exited %s on SIGTERM" % rc)
    if left:
        failures.append("workers left after serve stopped: %s" % left)
    return failures


def main():
    args = parse_args()
    binary = os.path.abspath(args.shardlm)
    if not os.path.isfile(binary):
        print("shardlm binary not found: %s" % binary, file=sys.stderr)
        return 2
    workdir = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="shardlm-soak-")
    os.makedirs(workdir, exist_ok=True)
    t_start = time.monotonic()
    print("soak: %s clients for %g minutes, seed %d, workdir %s" % (args.clients, args.minutes, args.seed, workdir))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` stops the server
    ctx = ops.Ops(workdir, args, binary)  # writes the tiny model once
    try:
        srv = start_server(ctx, shlex.split(args.serve_args))
    except BaseException:
        stop_stray_serve(ctx)
        raise
    print("serve pid %d: gRPC %d, HTTP %d, metrics %d; %s" % (srv.proc.proc.pid, srv.proc.port, srv.http,
                                                             srv.metrics_port, processes(srv)))
    failures = []
    try:
        failures += soak(srv, args)
    finally:
        failures += stop_server(srv, ctx)
    print("total %.0f s (setup, %g min of traffic, checks, shutdown)" % (time.monotonic() - t_start, args.minutes))
    for f in failures:
        print("FAIL " + f)
    print("soak: %s" % ("FAILED (server log: %s)" % srv.proc.log_path if failures else "passed"))
    if not failures and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
