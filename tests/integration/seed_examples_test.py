#!/usr/bin/python3
"""Seed 002's examples as integration tests over real gRPC (`shardlm serve`).

One f32 tiny Llama model with the real Llama-3 tokenizer; one server per tp in
{1, 2}, plus a tp 1 server with --no-prefix-caching.  Every RPC goes through
the example client examples/python/shardlm_client.py (with a deadline), and
answers are held to the server's own cold computation and to the independent
NumPy reference (tests/reference/hf_reference.py), within --tol (1e-4).

Per tp round:
  prefill_scores       Prefill(few-shot text, top_k 4, keep) == cold Score == reference
  samples_from_handle  4 seeded samples from the handle: shape, reproducible, logprobs
                       == reference; greedy from the handle == cold greedy
  few_shot_batch       3 task chunks after the shared handle: scores == cold Score of the
                       concatenated ids; 2 samples per task; greedy == cold greedy
  chat_turn            a user turn after a Generate's chunk_result == cold on all ids
  prefix_caching       cached_tokens > 0 on a repeat, same outputs, same as --no-prefix-caching
  errors               NOT_FOUND / INVALID_ARGUMENT for bad handles and limits
  stop_strings         finish_reason "stop", text cut before the stop string
  cancel_frees_blocks  a cancelled stream leaves nothing running
  health               grpc.health.v1 Check
  reflection           list_services and file_containing_symbol
  all_blocks_free      after releasing every handle: referenced_blocks 0, running 0
Then shutdown: SIGTERM stops every server and leaves no `shardlm worker`.

Usage:
  /usr/bin/python3 tests/integration/seed_examples_test.py --shardlm build/shardlm --workdir DIR
Prints PASS/FAIL per case and `seed_examples: N passed, M failed`; exit 0 iff all pass.
"""

import argparse
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import hf_reference as ref  # noqa: E402
from harness import SERVING_PORT, Checker, Failure, Tally, run_case, wait_no_workers  # noqa: E402
import shardlm_client as sc  # noqa: E402
import grpc  # noqa: E402

GRPC_PROTO = "/usr/share/grpc-proto/grpc"
sc.generate_stubs(os.path.join(GRPC_PROTO, "health", "v1"), "health.proto")
sc.generate_stubs(os.path.join(GRPC_PROTO, "reflection", "v1alpha"), "reflection.proto")
import health_pb2, health_pb2_grpc  # noqa: E402,E401
import reflection_pb2, reflection_pb2_grpc  # noqa: E402,E401
from google.protobuf import descriptor_pb2  # noqa: E402

MODEL_FLAGS = ["--arch", "llama", "--hidden-size", "64", "--num-heads", "4", "--num-kv-heads", "2",
               "--intermediate-size", "128", "--seed", "2201", "--dtype", "f32"]
FEW_SHOT = "Cows have 4 legs. Fish have 0 legs."
TASKS = [" Humans have", " Potatos have", " Dinosaurs have"]
CHAT_PROMPT = "User: How many legs do cows have?\nAssistant:"
CHAT_TURN = "\nUser: and then?\nAssistant:"
LONG_TEXT = ("The committee met on a grey Tuesday morning to review the harbour plans. After two hours "
             "of debate about tides, budgets and the old lighthouse, the chair proposed a compromise: "
             "rebuild the northern pier first, repair the sea wall next spring, and leave the museum "
             "for a later vote. Nobody was entirely happy, which everyone agreed was a good sign. The "
             "minutes were typed up that afternoon, sent to the harbour master, and pinned to the "
             "notice board beside the ferry timetable, where the gulls ignored them.")
SEED = 424242
RPC_TIMEOUT_S = 30
START_TIMEOUT_S = 60


def max_diff(a, b):
    """Largest |a - b|; NaN (or None) on both sides counts as equal, on one side as inf."""
    a = np.array([np.nan if x is None else x for x in a], dtype=np.float64)
    b = np.array([np.nan if x is None else x for x in b], dtype=np.float64)
    if a.shape != b.shape:
        return float("inf"), -1
    if a.size == 0:
        return 0.0, -1
    d = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b))
    d = np.where(np.isnan(d), np.inf, d)
    i = int(np.argmax(d))
    return float(d[i]), i


# --- servers -------------------------------------------------------------------------------


class Server:
    def __init__(self, binary, model_dir, tp, log_path, extra=()):
        self.binary, self.model_dir, self.tp, self.extra = binary, model_dir, tp, list(extra)
        self.log_path = log_path
        self.proc = None
        self.ready = threading.Event()

    def start(self):
        self.port = None  # bound by the server (port 0), read from its "serving" line
        cmd = [self.binary, "serve", "--model", self.model_dir, "--tp", str(self.tp),
               "--port", "0"] + self.extra
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log)
        self.ready.clear()
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc):
        for line in proc.stdout:
            m = re.search(SERVING_PORT.encode(), line)
            if m:
                self.port = int(m.group(1))
                self.ready.set()

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready.is_set() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.ready.is_set():
            self.address = "127.0.0.1:%d" % self.port
            return
        self.stop()
        raise Failure("server --tp %d %s not ready (rc %s); log %s"
                      % (self.tp, " ".join(self.extra), self.proc.returncode, self.log_path))

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "killed after SIGTERM timed out"


# --- helpers -------------------------------------------------------------------------------

class Round:
    """State shared by the cases of one tp round."""

    def __init__(self, args, tp, server, nocache, model):
        self.args, self.tp, self.model = args, tp, model
        self.tol = args.tol
        self.c = sc.Client(server.address, timeout=RPC_TIMEOUT_S)
        self.nocache = sc.Client(nocache.address, timeout=RPC_TIMEOUT_S) if nocache else None
        self.channel = self.c.channel
        self.handles = set()   # every handle this round created and still holds
        self.fs = None         # the few-shot ChunkResult


def ref_logprobs(model, prompt, toks):
    """Reference log p of each generated token, and how many are the argmax (within 1e-4)."""
    lp = ref.log_softmax(ref.forward(model, list(prompt) + list(toks)))
    P = len(prompt)
    lps = [float(lp[P + i - 1, t]) for i, t in enumerate(toks)]
    argmax = sum(1 for i, t in enumerate(toks) if float(lp[P + i - 1].max() - lp[P + i - 1, t]) <= 1e-4)
    return lps, argmax


def greedy(c, prompt=None, prefix_handle="", n=8, **kw):
    out = c.generate(prompt, prefix_handle=prefix_handle, max_new_tokens=n, temperature=0,
                     ignore_eos=True, **kw)
    return out


def compare_gen(chk, label, got, want, tol):
    a, b = got["samples"][0], want["samples"][0]
    if chk.check(a["tokens"] == b["tokens"], "%s: tokens identical (%d)" % (label, len(a["tokens"]))):
        dm, at = max_diff(a["logprobs"], b["logprobs"])
        chk.check(dm <= tol, "%s: logprobs max|diff| %.3g at %d (tol %g)" % (label, dm, at, tol))
    else:
        chk.note("got %s\n          want %s" % (a["tokens"], b["tokens"]))


def check_vs_ref(chk, r, label, prompt, sample):
    lps, argmax = ref_logprobs(r.model, prompt, sample["tokens"])
    dm, at = max_diff(sample["logprobs"], lps)
    chk.check(dm <= r.tol, "%s: logprobs vs reference max|diff| %.3g at %d (tol %g)"
              % (label, dm, at, r.tol))
    return argmax


def expect_error(chk, label, fn, code, patterns=()):
    try:
        fn()
    except grpc.RpcError as e:
        msg = e.details() or ""
        ok = e.code() == code and all(re.search(p, msg) for p in patterns)
        chk.check(ok, "%s -> %s %r (want %s%s)" % (label, e.code().name, msg, code.name,
                                                   ", matching %s" % list(patterns) if patterns else ""))
        return
    chk.check(False, "%s -> OK (want %s)" % (label, code.name))


# --- cases ---------------------------------------------------------------------------------

def prefill_scores(r, chk):
    c = r.c
    fs_ids = c.tokenize(FEW_SHOT, add_special_tokens=True)
    [fs] = c.prefill([FEW_SHOT], top_k=4, keep=True)
    r.handles.add(fs["handle"])
    r.fs = fs
    chk.check(bool(fs["handle"]) and fs["prefix_tokens"] == 0, "handle %r, prefix_tokens %d"
              % (fs["handle"][:24], fs["prefix_tokens"]))
    chk.check(fs["token_ids"] == fs_ids, "token_ids == Tokenize(text, add_special_tokens) (%d ids)"
              % len(fs_ids))
    T = len(fs["token_ids"])
    chk.check(len(fs["scores"]) == T and math.isnan(fs["scores"][0]) and
              not any(math.isnan(s) for s in fs["scores"][1:]),
              "%d scores, the first NaN, the rest finite" % len(fs["scores"]))
    chk.check(len(fs["top"]) == T and all(len(t) == 4 for t in fs["top"][1:]) and
              len(fs["next_token_top"]) == 4, "top_k 4 alternatives per position and next_token_top")
    cold = c.score(FEW_SHOT)
    chk.check(cold["token_ids"] == fs["token_ids"], "cold Score token_ids identical")
    dm, at = max_diff(fs["scores"], cold["scores"])
    chk.check(dm <= r.tol, "Prefill scores vs cold Score: max|diff| %.3g at %d (tol %g)" % (dm, at, r.tol))
    want = ref.score(r.model, fs["token_ids"])
    dm, at = max_diff(fs["scores"], want)
    chk.check(dm <= r.tol, "Prefill scores vs reference: max|diff| %.3g at %d (tol %g)" % (dm, at, r.tol))
    lp = ref.log_softmax(ref.forward(r.model, fs["token_ids"])[-1])
    order = np.argsort(-lp, kind="stable")[:4]
    dm, at = max_diff([a[1] for a in fs["next_token_top"]], [lp[i] for i in order])
    chk.check(dm <= r.tol and fs["next_token_top"][0][0] == int(order[0]),
              "next_token_top vs reference top-4: max|diff| %.3g, ids %s vs %s"
              % (dm, [a[0] for a in fs["next_token_top"]], [int(i) for i in order]))


def samples_from_handle(r, chk):
    c, h, fs_ids = r.c, r.fs["handle"], r.fs["token_ids"]
    kw = dict(prefix_handle=h, n=4, max_new_tokens=8, temperature=0.7, seed=SEED, ignore_eos=True)
    a = c.generate(**kw)
    b = c.generate(**kw)
    sa = a["samples"]
    chk.check(len(sa) == 4 and all(len(s["tokens"]) == 8 and len(s["logprobs"]) == 8 and
                                   s["finish_reason"] == "length" for s in sa),
              "4 samples of 8 tokens, finish_reason length: %s" % [len(s["tokens"]) for s in sa])
    chk.check([s["tokens"] for s in sa] == [s["tokens"] for s in b["samples"]] and
              [s["text"] for s in sa] == [s["text"] for s in b["samples"]],
              "same seed twice: identical samples")
    chk.check(len(set(tuple(s["tokens"]) for s in sa)) >= 2, "the 4 samples are not all the same")
    u = a["usage"]
    chk.check(u["prompt_tokens"] == len(fs_ids) and u["generated_tokens"] == 32,
              "usage %s (prompt_tokens %d, generated 32)" % (u, len(fs_ids)))
    worst = 0.0
    for s in sa:
        lps, _ = ref_logprobs(r.model, fs_ids, s["tokens"])
        worst = max(worst, max_diff(s["logprobs"], lps)[0])
    chk.check(worst <= r.tol, "sample logprobs vs reference: max|diff| %.3g (tol %g)" % (worst, r.tol))
    g = greedy(c, prefix_handle=h)
    cold = greedy(c, fs_ids)
    compare_gen(chk, "greedy from handle vs cold greedy", g, cold, r.tol)
    argmax = check_vs_ref(chk, r, "greedy from handle", fs_ids, g["samples"][0])
    chk.check(argmax == 8, "greedy tokens are the reference argmax: %d/8" % argmax)


def few_shot_batch(r, chk):
    c, h, fs_ids = r.c, r.fs["handle"], r.fs["token_ids"]
    res = c.prefill(TASKS, prefix_handles=[h], top_k=0, keep=True)
    r.handles.update(x["handle"] for x in res)
    chk.check(len(res) == 3, "3 ChunkResults")
    n_samples = 0
    for task, x in zip(TASKS, res):
        ids = c.tokenize(task, add_special_tokens=False)
        full = fs_ids + ids
        chk.check(x["token_ids"] == ids and x["prefix_tokens"] == len(fs_ids),
                  "%r: token_ids %s (no BOS), prefix_tokens %d" % (task, x["token_ids"], x["prefix_tokens"]))
        chk.check(not any(math.isnan(s) for s in x["scores"]), "%r: no NaN score after a prefix" % task)
        cold = c.score(full)["scores"][len(fs_ids):]
        dm, at = max_diff(x["scores"], cold)
        chk.check(dm <= r.tol, "%r: chunk scores vs cold Score(ids): max|diff| %.3g at %d" % (task, dm, at))
        dm, at = max_diff(x["scores"], ref.score(r.model, full)[len(fs_ids):])
        chk.check(dm <= r.tol, "%r: chunk scores vs reference: max|diff| %.3g at %d" % (task, dm, at))
        s = c.generate(prefix_handle=x["handle"], n=2, max_new_tokens=8, temperature=0.7, seed=SEED,
                       ignore_eos=True)["samples"]
        n_samples += sum(1 for y in s if len(y["tokens"]) == 8)
        compare_gen(chk, "%r: greedy from task handle vs cold" % task,
                    greedy(c, prefix_handle=x["handle"]), greedy(c, full), r.tol)
    chk.check(n_samples == 6, "2 samples x 3 tasks = %d samples of 8 tokens" % n_samples)


def chat_turn(r, chk):
    c = r.c
    first = greedy(c, CHAT_PROMPT, n=6, return_chunk_result=True)
    s = first["samples"][0]
    cr = s["chunk_result"]
    if not chk.check(cr is not None and cr["handle"], "Generate returned a chunk_result with a handle"):
        return
    r.handles.add(cr["handle"])
    P = first["prompt_token_ids"]
    chk.check(cr["token_ids"] == s["tokens"] and cr["prefix_tokens"] == len(P),
              "chunk_result: the generated tokens, prefix_tokens %d == prompt length %d"
              % (cr["prefix_tokens"], len(P)))
    chk.check(max_diff(cr["scores"], s["logprobs"])[0] <= 1e-6, "chunk_result scores == logprobs")
    second = greedy(c, CHAT_TURN, prefix_handle=cr["handle"], return_chunk_result=True)
    cr2 = second["samples"][0]["chunk_result"]
    if cr2:
        r.handles.add(cr2["handle"])
    turn = c.tokenize(CHAT_TURN, add_special_tokens=False)
    chk.check(second["prompt_token_ids"] == turn, "the turn is tokenized without BOS: %s" % turn)
    all_ids = P + s["tokens"] + turn
    chk.check(second["usage"]["prompt_tokens"] == len(all_ids),
              "usage.prompt_tokens %d == %d" % (second["usage"]["prompt_tokens"], len(all_ids)))
    compare_gen(chk, "turn after chunk_result vs cold on all ids", second, greedy(c, all_ids), r.tol)
    check_vs_ref(chk, r, "turn after chunk_result", all_ids, second["samples"][0])


def prefix_caching(r, chk):
    c = r.c
    ids = c.tokenize(LONG_TEXT, add_special_tokens=True)
    chk.note("long prompt: %d tokens" % len(ids))
    hits0 = c.stats()["prefix_cache_hits"]
    g1, g2 = greedy(c, ids), greedy(c, ids)
    chk.check(g1["usage"]["cached_tokens"] == 0, "first call: cached_tokens %d" % g1["usage"]["cached_tokens"])
    chk.check(g2["usage"]["cached_tokens"] > 0, "second call: cached_tokens %d > 0 (of %d)"
              % (g2["usage"]["cached_tokens"], g2["usage"]["prompt_tokens"]))
    chk.check(c.stats()["prefix_cache_hits"] > hits0, "GetStats prefix_cache_hits grew")
    compare_gen(chk, "cached vs uncached call", g2, g1, 1e-5)
    if r.nocache:
        n1, n2 = greedy(r.nocache, ids), greedy(r.nocache, ids)
        chk.check(n2["usage"]["cached_tokens"] == 0,
                  "--no-prefix-caching: repeat has cached_tokens %d" % n2["usage"]["cached_tokens"])
        compare_gen(chk, "--no-prefix-caching repeat", n2, n1, 1e-5)
        compare_gen(chk, "tp %d cached vs --no-prefix-caching tp 1" % r.tp, g2, n1,
                    1e-5 if r.tp == 1 else r.tol)


def errors(r, chk):
    c, h = r.c, r.fs["handle"]
    G = grpc.StatusCode
    ctx = c.model_info()["max_context_length"]
    vocab = c.model_info()["vocab_size"]
    expect_error(chk, "Generate unknown prefix_handle", lambda: c.generate(prefix_handle="nope-123"),
                 G.NOT_FOUND)
    expect_error(chk, "Prefill unknown prefix_handle", lambda: c.prefill(["x"], prefix_handles=["nope"]),
                 G.NOT_FOUND)
    [tmp] = c.prefill(["Released soon."], keep=True)
    c.release([tmp["handle"]])
    expect_error(chk, "Generate with a released handle",
                 lambda: c.generate(prefix_handle=tmp["handle"], max_new_tokens=2), G.NOT_FOUND)
    expect_error(chk, "ReleaseChunks of a released handle", lambda: c.release([tmp["handle"]]), G.NOT_FOUND)
    fs_len, turn = len(r.fs["token_ids"]), c.tokenize(" x", add_special_tokens=False)
    too_many = ctx - fs_len - len(turn) + 1
    expect_error(chk, "prefix %d + prompt %d + max_new_tokens %d > context" % (fs_len, len(turn), too_many),
                 lambda: c.generate(" x", prefix_handle=h, max_new_tokens=too_many),
                 G.INVALID_ARGUMENT, [r"\b%d\b" % ctx, r"\b%d\b" % too_many])
    expect_error(chk, "prompt + max_new_tokens %d > context" % ctx,
                 lambda: c.generate([1, 2, 3], max_new_tokens=ctx - 2),
                 G.INVALID_ARGUMENT, [r"\b%d\b" % ctx, r"\b%d\b" % (ctx - 2)])
    expect_error(chk, "n=17", lambda: c.generate("Hi", n=17), G.INVALID_ARGUMENT, [r"\bn\b", r"17"])
    expect_error(chk, "top_p=0", lambda: c.generate("Hi", top_p=0.0), G.INVALID_ARGUMENT, [r"top_p"])
    expect_error(chk, "Prefill 2 chunks, 3 prefix_handles",
                 lambda: c.prefill(["a", "b"], prefix_handles=[h, h, h]), G.INVALID_ARGUMENT)
    expect_error(chk, "Generate token id %d" % vocab, lambda: c.generate([1, vocab]),
                 G.INVALID_ARGUMENT, [r"vocabulary"])
    expect_error(chk, "Prefill token id %d" % (vocab + 5), lambda: c.prefill([[vocab + 5]]),
                 G.INVALID_ARGUMENT, [r"vocabulary"])
    expect_error(chk, "Score token id -1", lambda: c.score([5, -1]), G.INVALID_ARGUMENT, [r"vocabulary"])
    st = c.stats()
    chk.check(st["running"] == 0, "nothing left running after the errors (running %d)" % st["running"])


def stop_strings(r, chk):
    c = r.c
    prompt = "The quick brown fox"
    full = greedy(c, prompt, n=24)["samples"][0]["text"]
    sub = None
    for start in range(6, len(full) - 4):
        cand = full[start:start + 4]
        if cand.strip() and "\ufffd" not in cand:
            sub = cand
            break
    if not chk.check(sub is not None, "a stop string from the greedy text %r" % full):
        return
    cut = full[:full.find(sub)]
    out = greedy(c, prompt, n=24, stop=[sub])["samples"][0]
    chk.check(out["finish_reason"] == "stop", "stop=[%r]: finish_reason %r" % (sub, out["finish_reason"]))
    chk.check(out["text"] == cut and sub not in out["text"],
              "text %r == text before the stop string %r" % (out["text"], cut))


def cancel_frees_blocks(r, chk):
    c = r.c
    before = c.stats()
    call = c.generate_stream("Tell me a long story.", max_new_tokens=2000, temperature=0, ignore_eos=True)
    got = 0
    for msg in call:
        got += len(msg.token_ids)
        if got >= 3:
            break
    mid = c.stats()
    chk.check(mid["running"] >= 1, "running %d while streaming" % mid["running"])
    call.cancel()
    try:
        next(call)
        chk.check(False, "the cancelled stream yields more messages")
    except grpc.RpcError as e:
        chk.check(e.code() == grpc.StatusCode.CANCELLED, "the stream ends with %s" % e.code().name)
    except StopIteration:
        chk.check(False, "the cancelled stream ended normally")
    t0 = time.monotonic()
    st = c.stats()
    while (st["running"] or st["referenced_blocks"] != before["referenced_blocks"]) and \
            time.monotonic() - t0 < 5:
        time.sleep(0.05)
        st = c.stats()
    chk.check(st["running"] == 0 and st["referenced_blocks"] == before["referenced_blocks"],
              "after cancel: running %d, referenced_blocks %d (before %d) within %.2f s"
              % (st["running"], st["referenced_blocks"], before["referenced_blocks"], time.monotonic() - t0))


def health(r, chk):
    stub = health_pb2_grpc.HealthStub(r.channel)
    S = health_pb2.HealthCheckResponse
    for svc in ("", "shardlm.v1.Inference"):
        resp = stub.Check(health_pb2.HealthCheckRequest(service=svc), timeout=RPC_TIMEOUT_S)
        chk.check(resp.status == S.SERVING, "Check(%r): %s" % (svc, S.ServingStatus.Name(resp.status)))
    expect_error(chk, "Check('nope')",
                 lambda: stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=RPC_TIMEOUT_S),
                 grpc.StatusCode.NOT_FOUND)


def reflection(r, chk):
    stub = reflection_pb2_grpc.ServerReflectionStub(r.channel)
    R = reflection_pb2.ServerReflectionRequest

    def ask(req):
        return list(stub.ServerReflectionInfo(iter([req]), timeout=RPC_TIMEOUT_S))[0]
    names = [s.name for s in ask(R(list_services="")).list_services_response.service]
    chk.check("shardlm.v1.Inference" in names and "grpc.health.v1.Health" in names,
              "list_services: %s" % names)
    # One stream per symbol: gRPC C++ 1.51's reflection reuses one response object per stream,
    # so a later answer on the same stream also repeats the files of earlier answers.
    for pkg, svc, method in (("shardlm.v1", "Inference", "Prefill"), ("grpc.health.v1", "Health", "Check")):
        resp = ask(R(file_containing_symbol="%s.%s" % (pkg, svc)))
        fds = []
        for raw in resp.file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto()
            fd.ParseFromString(raw)
            fds.append(fd)
        found = [m.name for s in (fds[0].service if fds and fds[0].package == pkg else [])
                 if s.name == svc for m in s.method]
        chk.check(method in found, "file_containing_symbol %s.%s: first of %s defines it, methods %s"
                  % (pkg, svc, [fd.name for fd in fds], found))


def all_blocks_free(r, chk):
    c = r.c
    for h in sorted(r.handles):
        c.release([h])
    r.handles.clear()
    st = c.stats()
    chk.check(st["referenced_blocks"] == 0 and st["running"] == 0 and st["handles"] == 0 and
              st["free_blocks"] == st["num_blocks"], "after releasing every handle: %s" % st)


def rpc_failure(e, chk):
    """How a case that dies from a gRPC error is reported."""
    chk.failures.append("rpc")
    print("    FAIL  RPC error %s: %s\n%s" % (e.code().name, e.details(),
                                             "".join(traceback.format_tb(e.__traceback__)[-2:])))


CASES = [prefill_scores, samples_from_handle, few_shot_batch, chat_turn, prefix_caching, errors,
         stop_strings, cancel_frees_blocks, health, reflection, all_blocks_free]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shardlm", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--tp", default="1,2", help="comma-separated tp sizes")
    args = p.parse_args()
    binary = os.path.abspath(args.shardlm)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    tally = Tally()

    model_dir = os.path.join(workdir, "llama_tok")
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    for attempt in (0, 1):
        proc = subprocess.run([binary, "make-tiny-model", model_dir] + MODEL_FLAGS,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.returncode == 0:
            break
        time.sleep(3)
    if proc.returncode != 0:
        print("make-tiny-model failed: %s" % proc.stdout.decode(errors="replace"))
        print("seed_examples: 0 passed, 1 failed")
        return 1
    model = ref.load_model(model_dir)

    tps = [int(x) for x in args.tp.split(",") if x]
    servers = {tp: Server(binary, model_dir, tp, os.path.join(workdir, "serve_tp%d.log" % tp))
               for tp in tps}
    nocache = Server(binary, model_dir, 1, os.path.join(workdir, "serve_nocache.log"),
                     ["--no-prefix-caching"])
    everything = list(servers.values()) + [nocache]
    try:
        t0 = time.monotonic()
        for s in everything:
            s.start()
        start_failures = []
        for s in everything:
            try:
                s.wait_ready()
            except Failure as e:
                start_failures.append(str(e))
                print("    FAIL  " + str(e))
        tally.verdict("start_servers", start_failures, t0)
        for tp in tps:
            if servers[tp].proc.poll() is not None or not servers[tp].ready.is_set():
                continue
            r = Round(args, tp, servers[tp], nocache if nocache.ready.is_set() else None, model)
            for fn in CASES:
                run_case(tally, "tp%d.%s" % (tp, fn.__name__), fn, r,
                         handlers=[(grpc.RpcError, rpc_failure)])
            r.c.close()
            if r.nocache:
                r.nocache.close()
    finally:
        print("shutdown:")
        t0 = time.monotonic()
        chk = Checker()
        for s in everything:
            rc = s.stop()
            chk.check(rc == 0,
                      "serve --tp %d %s stopped by SIGTERM: rc %s" % (s.tp, " ".join(s.extra), rc))
        left = wait_no_workers(model_dir, 5)
        chk.check(not left, "no `shardlm worker` process left%s" % ("" if not left else ": %s" % left))
        tally.verdict("shutdown", chk.failures, t0)
    return tally.summary("seed_examples")


if __name__ == "__main__":
    sys.exit(main())
