"""Structured outputs through the OpenAI API with the real model, judged by the official clients.

The real model (SmolLM2-135M-Instruct, the Q4_1 GGUF) behind `serve --tp 2` (two worker
processes: each step's token masks travel to rank 0 in the step message) with the HTTP API.
The official `openai` Python client asks; Python's `jsonschema` judges: no code of the
project's decides whether an output is right.

Cases:
  json_schema   chat with response_format json_schema, one request per schema (nested objects,
                arrays with minItems/maxItems, enums, numbers with bounds, required and
                optional fields, $ref/$defs), greedy: every output ends with finish_reason
                "stop", parses, and validates against its schema; one schema also drawn at
                temperature 0.9 with seeds, and once streamed (the joined deltas validate)
  json_object   response_format json_object: the content is a JSON object
  guided        vLLM's guided_regex (the whole output matches), guided_choice (the output is
                one of the choices), guided_grammar (a Lark grammar; the output is in its
                language), and on /v1/completions too
  tools         a weather tool: tool_choice "required" and a named function give message.tool_calls
                (finish_reason "tool_calls", content null) whose arguments validate against the
                tool's parameters, streamed (delta.tool_calls assembled as the client does) and
                not; tool_choice "auto" with an assistant tool call and a tool result in the
                conversation (rendered by the chat template) answers with a well-formed call or
                with text; tool_choice "none" with tools offered answers with text and no call; a
                named function that is not among tools, or tool_choice with response_format, is a
                400
  unfinished    a schema whose shortest output is longer than max_tokens: finish_reason
                "length", no hang, and the server goes on serving
  npm_tools     the official `openai` npm package asks for a weather tool call (required, and a
                named function streamed through its ChatCompletionStream); the calls it assembles
                have arguments that validate
  handles       over gRPC: a Generate from a Prefill handle constrained by a regex matches it
                whole; a constrained Generate that keeps a handle, and a constrained Generate
                appended to that handle, each keep to their own constraint; n=2 samples each
                keep to it
  cli           `generate --json-schema FILE` in-process (validates), `generate --server --regex`
                (matches), `batch --tp 2` and `batch --server` with constraint keys in the lines
                (each output keeps to its line's constraint), and bad constraints naming the flag
                or the key
  errors        bad constraints are 400 naming the parameter, with llguidance's message: an
                invalid schema, a regex that does not compile, a Lark syntax error, an empty
                choice list, two constraints at once, a response_format type that does not
                exist; over gRPC a bad regex, a temperature out of range and too many samples are
                INVALID_ARGUMENT with the field in the trailing metadata shardlm-error-field;
                afterwards every KV block is free and nothing runs

Usage:
  .venv/bin/python tests/integration/structured_test.py --shardlm build/shardlm --workdir DIR \
      --gguf third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf [--only a,b]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NPM = os.path.join(ROOT, "third_party", "npm", "node_modules")
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
import harness  # noqa: E402
import shardlm_client as sc  # noqa: E402  (the generated gRPC stubs)
from harness import Failure  # noqa: E402

import jsonschema  # noqa: E402  (the judge)
import openai  # noqa: E402  (the official client)

MODEL = "smollm2"

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": {"type": "string", "maxLength": 60},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "location": {
                "type": "object",
                "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                               "lon": {"type": "number", "minimum": -180, "maximum": 180}},
                "required": ["lat", "lon"],
                "additionalProperties": False,
            },
        },
        "required": ["city", "location"],
        "additionalProperties": False,
    },
    "array": {
        "type": "object",
        "properties": {"colors": {"type": "array", "items": {"type": "string", "maxLength": 15},
                                  "minItems": 2, "maxItems": 4}},
        "required": ["colors"],
        "additionalProperties": False,
    },
    "enum": {
        "type": "object",
        "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]},
                       "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["sentiment", "confidence"],
        "additionalProperties": False,
    },
    "ref": {
        "type": "object",
        "$defs": {"point": {"type": "object",
                            "properties": {"x": {"type": "integer", "minimum": -100, "maximum": 100},
                                           "y": {"type": "integer", "minimum": -100, "maximum": 100}},
                            "required": ["x", "y"], "additionalProperties": False}},
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"},
                       "label": {"type": "string", "maxLength": 20}},
        "required": ["start", "end"],
        "additionalProperties": False,
    },
}

PROMPTS = {
    "person": "Describe a fictional person as JSON with their name, age and email.",
    "nested": "Give the location of Paris as JSON.",
    "array": "List a few colors of the rainbow as JSON.",
    "enum": "Classify the sentiment of 'I love this movie!' as JSON.",
    "ref": "Give a line segment from (1, 2) to (3, 4) as JSON.",
}


class Ctx(harness.Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary
        self.server = None

    def start(self):
        if self.server is not None:
            return self.server
        proc = harness.LoggedProcess(
            [self.binary, "serve", "--model", self.args.gguf, "--served-model-name", MODEL, "--tp", "2",
             "--port", 0, "--http-port", 0, "--metrics-port", 0, "--kv-cache-mb", "256"],
            self.dir("serve.log"))
        if not proc.wait_for(r"shardlm serving", 180):
            proc.stop()
            raise Failure("serve did not start: " + harness.tail(proc.text()))
        proc.port = proc.announced_port(harness.SERVING_PORT)
        proc.http = "http://127.0.0.1:%d" % proc.announced_port(harness.HTTP_PORT)
        proc.metrics = "http://127.0.0.1:%d/metrics" % proc.announced_port(harness.METRICS_PORT)
        proc.client = openai.OpenAI(base_url=proc.http + "/v1", api_key="none", max_retries=0, timeout=300)
        self.server = proc
        return proc

    def stop(self):
        if self.server is not None:
            self.server.stop()
            self.server = None


def chat(srv, prompt, max_tokens=200, **kw):
    return srv.client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, **kw)


def schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def validates(chk, name, schema, content, finish):
    """Checks that `content` ended by itself, parses and validates; returns the value or None."""
    try:
        value = json.loads(content)
    except ValueError as e:
        chk.check(False, "%s: output is JSON (%s): %r" % (name, e, content[:300]))
        return None
    try:
        jsonschema.validate(value, schema)
        ok = True
    except jsonschema.ValidationError as e:
        ok = False
        chk.check(False, "%s: %s validates: %s" % (name, json.dumps(value)[:200], e.message))
    if ok:
        chk.check(finish == "stop", "%s: %s validates, finish_reason %s" % (name, json.dumps(value)[:160], finish))
    return value


def case_json_schema(ctx, chk):
    srv = ctx.start()
    for name, schema in SCHEMAS.items():
        r = chat(srv, PROMPTS[name], temperature=0, response_format=schema_format(name, schema))
        validates(chk, name, schema, r.choices[0].message.content, r.choices[0].finish_reason)
    # Drawn, not greedy: each seed's output validates too.
    for seed in (1, 2, 3):
        r = chat(srv, PROMPTS["person"], temperature=0.9, seed=seed,
                 response_format=schema_format("person", SCHEMAS["person"]))
        validates(chk, "person, seed %d" % seed, SCHEMAS["person"], r.choices[0].message.content,
                  r.choices[0].finish_reason)
    # Streamed: the deltas join to a valid document.
    stream = chat(srv, PROMPTS["enum"], temperature=0, stream=True,
                  response_format=schema_format("enum", SCHEMAS["enum"]))
    parts, finish = [], None
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    validates(chk, "enum, streamed", SCHEMAS["enum"], "".join(parts), finish)


def case_json_object(ctx, chk):
    srv = ctx.start()
    r = chat(srv, "Give me a JSON object with the name and the age of a cat.", temperature=0, max_tokens=300,
             response_format={"type": "json_object"})
    content = r.choices[0].message.content
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    chk.check(isinstance(value, dict) and r.choices[0].finish_reason == "stop",
              "json_object: %r is a JSON object (finish %s)" % (content[:200], r.choices[0].finish_reason))


def case_guided(ctx, chk):
    srv = ctx.start()
    regex = r"\(\d{3}\) \d{3}-\d{4}"
    r = chat(srv, "Write a US phone number.", temperature=0, extra_body={"guided_regex": regex})
    content = r.choices[0].message.content
    chk.check(re.fullmatch(regex, content) is not None and r.choices[0].finish_reason == "stop",
              "guided_regex: %r matches %s" % (content, regex))
    choices = ["sunny", "rainy", "cloudy"]
    r = chat(srv, "What is the weather like in Seattle?", temperature=0, extra_body={"guided_choice": choices})
    chk.check(r.choices[0].message.content in choices, "guided_choice: %r is one of %s"
              % (r.choices[0].message.content, choices))
    grammar = 'start: "The answer is " NUMBER "."\nNUMBER: /[0-9]+/'
    r = chat(srv, "What is 6 times 7?", temperature=0, extra_body={"guided_grammar": grammar})
    content = r.choices[0].message.content
    chk.check(re.fullmatch(r"The answer is [0-9]+\.", content) is not None,
              "guided_grammar: %r is in the grammar's language" % content)
    c = srv.client.completions.create(model=MODEL, prompt="The three primary colors are", max_tokens=20,
                                      temperature=0, extra_body={"guided_choice": ["red", "blue", "yellow"]})
    chk.check(c.choices[0].text in ("red", "blue", "yellow"), "completions guided_choice: %r" % c.choices[0].text)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a city.",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string", "maxLength": 40}},
                                             "required": ["city"], "additionalProperties": False}}}


def check_call(chk, what, calls, name, finish):
    if not calls:
        chk.check(False, "%s: no tool call (finish_reason %s)" % (what, finish))
        return
    call = calls[0]
    try:
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, WEATHER["function"]["parameters"] if name == "get_weather"
                            else TIME["function"]["parameters"])
        valid = True
    except (ValueError, jsonschema.ValidationError) as e:
        valid, args = False, "%s (%s)" % (call.function.arguments, e)
    chk.check(call.function.name == name and valid and call.id.startswith("call_") and call.type == "function"
              and finish == "tool_calls",
              "%s: %s(%s), id %s, finish_reason %s" % (what, call.function.name, args, call.id, finish))


def case_tools(ctx, chk):
    srv = ctx.start()
    ask = "What is the weather in Paris?"
    r = chat(srv, ask, temperature=0, tools=[WEATHER, TIME], tool_choice="required")
    m = r.choices[0].message
    check_call(chk, "required", m.tool_calls, m.tool_calls[0].function.name if m.tool_calls else "",
               r.choices[0].finish_reason)
    chk.check(m.content is None, "required: content is null (%r)" % m.content)
    r = chat(srv, ask, temperature=0, tools=[WEATHER, TIME],
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    check_call(chk, "named get_weather", r.choices[0].message.tool_calls, "get_weather", r.choices[0].finish_reason)
    # Streamed: the client's own accumulation of delta.tool_calls.
    stream = chat(srv, ask, temperature=0, stream=True, tools=[WEATHER],
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls, finish, content = {}, None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            if tc.function is not None:
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish

    class Fn:
        def __init__(self, c):
            self.id, self.type = c["id"], "function"
            self.function = type("F", (), {"name": c["name"], "arguments": c["arguments"]})
    check_call(chk, "named, streamed", [Fn(calls[i]) for i in sorted(calls)], "get_weather", finish)
    chk.check(content == "", "streamed: no content besides the call (%r)" % content)
    # A conversation that carries a call and its result, rendered by the template.
    messages = [{"role": "user", "content": ask},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "sky": "clear"}'}]
    r = srv.client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], tool_choice="auto",
                                           max_tokens=40, temperature=0)
    # "auto" lets the model choose; whichever it chose must be well formed: a call whose
    # arguments validate and finish_reason "tool_calls" with no text, or text and no call.
    m, finish = r.choices[0].message, r.choices[0].finish_reason
    if m.tool_calls:
        check_call(chk, "auto after a tool result", m.tool_calls, "get_weather", finish)
    else:
        chk.check(finish in ("stop", "length") and bool((m.content or "").strip()),
                  "auto after a tool result: text answer, finish_reason %s, %r" % (finish, m.content))
    # "none": tools offered, but no call is made: text, finish_reason stop or length.
    r = chat(srv, ask, temperature=0, max_tokens=40, tools=[WEATHER, TIME], tool_choice="none")
    m, finish = r.choices[0].message, r.choices[0].finish_reason
    chk.check(not m.tool_calls and finish in ("stop", "length") and bool((m.content or "").strip()),
              "none: text and no tool call (finish_reason %s, tool_calls %r, %r)" % (finish, m.tool_calls, m.content))
    bad_request(chk, "a named function not among tools", "tool_choice",
                lambda: chat(srv, ask, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "x"}}))
    bad_request(chk, "tool_choice required with response_format", "tool_choice",
                lambda: chat(srv, ask, tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"}))


def case_npm_tools(ctx, chk):
    srv = ctx.start()
    p = subprocess.run(["node", os.path.join(HERE, "openai_tools_client.mjs"), srv.http + "/v1", MODEL,
                        "What is the weather in Paris?", json.dumps([WEATHER, TIME]), NPM],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if p.returncode != 0:
        raise Failure("the npm client failed: " + p.stderr.decode(errors="replace")[-1500:])
    got = json.loads(p.stdout)

    class Call:
        def __init__(self, c):
            self.id, self.type = c["id"], c["type"]
            self.function = type("F", (), {"name": c["name"], "arguments": c["arguments"]})
    for what in ("required", "streamed"):
        r = got[what]
        calls = [Call(c) for c in r["calls"]]
        name = calls[0].function.name if what == "required" and calls else "get_weather"
        check_call(chk, "npm " + what, calls, name, r["finish_reason"])
        chk.check(not r["content"], "npm %s: no content besides the call (%r)" % (what, r["content"]))


def generate(st, prompt=None, handle="", n=1, max_new_tokens=40, keep=False, **constraint):
    req = sc.pb.GenerateRequest(prompt=sc.to_prompt(prompt) if prompt else None, prefix_handle=handle, n=n,
                                max_new_tokens=max_new_tokens, sampling=sc.pb.SamplingParams(temperature=0.8, seed=5),
                                return_chunk_result=keep, constraint=sc.pb.Constraint(**constraint))
    texts, results = {}, {}
    for msg in st.Generate(req, timeout=300):
        texts[msg.sample] = texts.get(msg.sample, "") + msg.text
        for r in msg.results:
            results[r.sample] = r
    return texts, results


def case_handles(ctx, chk):
    srv = ctx.start()
    import grpc
    with grpc.insecure_channel("127.0.0.1:%d" % srv.port) as ch:
        st = sc.pb_grpc.InferenceStub(ch)
        prefix = "<|im_start|>user\nGive me a US phone number.<|im_end|>\n<|im_start|>assistant\n"
        handle = st.Prefill(sc.pb.PrefillRequest(chunks=[sc.to_prompt(prefix)], keep=True), timeout=60).results[0].handle
        regex = r"\(\d{3}\) \d{3}-\d{4}"
        texts, results = generate(st, handle=handle, regex=regex)
        chk.check(re.fullmatch(regex, texts[0]) is not None and results[0].finish_reason == "stop",
                  "from a Prefill handle, constrained: %r (%s)" % (texts[0], results[0].finish_reason))
        # A constrained Generate that keeps a handle, then one appended to it under another constraint.
        texts, results = generate(st, prompt=prefix.replace("a US phone number", "a colour"), keep=True,
                                  choice=sc.pb.Choices(options=["red", "green", "blue"]))
        kept = results[0].chunk_result.handle
        chk.check(texts[0] in ("red", "green", "blue") and kept, "a constrained Generate keeping a handle: %r" % texts[0])
        texts, results = generate(st, prompt="<|im_end|>\n<|im_start|>user\nAnd as JSON?<|im_end|>\n"
                                  "<|im_start|>assistant\n", handle=kept,
                                  max_new_tokens=60, json_schema=json.dumps(SCHEMAS["enum"]))
        validates(chk, "appended to that handle", SCHEMAS["enum"], texts[0], results[0].finish_reason)
        # Each of n samples keeps to the constraint on its own.
        texts, results = generate(st, prompt=prefix, n=2, regex=regex)
        for i in (0, 1):
            chk.check(re.fullmatch(regex, texts.get(i, "")) is not None,
                      "sample %d of 2: %r (%s)" % (i, texts.get(i), results[i].finish_reason if i in results else None))
        st.ReleaseChunks(sc.pb.ReleaseChunksRequest(handles=[handle, kept]), timeout=30)


def run_cli(ctx, name, args):
    p = subprocess.run([ctx.binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    with open(ctx.dir(name + ".log"), "wb") as f:
        f.write(p.stderr)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def case_cli(ctx, chk):
    gguf = ctx.args.gguf
    schema_file = ctx.dir("person.json")
    with open(schema_file, "w") as f:
        json.dump(SCHEMAS["person"], f)
    prompt = "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % PROMPTS["person"]
    rc, out, err = run_cli(ctx, "generate-schema", ["generate", "--model", gguf, "--prompt", prompt, "--json",
                                                    "--json-schema", schema_file, "--temperature", "0",
                                                    "--max-new-tokens", "200"])
    if rc != 0:
        raise Failure("generate --json-schema failed: " + err[-1500:])
    r = json.loads(out)
    validates(chk, "generate --json-schema", SCHEMAS["person"], r["text"], r["finish_reason"])
    rc, out, err = run_cli(ctx, "generate-bad", ["generate", "--model", gguf, "--prompt", "x", "--regex", "(["])
    chk.check(rc != 0 and "--regex: " in err and "regex" in err.split("--regex: ", 1)[-1],
              "a bad --regex names the flag and says why: %r" % err.strip()[-300:])
    rc, _, err = run_cli(ctx, "generate-two", ["generate", "--model", gguf, "--prompt", "x", "--regex", "a",
                                               "--json-object"])
    chk.check(rc != 0 and "at most one of" in err, "two constraints are refused: %r" % err.strip()[-200:])
    srv = ctx.start()
    regex = r"\(\d{3}\) \d{3}-\d{4}"
    phone = "<|im_start|>user\nGive me a US phone number.<|im_end|>\n<|im_start|>assistant\n"
    rc, out, err = run_cli(ctx, "generate-server", ["generate", "--server", "127.0.0.1:%d" % srv.port, "--prompt",
                                                    phone, "--regex", regex, "--json", "--max-new-tokens", "40"])
    r = json.loads(out) if rc == 0 else {}
    chk.check(rc == 0 and re.fullmatch(regex, r.get("text", "")) is not None,
              "generate --server --regex: %r %s" % (r.get("text"), err.strip()[-300:]))
    lines = [{"prompt": phone, "regex": regex, "max_new_tokens": 40},
             {"prompt": prompt, "json_schema": SCHEMAS["person"], "max_new_tokens": 200, "temperature": 0},
             {"prompt": phone.replace("a US phone number", "a colour"), "choice": ["red", "green", "blue"]},
             {"prompt": "x", "regex": "(["},
             {"prompt": "x", "regex": "a", "choice": ["a"]}]
    batch_in = ctx.dir("batch.jsonl")
    with open(batch_in, "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    for mode, target in (("tp 2", ["--model", gguf, "--tp", "2"]), ("server", ["--server", "127.0.0.1:%d" % srv.port])):
        batch_out = ctx.dir("batch-%s.jsonl" % mode.replace(" ", ""))
        rc, _, err = run_cli(ctx, "batch-" + mode.replace(" ", ""), ["batch"] + target + ["--input", batch_in,
                                                                                         "--output", batch_out])
        if not os.path.exists(batch_out):
            raise Failure("batch (%s) wrote nothing (rc %d): %s" % (mode, rc, err[-1500:]))
        with open(batch_out) as f:
            got = [json.loads(x) for x in f]
        chk.check(re.fullmatch(regex, got[0].get("text", "")) is not None, "batch %s regex: %r" % (mode, got[0]))
        validates(chk, "batch %s json_schema" % mode, SCHEMAS["person"], got[1].get("text", ""),
                  got[1].get("finish_reason"))
        chk.check(got[2].get("text") in ("red", "green", "blue"), "batch %s choice: %r" % (mode, got[2]))
        chk.check("regex" in got[3].get("error", ""), "batch %s bad regex names the key: %r" % (mode, got[3]))
        chk.check("at most one" in got[4].get("error", "") or "one of" in got[4].get("error", ""),
                  "batch %s two constraints: %r" % (mode, got[4]))


def case_unfinished(ctx, chk):
    srv = ctx.start()
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"},
                                                         "minItems": 30}},
              "required": ["items"], "additionalProperties": False}
    t0 = time.monotonic()
    r = chat(srv, "List numbers as JSON.", max_tokens=8, temperature=0,
             response_format=schema_format("long", schema))
    chk.check(r.choices[0].finish_reason == "length" and time.monotonic() - t0 < 60,
              "max_tokens before the constraint is satisfied: finish_reason %s, %r"
              % (r.choices[0].finish_reason, r.choices[0].message.content))
    r = chat(srv, PROMPTS["enum"], temperature=0, response_format=schema_format("enum", SCHEMAS["enum"]))
    validates(chk, "the next request", SCHEMAS["enum"], r.choices[0].message.content, r.choices[0].finish_reason)


def bad_request(chk, what, param, fn):
    try:
        fn()
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        chk.check(body.get("param") == param and body.get("message"),
                  "%s: 400 naming %s: %s" % (what, body.get("param"), str(body.get("message"))[:160]))
        return
    chk.check(False, "%s: accepted" % what)


def metric(srv, name):
    text = urllib.request.urlopen(srv.metrics, timeout=10).read().decode()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def case_errors(ctx, chk):
    srv = ctx.start()
    bad_request(chk, "a schema of an unknown type", "response_format",
                lambda: chat(srv, "x", response_format=schema_format("bad", {"type": "nonsense"})))
    bad_request(chk, "a regex that does not compile", "guided_regex",
                lambda: chat(srv, "x", extra_body={"guided_regex": "(unclosed"}))
    bad_request(chk, "a Lark syntax error", "guided_grammar",
                lambda: chat(srv, "x", extra_body={"guided_grammar": "start: ("}))
    bad_request(chk, "an empty choice list", "guided_choice",
                lambda: chat(srv, "x", extra_body={"guided_choice": []}))
    bad_request(chk, "two constraints", "guided_regex",
                lambda: chat(srv, "x", response_format={"type": "json_object"}, extra_body={"guided_regex": "a"}))
    bad_request(chk, "a response_format type that does not exist", "response_format",
                lambda: chat(srv, "x", response_format={"type": "yaml"}))
    bad_request(chk, "json_schema without a schema", "response_format",
                lambda: chat(srv, "x", response_format={"type": "json_schema", "json_schema": {"name": "x"}}))
    # Over gRPC the field comes as trailing metadata (shardlm-error-field), not read from the text.
    import grpc
    with grpc.insecure_channel("127.0.0.1:%d" % srv.port) as ch:
        st = sc.pb_grpc.InferenceStub(ch)
        for what, field, req in [
                ("a regex that does not compile", "constraint.regex",
                 sc.pb.GenerateRequest(prompt=sc.to_prompt("x"), max_new_tokens=4,
                                       constraint=sc.pb.Constraint(regex="(unclosed"))),
                ("temperature out of range", "temperature",
                 sc.pb.GenerateRequest(prompt=sc.to_prompt("x"), max_new_tokens=4,
                                       sampling=sc.pb.SamplingParams(temperature=1000))),
                ("too many samples", "n", sc.pb.GenerateRequest(prompt=sc.to_prompt("x"), max_new_tokens=4, n=99)),
                # n is checked before a text prompt is tokenized (or refused as too long).
                ("too many samples of a too long prompt", "n",
                 sc.pb.GenerateRequest(prompt=sc.to_prompt("x " * 2_000_000), max_new_tokens=4, n=99))]:
            call = st.Generate(req, timeout=60)
            try:
                list(call)
                chk.check(False, "gRPC %s: refused" % what)
            except grpc.RpcError as e:
                got = dict(e.trailing_metadata() or ()).get("shardlm-error-field")
                chk.check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and got == field,
                          "gRPC %s: %s, field %r (%s)" % (what, e.code(), got, e.details()[:80]))
    # Nothing is left running and every block is free again.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (metric(srv, "shardlm_requests_running") or 0) > 0:
        time.sleep(0.2)
    chk.check(metric(srv, "shardlm_requests_running") == 0, "nothing running afterwards")
    chk.check(metric(srv, 'shardlm_kv_cache_blocks{state="used"}') == 0, "every KV block free afterwards")


CASES = [("json_schema", case_json_schema), ("json_object", case_json_object), ("guided", case_guided),
         ("tools", case_tools), ("npm_tools", case_npm_tools), ("handles", case_handles), ("cli", case_cli),
         ("unfinished", case_unfinished), ("errors", case_errors)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    parsed = harness.parse_case_args(args, [n for n, _ in CASES])
    if parsed is None:
        return 2
    binary, workdir, only = parsed
    ctx = Ctx(workdir, args, binary)
    try:
        return harness.run_cases(CASES, only, ctx, "structured")
    finally:
        ctx.stop()


if __name__ == "__main__":
    sys.exit(main())
