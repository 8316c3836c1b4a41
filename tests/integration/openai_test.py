#!/usr/bin/python3
"""The OpenAI-compatible HTTP API over real processes, with curl and the official `openai` npm client.

Cases (a tiny f32 Llama with the Llama-3 tokenizer and its chat template, `serve --tp 2
--http-port 0 --api-key-file F`; every HTTP request sends the key unless said):
  completions     curl: /v1/completions greedy text equals the gRPC Generate text of the same
                  prompt on the same server, usage counts the same tokens; streamed (SSE) pieces
                  join to the same text, none empty, `data: [DONE]` last; n=2 greedy gives two
                  equal choices; logprobs=2 gives per-token logprobs and 2 alternatives each
  chat            /v1/chat/completions renders the messages with the model's template: its
                  prompt is the text python3-jinja2 renders (as transformers does), tokenized by
                  the independent @lenml tokenizer with one BOS; the greedy reply equals gRPC
                  Generate on those ids; the stream starts with the role, has no empty deltas,
                  ends with finish_reason, the usage chunk and [DONE]
  openai_npm      the official `openai` package: models.list, completions and chat, streaming
                  and not, logprobs, include_usage, and its errors (400 naming the parameter,
                  404 for an unknown model) agree with what curl saw
  errors          bad requests get OpenAI's error shape with 400/401/404 naming the parameter
                  and the limit: out-of-range values, unknown arguments, a prompt past the
                  context, bad JSON, a missing key, an unknown route; nothing is left running
  disconnect      a client that goes away mid-stream, or during a long non-streaming request,
                  has its request cancelled: the running count drops to 0 and every KV block is
                  free again within seconds, and the call is logged CANCELLED
  slow_clients    with --http-threads 4: at start (the moment "shardlm serving" is printed) the HTTP
                  and metrics ports accept and /health says ok; then 100 connections trickling
                  their headers a byte at a time, 40 more with a body that never arrives and 60
                  idle kept-alive ones: /health, a completion and /metrics each answer within
                  1 s; the trickling ones are closed at --http-request-timeout-s (2 s), and
                  past --http-max-idle-connections 8 the oldest idle ones are closed
  http_edges      the HTTP server's edges: HEAD answers and closes; a known path with the wrong
                  method is 405 with Allow; an HTTP/1.0 client gets its stream unchunked, ended
                  by the close; over TLS (--tls-cert) health and two completions on one
                  kept-alive connection, the request sent the moment the handshake ends
  chat_template_flag  `--chat-template FILE` replaces the model's template (here Llama 3.2's
                  from the npm fixtures), checked against python3-jinja2 the same way

Usage:
  /usr/bin/python3 tests/integration/openai_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import operations_test as ops  # noqa: E402  (its servers, stubs and helpers)
from harness import HTTP_PORT, Failure  # noqa: E402

import grpc  # noqa: E402
import jinja2  # noqa: E402  (python3-jinja2: the reference renderer)
import jinja2.ext  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

pb, sc = ops.pb, ops.sc
ROOT = ops.ROOT
NPM = os.path.join(ROOT, "third_party", "npm", "node_modules")
KEY = "sk-test-openai-0123456789"
PROMPT = ops.PROMPT
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": PROMPT}]


# --- helpers ---------------------------------------------------------------------------------

class Server:
    """One `serve --tp 2` with the HTTP API, shared by the cases that can share it."""

    def __init__(self, ctx, name, *extra):
        keys = ctx.dir("api-keys")
        with open(keys, "w") as f:
            f.write(KEY + "\n")
        self.proc = ctx.serve(name, 2, "--http-port", 0, "--api-key-file", keys, "--served-model-name",
                              "tiny,tiny-alias", *extra)
        self.http = self.proc.announced_port(HTTP_PORT)
        self.base = "http://127.0.0.1:%d" % self.http
        self.ch, self.st, _ = ops.stub(self.proc.port)
        self.md = [("authorization", "Bearer " + KEY)]

    def stop(self):
        self.ch.close()
        self.proc.stop()


def post(srv, path, body, key=KEY, raw=None, scheme="Bearer "):
    """(status, parsed JSON body, headers) of a POST."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(srv.base + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", scheme + key)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), dict(e.headers)


def curl_stream(srv, path, body):
    """The raw SSE lines of a streamed POST, through curl -N."""
    p = subprocess.run(["curl", "-sS", "-N", "-X", "POST", srv.base + path, "-H", "Content-Type: application/json",
                        "-H", "Authorization: Bearer " + KEY, "-d", json.dumps(body)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if p.returncode != 0:
        raise Failure("curl failed: %s" % p.stderr.decode(errors="replace"))
    return p.stdout.decode().split("\n")


def sse_events(lines):
    """(JSON events, whether [DONE] came last, stray lines)."""
    events, done, stray = [], False, []
    for line in lines:
        if not line:
            continue
        if not line.startswith("data: "):
            stray.append(line)
        elif line == "data: [DONE]":
            done = True
        else:
            if done:
                stray.append("after [DONE]: " + line)
            events.append(json.loads(line[6:]))
    return events, done, stray


def grpc_text(srv, ids, n):
    """Greedy gRPC Generate on token ids: (text, generated ids)."""
    req = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=ids)), max_new_tokens=n,
                             sampling=pb.SamplingParams(temperature=0))
    text, toks = "", []
    for r in srv.st.Generate(req, timeout=60, metadata=srv.md):
        text += r.text
        toks.extend(r.token_ids)
    return text, toks


def grpc_prompt_ids(srv, text):
    return list(srv.st.Tokenize(pb.TokenizeRequest(text=text, add_special_tokens=True), timeout=30,
                                metadata=srv.md).ids)


def reference_render(template, messages, add_generation_prompt=True, bos="<|begin_of_text|>",
                     eos="<|end_of_text|>"):
    """The chat template rendered as transformers' apply_chat_template renders it."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


def reference_ids(text):
    """@lenml/tokenizers' ids of `text` (no special tokens added; those in the text are matched)."""
    p = subprocess.run(["node", os.path.join(ROOT, "tests", "tokenizer", "reference_tokenize.js"), "llama3"],
                       input=json.dumps({"text": text}) + "\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    if p.returncode != 0:
        raise Failure("reference tokenizer failed: %s" % p.stderr)
    return json.loads(p.stdout.strip().split("\n")[-1])["ids"]


def stats(srv):
    return srv.st.GetStats(pb.GetStatsRequest(), timeout=10, metadata=srv.md)


def wait_idle(srv, seconds=10):
    """Stats once nothing runs and every block is free (or the last seen after `seconds`)."""
    until = time.monotonic() + seconds
    while True:
        s = stats(srv)
        if (s.running == 0 and s.free_blocks == s.num_blocks) or time.monotonic() > until:
            return s
        time.sleep(0.1)


def check_stream_pieces(chk, events, what, chat):
    """Text pieces of a stream; checks that none is empty."""
    pieces, finish = [], None
    for e in events:
        for ch in e.get("choices", []):
            if chat:
                if "content" in ch["delta"]:
                    pieces.append(ch["delta"]["content"])
            elif ch.get("text") or not ch.get("finish_reason"):
                pieces.append(ch.get("text", ""))
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    chk.check(pieces and all(p for p in pieces), "%s: %d pieces, none empty" % (what, len(pieces)))
    return "".join(pieces), finish


# --- cases -----------------------------------------------------------------------------------

def completions(ctx, chk):
    srv = ctx.shared()
    status, body, headers = post(srv, "/v1/completions",
                                 {"model": "tiny", "prompt": PROMPT, "max_tokens": 12, "temperature": 0})
    chk.check(status == 200, "200 (got %s: %s)" % (status, body))
    text = body["choices"][0]["text"]
    ids = grpc_prompt_ids(srv, PROMPT)
    want, toks = grpc_text(srv, ids, 12)
    chk.check(text == want, "the HTTP text equals gRPC Generate's on the same server: %r" % text)
    chk.check(body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": len(toks),
                                "total_tokens": len(ids) + len(toks),
                                "prompt_tokens_details": {"cached_tokens": body["usage"]["prompt_tokens_details"][
                                    "cached_tokens"]}},
              "usage counts the same tokens: %s" % body["usage"])
    chk.check(body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["model"] == "tiny",
              "object, id and model fields")
    chk.check(headers.get("x-request-id") and body["id"] == "cmpl-" + headers["x-request-id"],
              "the request id is echoed and names the completion")
    chk.check(body["choices"][0]["finish_reason"] in ("stop", "length"), "finish_reason %s" %
              body["choices"][0]["finish_reason"])

    lines = curl_stream(srv, "/v1/completions", {"model": "tiny-alias", "prompt": PROMPT, "max_tokens": 12,
                                                 "temperature": 0, "stream": True})
    events, done, stray = sse_events(lines)
    chk.check(done and not stray, "curl -N: every line is an SSE data event, [DONE] last (%s)" % stray[:2])
    joined, finish = check_stream_pieces(chk, events, "completion stream", chat=False)
    chk.check(joined == text, "the streamed pieces join to the same text")
    chk.check(finish == body["choices"][0]["finish_reason"], "the same finish_reason streamed")

    status, body, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": [PROMPT, ids], "n": 2,
                                                     "max_tokens": 6, "temperature": 0, "logprobs": 2,
                                                     "ignore_eos": True})
    chk.check(status == 200 and len(body["choices"]) == 4, "two prompts (text and ids) x n=2: 4 choices")
    chk.check(len({c["text"] for c in body["choices"]}) == 1, "greedy choices agree (text prompt = its ids)")
    lp = body["choices"][1]["logprobs"]
    chk.check(len(lp["tokens"]) == 6 and len(lp["token_logprobs"]) == 6 and
              all(len(t) == 2 for t in lp["top_logprobs"]) and all(v <= 0 for v in lp["token_logprobs"]),
              "logprobs: 6 tokens, each with its logprob and 2 alternatives")
    chk.check("".join(lp["tokens"]) == body["choices"][1]["text"], "the logprob tokens spell the text")
    chk.check(body["usage"]["completion_tokens"] == 24, "usage counts every choice (%s)" % body["usage"])


def chat(ctx, chk):
    srv = ctx.shared()
    with open(os.path.join(ctx.model, "tokenizer_config.json")) as f:
        template = json.load(f)["chat_template"]
    rendered = reference_render(template, MESSAGES)
    ids = reference_ids(rendered)
    chk.check(ids.count(128000) == 1 and ids[0] == 128000, "the reference prompt has exactly one BOS")
    status, body, _ = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": MESSAGES,
                                                          "max_completion_tokens": 10, "temperature": 0})
    chk.check(status == 200, "200 (got %s: %s)" % (status, body))
    chk.check(body["usage"]["prompt_tokens"] == len(ids),
              "prompt tokens %d = python3-jinja2 render tokenized by @lenml (%d)" % (
                  body["usage"]["prompt_tokens"], len(ids)))
    want, toks = grpc_text(srv, ids, 10)
    msg = body["choices"][0]["message"]
    chk.check(msg == {"role": "assistant", "content": want},
              "the reply equals gRPC Generate on the reference ids: %r" % msg["content"])
    chk.check(body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-"), "object and id")

    lines = curl_stream(srv, "/v1/chat/completions",
                        {"model": "tiny", "messages": MESSAGES, "max_tokens": 10, "temperature": 0,
                         "stream": True, "stream_options": {"include_usage": True}})
    events, done, stray = sse_events(lines)
    chk.check(done and not stray, "[DONE] last, nothing else on the stream")
    chk.check(events and events[0]["choices"][0]["delta"] == {"role": "assistant"}, "the first chunk gives the role")
    chk.check(all(e["object"] == "chat.completion.chunk" for e in events), "every chunk is a chat.completion.chunk")
    joined, finish = check_stream_pieces(chk, events, "chat stream", chat=True)
    chk.check(joined == want, "the deltas join to the same reply")
    chk.check(finish == body["choices"][0]["finish_reason"], "finish_reason %s" % finish)
    last = events[-1]
    chk.check(last["choices"] == [] and last["usage"]["prompt_tokens"] == len(ids) and
              last["usage"]["completion_tokens"] == len(toks), "the last chunk carries usage and no choices")
    chk.check(all("usage" in e and e["usage"] is None for e in events[:-1]), "earlier chunks have usage: null")


def openai_npm(ctx, chk):
    srv = ctx.shared()
    p = subprocess.run(["node", os.path.join(HERE, "openai_client.mjs"), srv.base + "/v1", KEY, "tiny", PROMPT, NPM],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=180)
    if p.returncode != 0:
        raise Failure("the openai client failed: %s" % p.stderr[-1500:])
    out = json.loads(p.stdout.strip().split("\n")[-1])
    chk.check(out["models"] == ["tiny", "tiny-alias"], "models.list: %s" % out["models"])
    _, curl_body, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 12,
                                                     "temperature": 0})
    chk.check(out["completion"]["text"] == curl_body["choices"][0]["text"], "completions.create: the same text")
    chk.check("".join(out["completion_stream"]["pieces"]) == out["completion"]["text"] and
              all(out["completion_stream"]["pieces"]), "streamed completion: same text, no empty piece")
    _, chat_body, _ = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "max_tokens": 10,
                                                          "temperature": 0})
    chk.check(out["chat"]["content"] == chat_body["choices"][0]["message"]["content"] and
              out["chat"]["role"] == "assistant", "chat.completions.create: the same reply")
    cs = out["chat_stream"]
    chk.check(cs["roles"] == ["assistant"] and "".join(cs["pieces"]) == out["chat"]["content"] and
              all(cs["pieces"]), "streamed chat: role once, same reply, no empty delta")
    chk.check(cs["usage"] and cs["usage"]["completion_tokens"] == out["chat"]["usage"]["completion_tokens"],
              "include_usage: usage arrives on the stream")
    chk.check(cs["logprob_tokens"] == cs["usage"]["completion_tokens"] and set(cs["top_sizes"]) == {2},
              "logprobs for every token, 2 alternatives each")
    chk.check(out["bad_temperature"]["status"] == 400 and out["bad_temperature"]["param"] == "temperature",
              "temperature 5: the client raises a 400 naming temperature (%s)" % out["bad_temperature"])
    chk.check(out["bad_model"]["status"] == 404, "unknown model: 404 (%s)" % out["bad_model"])


def errors(ctx, chk):
    srv = ctx.shared()
    cases = [
        ({"model": "tiny", "prompt": "x", "temperature": 2.5}, 400, "temperature", "[0, 2]"),
        ({"model": "tiny", "prompt": "x", "top_p": 0}, 400, "top_p", "(0, 1]"),
        ({"model": "tiny", "prompt": "x", "n": 17}, 400, "n", "[1, 16]"),
        ({"model": "tiny", "prompt": "x", "max_tokens": -1}, 400, "max_tokens", "[0,"),
        ({"model": "tiny", "prompt": "x", "max_tokens": 9000}, 400, "max_tokens", "8192"),
        ({"model": "tiny", "prompt": "x", "logit_bias": {"999999": 1}}, 400, "logit_bias", "[0, 128256)"),
        ({"model": "tiny", "prompt": "x", "stop": ["a"] * 9}, 400, "stop", "at most 8"),
        ({"model": "tiny", "prompt": "x", "echo": True}, 400, "echo", "not supported"),
        ({"model": "tiny", "prompt": "x", "frobnicate": 1}, 400, "frobnicate", "Unrecognized"),
        ({"model": "tiny", "prompt": ""}, 400, "prompt", "empty"),
        ({"model": "tiny", "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options",
         "stream is true"),
    ]
    for body, code, param, text in cases:
        status, out, _ = post(srv, "/v1/completions", body)
        err = (out or {}).get("error", {})
        chk.check(status == code and err.get("param") == param and text in err.get("message", "") and
                  err.get("type") == "invalid_request_error",
                  "%s -> %s %s: %s" % (json.dumps(body)[:70], status, err.get("param"), err.get("message")))
    chat_cases = [
        ({"model": "tiny", "messages": []}, "messages", "non-empty"),
        ({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "wizard"),
        ({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         "messages[0].content[0]", "not supported"),
        ({"model": "tiny", "messages": MESSAGES, "top_logprobs": 2}, "top_logprobs", "logprobs"),
        ({"model": "tiny", "messages": MESSAGES, "max_completion_tokens": 9000}, "max_completion_tokens", "8192"),
        ({"model": "tiny", "messages": MESSAGES, "response_format": {"type": "yaml"}}, "response_format",
         "response_format.type"),
    ]
    for body, param, text in chat_cases:
        status, out, _ = post(srv, "/v1/chat/completions", body)
        err = (out or {}).get("error", {})
        chk.check(status == 400 and err.get("param") == param and text in err.get("message", ""),
                  "chat %s -> %s %s: %s" % (json.dumps(body)[:60], status, err.get("param"), err.get("message")))
    status, out, _ = post(srv, "/v1/chat/completions", {"model": "nope", "messages": MESSAGES})
    chk.check(status == 404 and out["error"]["param"] == "model" and out["error"]["code"] == "model_not_found",
              "an unknown model: 404 model_not_found naming model (%s)" % out["error"]["message"])
    status, out, _ = post(srv, "/v1/completions", None, raw=b"{not json")
    chk.check(status == 400 and "not valid JSON" in out["error"]["message"], "bad JSON: 400")
    status, out, _ = post(srv, "/v1/completions", None, raw=b'{"model": "tiny", "prompt": "my password is hunter2')
    chk.check(status == 400 and "byte" in out["error"]["message"] and "hunter2" not in out["error"]["message"],
              "bad JSON: the error says where, not what the body holds (%s)" % out["error"]["message"])
    status, out, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 1},
                          scheme="bearer  ")
    chk.check(status == 200, "'authorization: bearer  KEY' (the scheme in lower case, two spaces): %d" % status)
    status, out, _ = post(srv, "/v1/completions", None, raw=b'{"model": "tiny", "prompt": "x", "n": ' +
                          b"[" * 200000 + b"]" * 200000 + b"}")
    chk.check(status == 400 and "nesting deeper than 64" in out["error"]["message"],
              "200000 nested lists: 400, the server stays up (%s)" % out["error"]["message"][:90])
    deep_call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[" * 100000 + "]" * 100000}}]}
    status, out, _ = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": MESSAGES + [deep_call]})
    chk.check(status == 400 and out["error"]["param"] == "messages[2].tool_calls[0].function.arguments",
              "tool-call arguments nested 100000 deep: 400 naming them, the server stays up (%s)" %
              out["error"]["message"][:90])
    status, out, _ = post(srv, "/v1/completions", None, raw=b'{"model": "tiny", "prompt": "x", "top_p": 1e400}')
    chk.check(status == 400, "a number past double's range: 400 (%s)" % out["error"]["message"][:80])
    status, out, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 2.0,
                                                    "temperature": 0})
    chk.check(status == 200 and out["usage"]["completion_tokens"] <= 2, "max_tokens 2.0 is 2, as Python sends it")
    status, out, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 2.5})
    chk.check(status == 400 and out["error"]["param"] == "max_tokens", "max_tokens 2.5: 400")
    status, out, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": "x"}, key=None)
    chk.check(status == 401 and out["error"]["code"] == "invalid_api_key", "no key: 401 (%s)" % out)
    status, out, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": "x"}, key="sk-wrong")
    chk.check(status == 401, "a wrong key: 401")
    status, out, _ = post(srv, "/v1/engines", {})
    chk.check(status == 404 and out["error"]["type"] == "not_found_error", "unknown route: 404 in OpenAI's shape")
    with urllib.request.urlopen(srv.base + "/health", timeout=10) as r:
        chk.check(r.status == 200, "GET /health without a key: 200")
    # A text longer than the context could hold is refused before it is tokenized, on both
    # front ends, naming the field and the limit; one long unbroken word is quick either way
    # (the merges were quadratic: 64k letters took 7 s, 50 MB never finished).
    huge = "a" * (32 << 20)
    t0 = time.monotonic()
    status, out, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": huge, "max_tokens": 1})
    took = time.monotonic() - t0
    err = (out or {}).get("error", {})
    chk.check(status == 400 and err.get("param") == "prompt" and "cannot fit the model's context" in
              err.get("message", "") and took < 10,
              "a 32 MB prompt: 400 naming prompt in %.1f s (%s)" % (took, err.get("message", "")[:110]))
    t0 = time.monotonic()
    try:
        srv.st.Tokenize(pb.TokenizeRequest(text=huge), timeout=30, metadata=srv.md)
        chk.check(False, "a 32 MB Tokenize is refused")
    except grpc.RpcError as e:
        chk.check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "text is" in e.details() and
                  time.monotonic() - t0 < 10, "a 32 MB Tokenize: INVALID_ARGUMENT in %.1f s (%s)" %
                  (time.monotonic() - t0, e.details()[:100]))
    word = "b" * 100000
    t0 = time.monotonic()
    ids = list(srv.st.Tokenize(pb.TokenizeRequest(text=word), timeout=30, metadata=srv.md).ids)
    chk.check(len(ids) > 0 and time.monotonic() - t0 < 5,
              "a 100,000-letter word tokenizes in %.2f s (%d tokens)" % (time.monotonic() - t0, len(ids)))
    s = wait_idle(srv)
    chk.check(s.running == 0 and s.free_blocks == s.num_blocks, "nothing left running, every block free")


def disconnect(ctx, chk):
    srv = ctx.shared()
    for stream in (True, False):
        body = json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True,
                           "temperature": 0, "stream": stream}).encode()
        sock = socket.create_connection(("127.0.0.1", srv.http), timeout=30)
        request_id = "disconnect-%s" % ("stream" if stream else "plain")
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + KEY.encode() + b"\r\nx-request-id: " + request_id.encode() +
                     b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        if stream:
            got = b""
            while got.count(b"data: ") < 3:
                got += sock.recv(65536)
        running = 0
        until = time.monotonic() + 20
        while running == 0 and time.monotonic() < until:
            running = stats(srv).running
            time.sleep(0.05)
        chk.check(running == 1, "%s: the request runs" % request_id)
        t0 = time.monotonic()
        sock.close()
        s = wait_idle(srv)
        chk.check(s.running == 0 and s.free_blocks == s.num_blocks,
                  "%s: cancelled after the client left, every block free (%.2f s)" % (request_id,
                                                                                      time.monotonic() - t0))
        logged = srv.proc.wait_for(r"request %s CreateCompletion status=CANCELLED" % request_id, 10)
        chk.check(logged, "%s: logged as CANCELLED" % request_id)


def timed_get(url, timeout=5):
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read(), time.monotonic() - t0


def slow_clients(ctx, chk):
    srv = Server(ctx, "slow-clients", "--http-threads", "4", "--http-request-timeout-s", "2",
                 "--http-max-idle-connections", "8", "--metrics-port", "0")
    m = re.search(r"metrics on http://[^:]+:(\d+)/metrics", srv.proc.text())
    metrics = "http://127.0.0.1:%s/metrics" % (m.group(1) if m else 0)
    try:
        # Ready means every port accepts: checked the moment the line is out.
        status, body, _ = timed_get(srv.base + "/health")
        chk.check(status == 200 and b"ok" in body, "/health is ok as soon as 'shardlm serving' is printed")
        status, _, _ = timed_get(metrics)
        chk.check(status == 200, "the metrics port answers as soon as 'shardlm serving' is printed")

        def connect(first):
            sock = socket.create_connection(("127.0.0.1", srv.http), timeout=10)
            sock.sendall(first)
            return sock
        trickle = [connect(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n") for _ in range(100)]
        no_body = [connect(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
                   for _ in range(40)]
        idle = []
        for _ in range(60):
            sock = connect(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.recv(4096)  # its answer; the connection stays open, kept alive
            idle.append(sock)
        t_open = time.monotonic()
        for sock in trickle:
            sock.sendall(b"X")
        status, _, dt = timed_get(srv.base + "/health")
        chk.check(status == 200 and dt < 1, "/health answers in %.3f s beside 200 slow connections" % dt)
        t0 = time.monotonic()
        status, body, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 2})
        dt = time.monotonic() - t0
        chk.check(status == 200 and dt < 1, "a completion answers in %.3f s (status %s)" % (dt, status))
        status, _, dt = timed_get(metrics)
        chk.check(status == 200 and dt < 1, "/metrics answers in %.3f s" % dt)

        closed_idle = 0
        for sock in idle:
            sock.settimeout(0.2)
            try:
                closed_idle += sock.recv(1) == b""
            except socket.timeout:
                pass
        chk.check(closed_idle >= 60 - 8, "%d of 60 idle kept-alive connections closed past the cap of 8"
                  % closed_idle)

        # Keep trickling past the request timeout: the server cuts each with a 408.
        cut = 0
        while time.monotonic() - t_open < 4:
            for sock in trickle:
                try:
                    sock.sendall(b"X")
                except OSError:
                    pass
            time.sleep(0.5)
        for sock in trickle + no_body:
            sock.settimeout(2)
            try:
                got = sock.recv(4096)
                cut += got == b"" or got.startswith(b"HTTP/1.1 408")
            except (socket.timeout, ConnectionResetError):
                cut += isinstance(sys.exc_info()[1], ConnectionResetError)
        chk.check(cut == 140, "%d of 140 slow requests cut at --http-request-timeout-s 2" % cut)
        for sock in trickle + no_body + idle:
            sock.close()
        status, _, dt = timed_get(srv.base + "/health")
        chk.check(status == 200, "the port serves on after they are gone")
    finally:
        srv.stop()


def read_all(sock):
    got = b""
    while True:
        piece = sock.recv(65536)
        if not piece:
            return got
        got += piece


def http_edges(ctx, chk):
    srv = ctx.shared()
    sock = socket.create_connection(("127.0.0.1", srv.http), timeout=10)
    sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = read_all(sock)
    chk.check(got.startswith(b"HTTP/1.1 200"), "HEAD /health: 200, then the connection closes (%r)" % got[:40])
    sock = socket.create_connection(("127.0.0.1", srv.http), timeout=10)
    sock.sendall(b"GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = read_all(sock)
    chk.check(got.startswith(b"HTTP/1.1 405") and b"Allow: POST" in got,
              "GET /v1/completions: 405 with Allow: POST (%r)" % got[:120])
    body = json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 3, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", srv.http), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
                 KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = read_all(sock)
    chk.check(b" 200 " in got.split(b"\r\n")[0] and b"chunked" not in got.lower() and
              got.rstrip().endswith(b"data: [DONE]"),
              "HTTP/1.0: a stream without chunking, ended by the close (%r)" % got[-60:])

    files, d = ops.make_certs(ctx)
    tls = Server(ctx, "http-tls", "--tls-cert", os.path.join(d, "server.pem"), "--tls-key",
                 os.path.join(d, "server.key"))
    try:
        context = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
        conn = http.client.HTTPSConnection("localhost", tls.http, context=context, timeout=30)
        conn.request("GET", "/health")
        r = conn.getresponse()
        chk.check(r.status == 200 and b"ok" in r.read(), "HTTPS /health: 200")
        for i in range(2):
            conn.request("POST", "/v1/completions", json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 2}),
                         {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
            r = conn.getresponse()
            out = json.loads(r.read())
            chk.check(r.status == 200 and out["usage"]["completion_tokens"] == 2,
                      "HTTPS completion %d on one kept-alive connection: %s" % (i + 1, r.status))
        conn.close()
        t0 = time.monotonic()
        raw = context.wrap_socket(socket.create_connection(("127.0.0.1", tls.http), timeout=10),
                                  server_hostname="localhost")
        raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = b""
        try:
            while True:
                piece = raw.recv(65536)
                if not piece:
                    break
                got += piece
        except (ssl.SSLError, OSError):
            pass
        dt = time.monotonic() - t0
        chk.check(got.startswith(b"HTTP/1.1 200") and dt < 2,
                  "HTTPS: a request sent as the handshake ends is answered in %.2f s" % dt)
    finally:
        tls.stop()


def chat_template_flag(ctx, chk):
    path = os.path.join(NPM, "@lenml", "tokenizer-llama3_2", "models", "tokenizer_config.json")
    with open(path) as f:
        template = json.load(f)["chat_template"]
    tfile = ctx.dir("llama32.jinja")
    with open(tfile, "w") as f:
        f.write(template)
    srv = Server(ctx, "chat-template-flag", "--chat-template", tfile, "--max-queued-requests", "8")
    try:
        # More sequences than the queue ever holds (prompts x n over --max-queued-requests) can
        # never run: a 400 that says why, not a 429 "retry later".
        status, body, _ = post(srv, "/v1/completions", {"model": "tiny", "prompt": ["a"] * 9, "n": 2,
                                                         "max_tokens": 1})
        err = (body or {}).get("error", {})
        chk.check(status == 400 and err.get("param") == "prompt" and "queues at most 8" in err.get("message", ""),
                  "9 prompts x n 2 with --max-queued-requests 8: 400 (%s)" % err.get("message"))
        # The same on gRPC: n samples, or Prefill chunks, beyond what the queue holds at once.
        for what, call in (
                ("Generate n=9", lambda: list(srv.st.Generate(pb.GenerateRequest(
                    prompt=pb.Prompt(token_ids=pb.TokenIds(ids=[1, 2, 3])), max_new_tokens=1, n=9),
                    timeout=30, metadata=srv.md))),
                ("Prefill of 9 chunks", lambda: srv.st.Prefill(pb.PrefillRequest(
                    chunks=[pb.Prompt(token_ids=pb.TokenIds(ids=[1, 2, 3]))] * 9), timeout=30,
                    metadata=srv.md))):
            try:
                call()
                chk.check(False, "%s with --max-queued-requests 8 is refused" % what)
            except grpc.RpcError as e:
                chk.check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "at most 8" in e.details(),
                          "%s with --max-queued-requests 8: INVALID_ARGUMENT (%s)" % (what, e.details()))
        messages = [{"role": "user", "content": "Hi there, \"quoted\" ünïcode"}]
        rendered = reference_render(template, messages)
        ids = reference_ids(rendered)
        status, body, _ = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": messages,
                                                              "max_tokens": 6, "temperature": 0})
        chk.check(status == 200 and body["usage"]["prompt_tokens"] == len(ids),
                  "the Llama 3.2 template from --chat-template: %s prompt tokens, reference %d" % (
                      body.get("usage", {}).get("prompt_tokens"), len(ids)))
        want, _ = grpc_text(srv, ids, 6)
        chk.check(body["choices"][0]["message"]["content"] == want, "the reply equals gRPC on the reference ids")
    finally:
        srv.stop()


class OpenAiCtx(ops.Ops):
    _server = None

    def shared(self):
        if self._server is None:
            self._server = Server(self, "openai")
        return self._server

    def close(self):
        if self._server is not None:
            self._server.stop()


CASES = [("completions", completions), ("chat", chat), ("openai_npm", openai_npm), ("errors", errors),
         ("disconnect", disconnect), ("slow_clients", slow_clients), ("http_edges", http_edges),
         ("chat_template_flag", chat_template_flag)]


if __name__ == "__main__":
    sys.exit(ops.run_main(__doc__, CASES, "openai", ctx_class=OpenAiCtx))
