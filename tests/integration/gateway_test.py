#!/usr/bin/env python3
"""SGLang's model gateway (sglang-router 0.3.2, from PyPI) in front of two `serve` instances of
SmolLM2-135M-Instruct (GGUF), speaking vLLM's engine protocol over gRPC, asked by the official
`openai` client. Runs in the project's venv (scripts/requirements.txt pins the gateway).

The gateway renders the chat template and tokenizes itself, from the directory each instance
reports as model_path: `shardlm export-tokenizer` writes it from the GGUF, and serve reports it
(--router-model-path). Clients name that directory as the model.

Cases:
  chat_equal        chat completions through the gateway, unstreamed and streamed, equal the
                    instance's own OpenAI API answer (greedy), with the same prompt token count
  completions_501   /v1/completions is not routed to gRPC engines by this gateway release (501):
                    noted, so that a release that routes it shows up here
  structured        response_format json_schema through the gateway: valid by `jsonschema`; a
                    forced tool call: arguments valid against the tool's parameters
  disconnect        a client that leaves mid-stream leaves no work running on either instance
  cache_aware       --policy cache_aware keeps a four-turn conversation on one instance (its
                    prefix-cache hits grow, the other's do not); round robin spreads it
  failover          one instance killed (SIGKILL) under load: every call ends within its
                    timeout (those in flight on it may fail), and every call started once the
                    gateway's health check (every 1 s) can have seen the kill, 2 s after it, is
                    served by the other instance; one started before that may be routed to the
                    dead instance and fail ("transport error" in the gateway's log), never hang

Usage:
  .venv/bin/python tests/integration/gateway_test.py --shardlm build/shardlm --workdir DIR --gguf FILE
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
import harness  # noqa: E402
import sglang_gateway  # noqa: E402
from harness import Failure, LoggedProcess  # noqa: E402
import jsonschema  # noqa: E402
import openai  # noqa: E402
import shardlm_client as sc  # noqa: E402
import grpc  # noqa: E402

pb, pb_grpc = sc.pb, sc.pb_grpc
START_TIMEOUT_S = 120
PROMPTS = ["What is the capital of France?", "Write one sentence about the sea.",
           "Name three colours.", "How many legs does a spider have?"]


class Instance:
    """One `serve` of SmolLM2 with its gRPC and OpenAI ports. Dense f32 weights: the 4-bit
    kernels' results depend on how many rows a step holds, so a prompt whose prefix is cached
    (its tail computed alone) can take another greedy path than the same prompt computed whole;
    dense f32 gives the same logits either way, and the answers can be compared exactly."""

    def __init__(self, ctx, name):
        self.name = name
        self.proc = LoggedProcess([ctx.binary, "serve", "--model", ctx.args.gguf, "--tp", "1", "--port", 0,
                                   "--http-port", 0, "--router-model-path", ctx.tokenizer_dir,
                                   "--kv-cache-mb", "64", "--dtype", "f32", "--weights", "dense"],
                                  ctx.dir(name + ".log"))
        if not self.proc.wait_for(r"shardlm serving", START_TIMEOUT_S):
            raise Failure("%s did not start: %s" % (name, harness.tail(self.proc.text())))
        self.port = self.proc.announced_port(harness.SERVING_PORT)
        self.http = self.proc.announced_port(harness.HTTP_PORT)
        self.url = "grpc://127.0.0.1:%d" % self.port
        self.ch = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.stub = pb_grpc.InferenceStub(self.ch)
        self.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.http, api_key="none",
                                    max_retries=0, timeout=120)

    def stats(self):
        return self.stub.GetStats(pb.GetStatsRequest(), timeout=10)

    def stop(self, sig=signal.SIGTERM):
        self.ch.close()
        return self.proc.stop(sig)


class Gateway:
    """`python -m sglang_router.launch_router` over gRPC workers."""

    def __init__(self, ctx, name, workers, policy):
        self.proc, self.port, self.metrics = sglang_gateway.start(
            [w.url for w in workers], policy, ctx.tokenizer_dir, ctx.tiktoken_dir, ctx.dir(name + ".log"),
            extra=["--tool-call-parser", "json", "--health-check-interval-secs", "1"], timeout_s=START_TIMEOUT_S)
        self.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key="none",
                                    max_retries=0, timeout=120)

    def served_by(self):
        """{worker url: Generate calls started}, from the gateway's own metrics."""
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics, timeout=10).read().decode()
        out = {}
        for m in re.finditer(r'^smg_worker_cb_outcomes_total\{([^}]*)\} ([0-9.e+]+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("outcome") == "success":
                out[labels.get("worker")] = out.get(labels.get("worker"), 0) + float(m.group(2))
        return out

    def stop(self):
        return self.proc.stop()


class GatewayCtx(harness.Ctx):
    def __init__(self, workdir, args):
        super().__init__(workdir, args)
        self.binary = args.shardlm
        self.model = args.gguf  # run_main's leftover-worker scan
        self.tokenizer_dir = self.dir("smollm2-tokenizer")
        p = subprocess.run([self.binary, "export-tokenizer", "--model", args.gguf, "--out", self.tokenizer_dir],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            raise RuntimeError("export-tokenizer failed: %s" % p.stdout.decode(errors="replace"))
        self.tiktoken_dir = args.tiktoken_dir
        self._instances = None

    def instances(self):
        if self._instances is None:
            self._instances = [Instance(self, "serve-a"), Instance(self, "serve-b")]
        return self._instances

    def close(self):
        for i in self._instances or []:
            i.stop()


def chat(client, model, prompt, n=24, stream=False, **extra):
    """(text, usage or None) of a greedy chat completion."""
    msgs = [{"role": "user", "content": prompt}]
    if not stream:
        r = client.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0, **extra)
        return r.choices[0].message.content or "", r.usage, r.choices[0]
    text = ""
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0,
                                                stream=True, **extra):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return text, None, None


# --- cases -----------------------------------------------------------------------------------

def chat_equal(ctx, chk):
    a, b = ctx.instances()
    gw = Gateway(ctx, "gateway-rr", [a, b], "round_robin")
    try:
        name = a.client.models.list().data[0].id  # the instance's own API names the model its way
        for prompt in PROMPTS[:3]:
            direct, du, _ = chat(a.client, name, prompt)
            via, vu, _ = chat(gw.client, ctx.tokenizer_dir, prompt)
            chk.check(via == direct and vu.prompt_tokens == du.prompt_tokens,
                      "unstreamed through the gateway = the instance's own answer (%d prompt tokens): %r%s"
                      % (du.prompt_tokens, via[:60], "" if via == direct else " != %r" % direct[:60]))
            streamed, _, _ = chat(gw.client, ctx.tokenizer_dir, prompt, stream=True)
            chk.check(streamed == direct, "streamed deltas add up to the same text%s"
                      % ("" if streamed == direct else ": %r" % streamed[:80]))
        served = gw.served_by()
        chk.check(len(served) == 2 and all(v >= 2 for v in served.values()),
                  "round robin used both instances: %s" % served)
    finally:
        gw.stop()


def completions_501(ctx, chk):
    a, b = ctx.instances()
    gw = Gateway(ctx, "gateway-completions", [a], "round_robin")
    try:
        req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % gw.port, method="POST",
                                     data=json.dumps({"model": ctx.tokenizer_dir, "prompt": "Hi",
                                                      "max_tokens": 4}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            code = urllib.request.urlopen(req, timeout=30).status
        except urllib.error.HTTPError as e:
            code = e.code
        chk.check(code == 501, "the gateway answers /v1/completions for gRPC engines with 501 (its limit): %d"
                  % code)
        chk.note("completions reach shardlm directly (its OpenAI API) or through shardlm.v1")
    finally:
        gw.stop()


SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                          "country": {"type": "string", "maxLength": 24}},
          "required": ["city", "country"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                         "parameters": {"type": "object",
                                                        "properties": {"city": {"type": "string"},
                                                                       "unit": {"enum": ["c", "f"]}},
                                                        "required": ["city", "unit"],
                                                        "additionalProperties": False}}}


def structured(ctx, chk):
    a, b = ctx.instances()
    gw = Gateway(ctx, "gateway-structured", [a, b], "round_robin")
    try:
        text, _, _ = chat(gw.client, ctx.tokenizer_dir, "Describe Paris as JSON.", n=60,
                          response_format={"type": "json_schema",
                                           "json_schema": {"name": "city", "schema": SCHEMA}})
        try:
            jsonschema.validate(json.loads(text), SCHEMA)
            ok = True
        except (ValueError, jsonschema.ValidationError) as e:
            ok, text = False, "%s: %s" % (text, e)
        chk.check(ok, "response_format json_schema through the gateway is valid: %s" % text[:100])
        _, _, choice = chat(gw.client, ctx.tokenizer_dir, "What is the weather in Oslo?", n=60, tools=[TOOL],
                            tool_choice={"type": "function", "function": {"name": "get_weather"}})
        calls = choice.message.tool_calls or []
        ok = len(calls) == 1 and calls[0].function.name == "get_weather"
        if ok:
            try:
                jsonschema.validate(json.loads(calls[0].function.arguments), TOOL["function"]["parameters"])
            except (ValueError, jsonschema.ValidationError):
                ok = False
        chk.check(ok, "a forced tool call: get_weather with valid arguments: %s" % (
            [(c.function.name, c.function.arguments) for c in calls] or choice.message.content))
    finally:
        gw.stop()


def idle_everywhere(instances, seconds=10):
    deadline = time.monotonic() + seconds
    while True:
        stats = [i.stats() for i in instances]
        if all(s.running == 0 and s.waiting == 0 and s.referenced_blocks == 0 for s in stats):
            return True, ""
        if time.monotonic() > deadline:
            return False, "; ".join("%s: running %d waiting %d referenced %d" % (i.name, s.running, s.waiting,
                                                                               s.referenced_blocks)
                                    for i, s in zip(instances, stats))
        time.sleep(0.1)


def disconnect(ctx, chk):
    a, b = ctx.instances()
    gw = Gateway(ctx, "gateway-disconnect", [a, b], "round_robin")
    before = (a.proc.text() + b.proc.text()).count("VllmGenerate status=CANCELLED")
    try:
        for i in range(2):  # one on each instance
            stream = gw.client.chat.completions.create(
                model=ctx.tokenizer_dir, messages=[{"role": "user", "content": "Tell a long story."}],
                max_tokens=1000, temperature=0.7, stream=True, extra_body={"ignore_eos": True})
            got = 0
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    got += 1
                if got >= 3:
                    break
            stream.close()
        left_at = time.monotonic()
        ok, left = idle_everywhere([a, b], seconds=3)
        chk.check(ok, "clients that left mid-stream leave no work running on either instance within 3 s "
                  "(%.1f s) %s" % (time.monotonic() - left_at, left))
        logs = a.proc.text() + b.proc.text()
        cancelled = logs.count("VllmGenerate status=CANCELLED") - before
        chk.check(cancelled == 2, "both calls were cancelled, not run to their end: %d CANCELLED, %d Abort calls"
                  % (cancelled, logs.count("VllmAbort status=OK")))
    finally:
        gw.stop()


def cached_hits(instances):
    return [i.stats().prefix_cache_hits for i in instances]


def conversation(gw, model, turns=4):
    msgs = [{"role": "system", "content": "You are a helpful assistant. " * 20}]
    for t in range(turns):
        msgs.append({"role": "user", "content": "Question %d: %s" % (t, PROMPTS[t % len(PROMPTS)])})
        r = gw.client.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0)
        msgs.append({"role": "assistant", "content": r.choices[0].message.content or ""})


def cache_aware(ctx, chk):
    a, b = ctx.instances()
    for policy in ("cache_aware", "round_robin"):
        gw = Gateway(ctx, "gateway-" + policy, [a, b], policy)
        try:
            before = cached_hits([a, b])
            conversation(gw, ctx.tokenizer_dir)
            after = cached_hits([a, b])
            served = gw.served_by()
            hits = [x - y for x, y in zip(after, before)]
            if policy == "cache_aware":
                chk.check(sorted(served.values()) == [4] and (hits[0] > 0) != (hits[1] > 0),
                          "cache_aware keeps the 4 turns on one instance, whose prefix cache hits (%s): %s"
                          % (hits, served))
            else:
                chk.check(sorted(served.values()) == [2, 2], "round robin spreads them: %s, hits %s"
                          % (served, hits))
        finally:
            gw.stop()


# Two of the gateway's health checks (--health-check-interval-secs 1): by then it has seen the kill.
HEALTH_WINDOW_S = 2.0


def failover(ctx, chk):
    a, b = ctx.instances()
    gw = Gateway(ctx, "gateway-failover", [a, b], "round_robin")
    results = []
    lock = threading.Lock()

    def client(k, n):
        t0 = time.monotonic()
        try:
            text, _, _ = chat(gw.client, ctx.tokenizer_dir, PROMPTS[k % len(PROMPTS)], n=n,
                              extra_body={"ignore_eos": True})
            outcome = "ok"
        except openai.APIError as e:
            outcome = "error %s" % type(e).__name__
        with lock:
            results.append((k, t0, time.monotonic(), outcome))

    try:
        # Long calls, so that some are running on the instance when it is killed.
        threads = [threading.Thread(target=client, args=(k, 300)) for k in range(8)]
        for t in threads:
            t.start()
        running = 0
        deadline = time.monotonic() + 10
        while running == 0 and time.monotonic() < deadline:
            running = a.stats().running  # calls the kill will cut
            time.sleep(0.05)
        killed_at = time.monotonic()
        a.proc.proc.send_signal(signal.SIGKILL)
        after = [threading.Thread(target=client, args=(k, 24)) for k in range(8, 16)]
        for t in after:
            t.start()
            time.sleep(0.5)
        for t in threads + after:
            t.join(150)
        chk.check(all(not t.is_alive() for t in threads + after) and len(results) == 16,
                  "every call ended (%d of 16), none hangs" % len(results))
        early = [r for r in results if r[1] <= killed_at]
        chk.check(running > 0, "%d calls were running on the instance when it was killed; they ended: %s "
                  "(the gateway retries a failed unstreamed call on the other instance)"
                  % (running, [r[3] for r in early]))
        late = [r for r in results if r[1] > killed_at]
        seen = [r for r in late if r[1] > killed_at + HEALTH_WINDOW_S]
        chk.check(len(late) == 8 and len(seen) >= 3 and all(r[3] == "ok" for r in seen),
                  "the %d calls started %.0f s or more after the kill are all served (by the other instance): "
                  "%s; before that: %s" % (len(seen), HEALTH_WINDOW_S, [r[3] for r in seen],
                                           [r[3] for r in late if r not in seen]))
        chk.note("outcomes: %s" % sorted(r[3] for r in results))
    finally:
        gw.stop()
        a.proc.stop()
        ctx._instances = None
        b.stop()


CASES = [("chat_equal", chat_equal), ("completions_501", completions_501), ("structured", structured),
         ("disconnect", disconnect), ("cache_aware", cache_aware), ("failover", failover)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--tiktoken-dir", required=True, help="a folder holding o200k_base.tiktoken")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    parsed = harness.parse_case_args(args, [n for n, _ in CASES])
    if parsed is None:
        return 2
    _binary, _workdir, only = parsed
    ctx = GatewayCtx(args.workdir, args)
    try:
        rc = harness.run_cases(CASES, only, ctx, "gateway")
    finally:
        ctx.close()
    left = harness.wait_no_workers(args.gguf, 10)
    if left:
        print("FAIL workers left behind: %s" % left)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
