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
  unfinished    a schema whose shortest output is longer than max_tokens: finish_reason
                "length", no hang, and the server goes on serving
  errors        bad constraints are 400 naming the parameter, with llguidance's message: an
                invalid schema, a regex that does not compile, a Lark syntax error, an empty
                choice list, two constraints at once, a response_format type that does not
                exist; afterwards every KV block is free and nothing runs

Usage:
  .venv/bin/python tests/integration/structured_test.py --shardlm build/shardlm --workdir DIR \
      --gguf third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf [--only a,b]
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import harness  # noqa: E402
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
        port, http_port, metrics_port = harness.free_port(), harness.free_port(), harness.free_port()
        proc = harness.LoggedProcess(
            [self.binary, "serve", "--model", self.args.gguf, "--served-model-name", MODEL, "--tp", "2",
             "--port", port, "--http-port", http_port, "--metrics-port", metrics_port, "--kv-cache-mb", "256"],
            self.dir("serve.log"))
        if not proc.wait_for(r"shardlm serving", 180):
            proc.stop()
            raise Failure("serve did not start: " + harness.tail(proc.text()))
        proc.http = "http://127.0.0.1:%d" % http_port
        proc.metrics = "http://127.0.0.1:%d/metrics" % metrics_port
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
    # Nothing is left running and every block is free again.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (metric(srv, "shardlm_requests_running") or 0) > 0:
        time.sleep(0.2)
    chk.check(metric(srv, "shardlm_requests_running") == 0, "nothing running afterwards")
    chk.check(metric(srv, 'shardlm_kv_cache_blocks{state="used"}') == 0, "every KV block free afterwards")


CASES = [("json_schema", case_json_schema), ("json_object", case_json_object), ("guided", case_guided),
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
