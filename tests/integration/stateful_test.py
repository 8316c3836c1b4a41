#!/usr/bin/env python3
"""OpenAI's Assistants API (assistants, threads, messages, runs, run steps) in the state database, driven
by the official `openai` Python client (3.57.0, the venv's) against real `serve` processes: a
tiny f32 Llama, `serve --tp 2 --http-port 0 --api-key-file F --state-dir DIR`.

Cases:
  objects     every endpoint built so far through the client: assistants create, retrieve,
              update (a null clears a field), list (auto-paging over 45 in both orders, a
              `before` page), delete; threads create with messages, retrieve, update, delete;
              messages create, list (45, both orders), retrieve, update, delete; a deleted
              thread takes its messages; each object has every field of the client's type
  keys        objects belong to the key that made them: key B gets 404 for key A's assistant,
              thread and message, cannot add to A's thread, and lists none of A's
  errors      OpenAI's error shape, 400 naming the parameter and the limit (metadata past 16
              keys or 512 characters, a name past 256, file_search refused by name, an unknown
              argument, limit 101, a bad order, an unknown `after`, an unknown model, an image
              part, bad JSON) and 404 for unknown ids and paths
  runs        create_and_poll: the reply (temperature 0) is the text chat completions gives for
              the same messages, its usage the same prompt tokens; the reply is the thread's
              newest message with run_id and assistant_id, its message_creation step names it;
              overrides (instructions, additional_instructions, additional_messages,
              temperature, max_completion_tokens -> incomplete, metadata) are echoed and used;
              runs list, retrieve, update; create-and-run; response_format json_schema gives
              JSON valid against the schema (Python's jsonschema)
  stream      runs.stream with an AssistantEventHandler: OpenAI's event names in order, the
              deltas join to the stored reply, the final run is the stored run; a streamed
              create-and-run starts with thread.created
  tools       function tools: a run with tool_choice required ends requires_action with the call
              chat completions makes for the same messages (an open tool_calls step, no
              message); outputs missing, unknown or repeated are 400 naming tool_outputs; once
              submitted the run answers chat's text for the call and its output, its steps
              the tool step (output filled) then the message; streamed: OpenAI's events for a
              call (step.delta, requires_action) and for a submit (step.completed, queued, ...);
              a run waiting for outputs cancelled takes its step; a bad tool_choice, or one
              with a response format, is 400. Responses: tool_choice required gives chat's call
              as a function_call item, its output sent back gives chat's text, a streamed
              call sends the function_call events; a conversation keeps calls and outputs
  kv          the KV kept between turns (a serve with --no-prefix-caching, so that nothing else can
              reuse it): a thread's second run, a chain's next response and a fork from the
              same response, and a conversation's next turn each report the previous turn's
              prompt as cached_tokens (chat resending the history: 0) and answer chat's text;
              deleting the thread, the responses and the conversation releases every handle
  cancel      a long run cancelled while generating ends cancelled (its reply incomplete,
              run_cancelled) and nothing keeps running (/metrics: no request running, no call
              in flight); while a run is active a second run and a new message are 400;
              deleting a thread stops the run generating for it
  concurrent  runs on two threads at once both complete, each with its own thread's reply
  responses   the Responses API through client.responses: text and item input give chat
              completions' text for the same messages (instructions as the system message,
              developer as system), usage the same input tokens; max_output_tokens ends it
              incomplete; a previous_response_id chain continues the conversation (chat's text
              for the whole history) and reuses its KV (cached_tokens); retrieve, input_items,
              delete; store: false is never stored; text.format json_schema gives valid JSON;
              responses.stream's events in order with consecutive sequence_numbers, the deltas
              joining to the stored text; another key's response is 404, also as a previous one;
              refused fields are 400 naming them; an input past the context is 400 naming input
  background  background: true answers at once in progress; polled, it ends with the text a
              foreground one gives; a long one cancelled while it generates ends cancelled
              (stored so, nothing left running), a second cancel answers it as it is, an ended
              one is 400; another key's is 404; without store, or streamed, it is 400
  conversations  the Conversations API through client.conversations: create with items and
              metadata, items list (both orders, pages), create, retrieve, delete, update,
              delete; a response with `conversation` gives chat's text for the conversation's
              items and its input, and adds the input and the reply to it; the next turn sees
              the whole history; another key's conversation is 404, also to answer in; with
              previous_response_id or store: false it is 400; a deleted conversation takes its
              items and leaves its responses
  worker_killed  a worker killed (SIGKILL) mid-run: the run ends failed, its last_error naming
              the rank; once /health is 200 again the thread's next run completes
  drain       SIGTERM while a run and a background response generate (--shutdown-grace-s 1):
              serve exits 0 within seconds, and after a restart both read failed ("server
              shutting down")
  restart     after SIGTERM and a new `serve` on the same --state-dir every object is there,
              lists in the same order, and new objects list after the old ones; a run in
              progress when serve is killed (SIGKILL) reads failed with last_error after the
              restart, and its thread's next run completes
  replicas    two serves on one PostgreSQL database (a throwaway server, tests/testing/postgres_server.py):
              a thread made through one runs through the other and both read its reply
              (chat's text); a response chain goes on across them; a run and a background
              response generating on one, cancelled through the other, stop within seconds;
              a run asking for tool outputs on one takes them through the other; the
              password in --state-db is never printed
  npm         the official `openai` npm package through every endpoint: assistants create,
              retrieve, update, list (auto-paging two at a time), delete; a thread with messages
              paged one at a time; a deleted thread is NotFoundError; file_search is a 400
              naming tools[0].type; responses create (chat's text), a chain, retrieve, a stream's
              events, input items, delete, a background one cancelled; messages retrieve,
              update, delete; thread update; runs createAndPoll, list, retrieve, update, steps
              list and retrieve, stream, createAndRunPoll, cancel; a forced call answered with
              submitToolOutputsAndPoll; a response's function_call; conversations create,
              retrieve, update, items create, list, retrieve, delete, and delete
  flags       --state-db none: the routes answer 404 naming --state-db, chat still works; a
              bad --state-db exits 2 naming the flag before any worker starts, with no
              password printed; a --state-dir that cannot be made exits 1 naming it

With SHARDLM_TEST_POSTGRES_URL set every case keeps its state on that PostgreSQL server
(a database per state) instead of SQLite files:
  python3 tests/testing/postgres_server.py -- .venv/bin/python tests/integration/stateful_test.py ...

Usage:
  .venv/bin/python tests/integration/stateful_test.py --shardlm build/shardlm --workdir DIR
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import harness  # noqa: E402
import postgres_server  # noqa: E402
from harness import Ctx, Failure, LoggedProcess  # noqa: E402
import jsonschema  # noqa: E402
import openai  # noqa: E402
from openai.types.beta import Assistant, Thread  # noqa: E402
from openai.types.beta.threads import Message  # noqa: E402
from openai.types.conversations import Conversation  # noqa: E402

MODEL_FLAGS = ["--arch", "llama", "--hidden-size", "128", "--num-heads", "4", "--num-kv-heads", "2",
               "--intermediate-size", "256", "--num-layers", "2", "--seed", "77", "--dtype", "f32"]
KEY_A = "sk-stateful-a-0123456789"
KEY_B = "sk-stateful-b-9876543210"
START_TIMEOUT_S = 90
# client.beta.* warns that OpenAI deprecates the Assistants API; the clients still call it.
warnings.simplefilter("ignore", DeprecationWarning)


class Ctx2(Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary
        self.model = self.dir("model")
        if not os.path.isdir(self.model):
            harness.run_binary([binary, "make-tiny-model", self.model, "--tokenizer", "llama3"] + MODEL_FLAGS, 120)
        self.keys = self.dir("api-keys")
        with open(self.keys, "w") as f:
            f.write(KEY_A + "\n" + KEY_B + "\n")
        self.state_dir = self.dir("state")
        shutil.rmtree(self.state_dir, ignore_errors=True)  # each run starts from an empty database
        # Set (tests/testing/postgres_server.py): every case's state on that PostgreSQL server.
        self.postgres = os.environ.get("SHARDLM_TEST_POSTGRES_URL") or None
        if self.postgres:
            self.state_flags("state", fresh=True)
        self.server = None
        self.started = []  # every serve, stopped at the end even when its case failed midway

    def serve(self, name, *extra):
        p = LoggedProcess([self.binary, "serve", "--model", self.model, "--tp", 2, "--port", 0, "--http-port", 0,
                           "--api-key-file", self.keys, "--served-model-name", "tiny"] + list(extra),
                          self.dir(name + ".log"))
        self.started.append(p)
        if not p.wait_for("shardlm serving", START_TIMEOUT_S):
            raise Failure("serve not ready (rc %s): %s" % (p.proc.poll(), p.text()[-1500:]))
        p.http = p.announced_port(harness.HTTP_PORT)
        p.base = "http://127.0.0.1:%d/v1" % p.http
        return p

    def state_flags(self, name, fresh=False):
        """serve's flags for the state called `name`: a --state-dir, or a database on the
        PostgreSQL server; emptied first when fresh."""
        if self.postgres:
            return ["--state-db", postgres_server.database_url(self.postgres, name.replace("-", "_"), fresh)]
        d = self.dir(name)
        if fresh:
            shutil.rmtree(d, ignore_errors=True)
        return ["--state-dir", d]

    def shared(self):
        """The server most cases share, on the case's state directory."""
        if self.server is None:
            self.server = self.serve("serve", *self.state_flags("state"))
        return self.server

    def stop_shared(self):
        if self.server is not None:
            self.server.stop()
            self.server = None
        for p in self.started:
            p.stop(signal.SIGKILL, timeout=10)  # a no-op for those already stopped


def client(srv, key=KEY_A):
    return openai.OpenAI(base_url=srv.base, api_key=key, max_retries=0, timeout=30)


def raw(srv, method, path, body=None, key=KEY_A, data=None):
    """(status, parsed body) of a request the client would not send."""
    if data is None and body is not None:
        data = json.dumps(body).encode()
    req = urllib.request.Request(srv.base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def all_fields(c, obj, model_type, what):
    """The object's JSON has every field of the client's type (extras would be kept, not lost)."""
    d = obj.model_dump()
    missing = [f for f in model_type.model_fields if f not in d]
    c.check(not missing, "%s has every field of %s (missing: %s)" % (what, model_type.__name__, missing))


def expect_error(c, fn, status, param, what, message_part=None):
    try:
        fn()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        ok = e.status_code == status and (param is None or body.get("param") == param)
        if message_part:
            ok = ok and message_part in str(body.get("message", ""))
        c.check(ok, "%s: %d param=%r (got %d %r: %s)" % (what, status, param, e.status_code, body.get("param"),
                                                          str(body.get("message", ""))[:160]))
        return
    c.check(False, "%s: expected %d, the call succeeded" % (what, status))


# --- cases -----------------------------------------------------------------------------------

def case_objects(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    a = oa.beta.assistants.create(model="tiny", name="helper", instructions="Be brief.", temperature=0.3,
                                  metadata={"team": "docs"},
                                  tools=[{"type": "function", "function": {"name": "lookup", "parameters": {
                                      "type": "object", "properties": {"q": {"type": "string"}}}}}])
    all_fields(c, a, Assistant, "assistant")
    c.check(a.id.startswith("asst_") and len(a.id) == 29, "assistant id asst_ + 24 characters: %s" % a.id)
    c.check(a.name == "helper" and a.temperature == 0.3 and a.top_p is None and a.response_format == "auto",
            "create echoes the fields: %s" % a.model_dump_json()[:200])
    c.check(a.tools[0].function.name == "lookup", "the function tool is kept")
    got = oa.beta.assistants.retrieve(a.id)
    c.check(got.model_dump() == a.model_dump(), "retrieve equals create")
    up = oa.beta.assistants.update(a.id, name=None, top_p=0.9,
                                   response_format={"type": "json_schema", "json_schema": {
                                       "name": "x", "schema": {"type": "object"}}})
    c.check(up.name is None and up.top_p == 0.9 and up.instructions == "Be brief." and up.temperature == 0.3,
            "update: null clears, absent keeps, given sets: %s" % up.model_dump_json()[:200])
    c.check(oa.beta.assistants.retrieve(a.id).response_format.type == "json_schema", "response_format stored")

    made = [oa.beta.assistants.create(model="tiny", name="n%d" % i).id for i in range(45)]
    mine = set(made + [a.id])
    desc = [x.id for x in oa.beta.assistants.list(limit=7) if x.id in mine]
    asc = [x.id for x in oa.beta.assistants.list(limit=10, order="asc") if x.id in mine]
    c.check(desc == list(reversed(made)) + [a.id], "auto-paging desc (7 a page) lists all 46 newest first")
    c.check(asc == [a.id] + made, "auto-paging asc (10 a page) lists all 46 oldest first")
    page = oa.beta.assistants.list(limit=3, before=made[10])
    c.check([x.id for x in page.data] == [made[13], made[12], made[11]] and page.has_more,
            "before: the 3 nearest, newest first, has_more: %s" % [x.id for x in page.data])
    first = oa.beta.assistants.list(limit=2)
    c.check(first.first_id == first.data[0].id and first.last_id == first.data[1].id, "first_id and last_id")
    deleted = oa.beta.assistants.delete(made[0])
    c.check(deleted.deleted and deleted.id == made[0] and deleted.object == "assistant.deleted", "delete")
    expect_error(c, lambda: oa.beta.assistants.retrieve(made[0]), 404, None, "a deleted assistant is 404",
                 "No assistant found with id '%s'." % made[0])

    t = oa.beta.threads.create(messages=[{"role": "user", "content": "hello"},
                                         {"role": "assistant", "content": [{"type": "text", "text": "hi"}],
                                          "metadata": {"k": "v"}}],
                               metadata={"user": "u1"})
    all_fields(c, t, Thread, "thread")
    c.check(t.id.startswith("thread_") and t.metadata == {"user": "u1"}, "thread create")
    msgs = oa.beta.threads.messages.list(t.id, order="asc")
    c.check([m.content[0].text.value for m in msgs.data] == ["hello", "hi"], "the initial messages, in order")
    all_fields(c, msgs.data[0], Message, "message")
    m0 = msgs.data[1]
    c.check(m0.role == "assistant" and m0.status == "completed" and m0.thread_id == t.id and
            m0.metadata == {"k": "v"} and m0.content[0].text.annotations == [], "message fields: %s" %
            m0.model_dump_json()[:200])
    more = [oa.beta.threads.messages.create(t.id, role="user", content="m%d" % i).id for i in range(43)]
    texts = [m.content[0].text.value for m in oa.beta.threads.messages.list(t.id, limit=20, order="asc")]
    c.check(texts == ["hello", "hi"] + ["m%d" % i for i in range(43)], "45 messages auto-paged ascending")
    newest = [m.id for m in oa.beta.threads.messages.list(t.id, limit=9)]
    c.check(newest[:43] == list(reversed(more)), "and descending")
    r = oa.beta.threads.messages.retrieve(more[5], thread_id=t.id)
    c.check(r.content[0].text.value == "m5", "message retrieve")
    u = oa.beta.threads.messages.update(more[5], thread_id=t.id, metadata={"seen": "yes"})
    c.check(u.metadata == {"seen": "yes"} and u.content[0].text.value == "m5", "message update (metadata)")
    d = oa.beta.threads.messages.delete(more[5], thread_id=t.id)
    c.check(d.deleted and d.object == "thread.message.deleted", "message delete")
    expect_error(c, lambda: oa.beta.threads.messages.retrieve(more[5], thread_id=t.id), 404, None,
                 "a deleted message is 404")
    tu = oa.beta.threads.update(t.id, metadata={"user": "u2"})
    c.check(tu.metadata == {"user": "u2"} and oa.beta.threads.retrieve(t.id).metadata == {"user": "u2"},
            "thread update")
    td = oa.beta.threads.delete(t.id)
    c.check(td.deleted and td.object == "thread.deleted", "thread delete")
    expect_error(c, lambda: oa.beta.threads.retrieve(t.id), 404, None, "a deleted thread is 404")
    expect_error(c, lambda: oa.beta.threads.messages.retrieve(more[6], thread_id=t.id), 404, None,
                 "its messages went with it")
    expect_error(c, lambda: oa.beta.threads.messages.list(t.id), 404, None, "listing them is 404")


def case_keys(ctx, c):
    srv = ctx.shared()
    oa, ob = client(srv, KEY_A), client(srv, KEY_B)
    a = oa.beta.assistants.create(model="tiny", name="a's")
    t = oa.beta.threads.create(messages=[{"role": "user", "content": "private"}])
    m = oa.beta.threads.messages.list(t.id).data[0]
    expect_error(c, lambda: ob.beta.assistants.retrieve(a.id), 404, None, "B cannot read A's assistant",
                 "No assistant found with id '%s'." % a.id)
    expect_error(c, lambda: ob.beta.assistants.update(a.id, name="mine"), 404, None, "nor update it")
    expect_error(c, lambda: ob.beta.assistants.delete(a.id), 404, None, "nor delete it")
    expect_error(c, lambda: ob.beta.threads.retrieve(t.id), 404, None, "B cannot read A's thread")
    expect_error(c, lambda: ob.beta.threads.messages.create(t.id, role="user", content="x"), 404, None,
                 "nor add to it")
    expect_error(c, lambda: ob.beta.threads.messages.retrieve(m.id, thread_id=t.id), 404, None,
                 "nor read its message")
    expect_error(c, lambda: ob.beta.threads.delete(t.id), 404, None, "nor delete it")
    c.check(a.id not in [x.id for x in ob.beta.assistants.list()], "B's list does not show A's assistant")
    c.check(oa.beta.assistants.retrieve(a.id).name == "a's", "A's assistant is untouched")
    status, body = raw(srv, "GET", "/assistants", key="sk-nobody")
    c.check(status == 401 and body["error"]["type"] == "authentication_error", "an unknown key is 401")


def case_errors(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    big = {"k%d" % i: "v" for i in range(17)}
    expect_error(c, lambda: oa.beta.assistants.create(model="tiny", metadata=big), 400, "metadata",
                 "17 metadata keys", "at most 16")
    expect_error(c, lambda: oa.beta.assistants.create(model="tiny", metadata={"k": "x" * 513}), 400, "metadata",
                 "a 513-character metadata value", "512")
    expect_error(c, lambda: oa.beta.assistants.create(model="tiny", name="n" * 257), 400, "name",
                 "a 257-character name", "at most 256")
    expect_error(c, lambda: oa.beta.assistants.create(model="tiny", tools=[{"type": "file_search"}]), 400,
                 "tools[0].type", "file_search refused by name", "file_search")
    expect_error(c, lambda: oa.beta.assistants.create(model="tiny", tools=[{"type": "code_interpreter"}]), 400,
                 "tools[0].type", "code_interpreter refused by name", "code_interpreter")
    expect_error(c, lambda: oa.beta.assistants.create(model="tiny", extra_body={"colour": "red"}), 400, "colour",
                 "an unknown argument", "Unrecognized request argument supplied: colour")
    expect_error(c, lambda: oa.beta.assistants.create(model="gpt-4o"), 400, "model", "an unknown model",
                 "'gpt-4o' does not exist")
    expect_error(c, lambda: oa.beta.assistants.create(model="tiny", temperature=3), 400, "temperature",
                 "temperature 3", "[0, 2]")
    expect_error(c, lambda: oa.beta.assistants.list(limit=101), 400, "limit", "limit 101", "[1, 100]")
    expect_error(c, lambda: oa.beta.assistants.list(order="sideways"), 400, "order", "a bad order")
    expect_error(c, lambda: oa.beta.assistants.list(after="asst_nope"), 400, "after", "an unknown after")
    t = oa.beta.threads.create()
    expect_error(c, lambda: oa.beta.threads.messages.create(t.id, role="user", content=[
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]), 400, "content", "an image part",
        "text only")
    expect_error(c, lambda: oa.beta.threads.messages.create(t.id, role="system", content="x"), 400, "role",
                 "role system")
    expect_error(c, lambda: oa.beta.threads.create(messages=[{"role": "user"}]), 400, "messages[0].content",
                 "a message without content")
    expect_error(c, lambda: oa.beta.threads.create(tool_resources={"file_search": {"vector_store_ids": ["v"]}}),
                 400, "tool_resources", "tool_resources refused")
    status, body = raw(srv, "POST", "/assistants", data=b"{not json")
    c.check(status == 400 and body["error"]["type"] == "invalid_request_error", "bad JSON is 400: %s" % body)
    for path in ["/assistants/asst_doesnotexist", "/threads/thread_nope", "/threads/%s/messages/msg_nope" % t.id]:
        status, body = raw(srv, "GET", path)
        c.check(status == 404 and body["error"]["type"] == "invalid_request_error" and
                "No " in body["error"]["message"], "GET %s is 404: %s" % (path, body["error"]["message"]))
    status, body = raw(srv, "GET", "/threads/%s/colours" % t.id)
    c.check(status == 404 and "Invalid URL (GET /v1/threads/" in body["error"]["message"],
            "an unknown path is 404 Invalid URL: %s" % body)
    status, body = raw(srv, "PUT", "/assistants")
    c.check(status == 405, "PUT is 405 (%d)" % status)


def chat_text(oa, messages, n, **kw):
    r = oa.chat.completions.create(model="tiny", messages=messages, max_tokens=n, temperature=0, **kw)
    return r.choices[0].message.content, r.usage


def poll(oa, run, statuses=("completed", "incomplete", "failed", "cancelled", "expired"), timeout=60):
    deadline = time.monotonic() + timeout
    while run.status not in statuses and time.monotonic() < deadline:
        time.sleep(0.05)
        run = oa.beta.threads.runs.retrieve(run.id, thread_id=run.thread_id)
    return run


def metric(srv, name):
    return harness.metric_value(srv.base.replace("/v1", "/metrics"), name)


def settled(srv, seconds=10):
    return harness.settled(srv.base.replace("/v1", "/metrics"), seconds)


def case_runs(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    a = oa.beta.assistants.create(model="tiny", instructions="You are terse.", temperature=0)
    t = oa.beta.threads.create(messages=[{"role": "user", "content": "The harbour committee met"}])
    run = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=10,
                                               poll_interval_ms=50)
    want, usage = chat_text(oa, [{"role": "system", "content": "You are terse."},
                                 {"role": "user", "content": "The harbour committee met"}], 10)
    reply = oa.beta.threads.messages.list(t.id, limit=1).data[0]
    c.check(run.status in ("completed", "incomplete") and reply.content[0].text.value == want,
            "the reply is chat completions' text for the same messages: %r vs %r" %
            (reply.content[0].text.value, want))
    c.check(run.usage.prompt_tokens == usage.prompt_tokens and run.usage.completion_tokens == usage.completion_tokens,
            "usage counts the same tokens (%s vs %s)" % (run.usage, usage))
    c.check(reply.role == "assistant" and reply.run_id == run.id and reply.assistant_id == a.id,
            "the reply names its run and assistant")
    c.check(run.status == "incomplete" and run.incomplete_details.reason == "max_completion_tokens" and
            reply.status == "incomplete" and reply.incomplete_details.reason == "max_tokens",
            "10 tokens of a longer reply: incomplete (max_completion_tokens): %s" % run.incomplete_details)
    steps = oa.beta.threads.runs.steps.list(run_id=run.id, thread_id=t.id).data
    c.check(len(steps) == 1 and steps[0].type == "message_creation" and
            steps[0].step_details.message_creation.message_id == reply.id and steps[0].status == "completed",
            "one message_creation step naming the reply")
    got = oa.beta.threads.runs.steps.retrieve(steps[0].id, thread_id=t.id, run_id=run.id)
    c.check(got.id == steps[0].id and got.usage.completion_tokens == 10, "step retrieve, with its usage")
    c.check(run.started_at is not None and run.completed_at is not None and run.model == "tiny" and
            run.instructions == "You are terse." and run.temperature == 0, "run fields: %s" %
            run.model_dump_json()[:300])

    r2 = oa.beta.threads.runs.create_and_poll(
        thread_id=t.id, assistant_id=a.id, instructions="Answer in French.", additional_instructions="Be kind.",
        additional_messages=[{"role": "user", "content": "and then?"}], max_completion_tokens=6,
        metadata={"turn": "2"}, poll_interval_ms=50)
    want2, _ = chat_text(oa, [{"role": "system", "content": "Answer in French.\n\nBe kind."},
                              {"role": "user", "content": "The harbour committee met"},
                              {"role": "assistant", "content": want},
                              {"role": "user", "content": "and then?"}], 6)
    texts = [m.content[0].text.value for m in oa.beta.threads.messages.list(t.id, order="asc")]
    c.check(texts[-2:] == ["and then?", want2], "overrides and the history make chat's prompt: %r vs %r" %
            (texts[-1], want2))
    c.check(r2.instructions == "Answer in French." and r2.metadata == {"turn": "2"}, "overrides echoed")
    listed = [x.id for x in oa.beta.threads.runs.list(thread_id=t.id)]
    c.check(listed == [r2.id, run.id], "runs list, newest first")

    # Truncation: last_messages keeps the newest N; auto drops the oldest until max_prompt_tokens fits.
    terse = {"role": "system", "content": "You are terse."}
    r5 = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=5,
                                              truncation_strategy={"type": "last_messages", "last_messages": 1},
                                              poll_interval_ms=50)
    want5, _ = chat_text(oa, [terse, {"role": "assistant", "content": want2}], 5)
    got5 = oa.beta.threads.messages.list(t.id, limit=1).data[0].content[0].text.value
    c.check(got5 == want5, "last_messages 1: the prompt is the system and the newest message")
    oa.beta.threads.messages.create(t.id, role="user", content="One more question")
    want6, u6 = chat_text(oa, [terse, {"role": "user", "content": "One more question"}], 5)
    r6 = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=5,
                                              max_prompt_tokens=u6.prompt_tokens, poll_interval_ms=50)
    got6 = oa.beta.threads.messages.list(t.id, limit=1).data[0].content[0].text.value
    c.check(got6 == want6 and r6.usage.prompt_tokens == u6.prompt_tokens,
            "auto under max_prompt_tokens %d: all but the newest message dropped (%s)" %
            (u6.prompt_tokens, r6.usage))
    r7 = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=5,
                                              max_prompt_tokens=3, poll_interval_ms=50)
    c.check(r7.status == "failed" and r7.last_error.code == "invalid_prompt" and
            "max_prompt_tokens" in r7.last_error.message, "a prompt that cannot fit fails (invalid_prompt): %s" %
            r7.last_error)
    up = oa.beta.threads.runs.update(run.id, thread_id=t.id, metadata={"k": "v"})
    c.check(up.metadata == {"k": "v"} and up.status == run.status, "run update (metadata)")

    # KV reuse between turns: the second run's prompt starts with the first's (prefix cache).
    long_turn = "The harbour committee met on a grey Tuesday morning to discuss the state of the piers, " * 3
    tk = oa.beta.threads.create(messages=[{"role": "user", "content": long_turn}])
    k1 = oa.beta.threads.runs.create_and_poll(thread_id=tk.id, assistant_id=a.id, max_completion_tokens=4,
                                              poll_interval_ms=50)
    oa.beta.threads.messages.create(tk.id, role="user", content="and then?")
    k2 = oa.beta.threads.runs.create_and_poll(thread_id=tk.id, assistant_id=a.id, max_completion_tokens=4,
                                              poll_interval_ms=50)
    details = k2.usage.prompt_tokens_details
    cached = details["cached_tokens"] if isinstance(details, dict) else details.cached_tokens
    full_blocks = k1.usage.prompt_tokens // 16 * 16
    c.check(full_blocks >= 48 and cached >= full_blocks - 16,
            "a thread's next turn reuses its KV: cached_tokens %d of %d (first turn: %d)" %
            (cached, k2.usage.prompt_tokens, k1.usage.prompt_tokens))

    r3 = oa.beta.threads.create_and_run_poll(assistant_id=a.id, thread={"messages": [
        {"role": "user", "content": "The harbour committee met"}]}, max_completion_tokens=10, poll_interval_ms=50)
    first = oa.beta.threads.messages.list(r3.thread_id, limit=1).data[0].content[0].text.value
    c.check(r3.status == "incomplete" and first == want, "create-and-run: a new thread, the same reply")

    # Bounded, so that a tiny random model's reply ends well within the budget.
    schema = {"type": "object", "properties": {"name": {"enum": ["alpha", "beta"]}, "n": {"type": "boolean"}},
              "required": ["name", "n"], "additionalProperties": False}
    r4 = oa.beta.threads.create_and_run_poll(
        assistant_id=a.id, thread={"messages": [{"role": "user", "content": "A name as JSON"}]},
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
        max_completion_tokens=60, poll_interval_ms=50)
    text = oa.beta.threads.messages.list(r4.thread_id, limit=1).data[0].content[0].text.value
    try:
        jsonschema.validate(json.loads(text), schema)
        valid = r4.status == "completed"
    except Exception as e:  # noqa: BLE001
        valid = False
        c.note("not valid: %s" % e)
    c.check(valid, "response_format json_schema: valid JSON (%s %r)" % (r4.status, text[:80]))


class Recorder(openai.AssistantEventHandler):
    def __init__(self):
        super().__init__()
        self.names, self.deltas = [], []

    def on_event(self, event):
        self.names.append(event.event)
        if event.event == "thread.message.delta":
            self.deltas.append(event.data.delta.content[0].text.value)


def case_stream(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    a = oa.beta.assistants.create(model="tiny", temperature=0)
    t = oa.beta.threads.create(messages=[{"role": "user", "content": "Tell me about the sea"}])
    rec = Recorder()
    with oa.beta.threads.runs.stream(thread_id=t.id, assistant_id=a.id, max_completion_tokens=12,
                                     event_handler=rec) as stream:
        stream.until_done()
        final = stream.get_final_run()
    want = ["thread.run.created", "thread.run.queued", "thread.run.in_progress", "thread.run.step.created",
            "thread.run.step.in_progress", "thread.message.created", "thread.message.in_progress"]
    deltas = [n for n in rec.names if n == "thread.message.delta"]
    tail = [n for n in rec.names[len(want):] if n != "thread.message.delta"]
    c.check(rec.names[:len(want)] == want and len(deltas) >= 1 and
            tail == ["thread.message.incomplete", "thread.run.step.completed", "thread.run.incomplete"],
            "event names in order: %s" % [n for n in rec.names if n != "thread.message.delta"])
    stored = oa.beta.threads.messages.list(t.id, limit=1).data[0].content[0].text.value
    c.check("".join(rec.deltas) == stored and all(rec.deltas), "the deltas join to the stored reply, none empty")
    run = oa.beta.threads.runs.retrieve(final.id, thread_id=t.id)
    c.check(final.status == run.status == "incomplete" and final.usage.completion_tokens == 12,
            "the final run is the stored run")
    rec2 = Recorder()
    with oa.beta.threads.create_and_run_stream(assistant_id=a.id, max_completion_tokens=4, event_handler=rec2,
                                               thread={"messages": [{"role": "user", "content": "hi"}]}) as s2:
        s2.until_done()
    c.check(rec2.names[:3] == ["thread.created", "thread.run.created", "thread.run.queued"] and
            rec2.names[-1] == "thread.run.incomplete", "create-and-run streamed starts with thread.created: %s" %
            rec2.names[:3])


def handles(srv, want, seconds=10):
    """shardlm_chunk_handles once it reads `want` (the gauge follows the engine), else its last value."""
    deadline = time.monotonic() + seconds
    while True:
        got = metric(srv, "shardlm_chunk_handles")
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def case_kv(ctx, c):
    """With the prefix cache off, only a kept handle can reuse a turn's KV."""
    srv = ctx.serve("serve-kv", *ctx.state_flags("state-kv", fresh=True), "--no-prefix-caching")
    try:
        oa = client(srv)
        first = "The harbour committee met on a grey Tuesday morning to discuss the state of the piers. " * 3
        msgs = [{"role": "user", "content": first}]
        a = oa.beta.assistants.create(model="tiny", temperature=0)
        t = oa.beta.threads.create(messages=msgs)
        r1 = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=6,
                                                  poll_interval_ms=50)
        reply1 = oa.beta.threads.messages.list(t.id, limit=1).data[0].content[0].text.value
        oa.beta.threads.messages.create(t.id, role="user", content="and then?")
        r2 = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=6,
                                                  poll_interval_ms=50)
        reply2 = oa.beta.threads.messages.list(t.id, limit=1).data[0].content[0].text.value
        history = msgs + [{"role": "assistant", "content": reply1}, {"role": "user", "content": "and then?"}]
        want2, chat_usage = chat_text(oa, history, 6)
        cached = r2.usage.prompt_tokens_details["cached_tokens"]
        c.check(reply2 == want2 and cached >= r1.usage.prompt_tokens - 1 and
                chat_usage.prompt_tokens_details.cached_tokens == 0,
                "a thread's second turn attaches its first turn's KV: cached_tokens %d of %d (first turn's prompt "
                "%d; chat resending the history: %d), chat's text" %
                (cached, r2.usage.prompt_tokens, r1.usage.prompt_tokens,
                 chat_usage.prompt_tokens_details.cached_tokens))

        p1 = oa.responses.create(model="tiny", input=first, temperature=0, max_output_tokens=6)
        p2 = oa.responses.create(model="tiny", input="and then?", previous_response_id=p1.id, temperature=0,
                                 max_output_tokens=6)
        fork = oa.responses.create(model="tiny", input="and before?", previous_response_id=p1.id, temperature=0,
                                   max_output_tokens=6)
        want_p2, _ = chat_text(oa, msgs + [{"role": "assistant", "content": p1.output_text},
                                           {"role": "user", "content": "and then?"}], 6)
        c.check(p2.output_text == want_p2 and
                p2.usage.input_tokens_details.cached_tokens >= p1.usage.input_tokens - 1 and
                fork.usage.input_tokens_details.cached_tokens >= p1.usage.input_tokens - 1,
                "a chain's next response, and a fork from the same one, attach its KV: cached %d and %d of %d" %
                (p2.usage.input_tokens_details.cached_tokens, fork.usage.input_tokens_details.cached_tokens,
                 p1.usage.input_tokens))

        conv = oa.conversations.create()
        q1 = oa.responses.create(model="tiny", input=first, conversation=conv.id, temperature=0, max_output_tokens=6)
        q2 = oa.responses.create(model="tiny", input="and then?", conversation=conv.id, temperature=0,
                                 max_output_tokens=6)
        c.check(q2.usage.input_tokens_details.cached_tokens >= q1.usage.input_tokens - 1,
                "a conversation's next turn attaches its KV: cached %d of %d" %
                (q2.usage.input_tokens_details.cached_tokens, q2.usage.input_tokens))
        held = handles(srv, 5)
        c.check(held == 5, "five handles kept: the thread's, three responses', the conversation's (%s)" % held)
        oa.beta.threads.delete(t.id)
        for r in (p1, p2, fork):
            oa.responses.delete(r.id)
        oa.conversations.delete(conv.id)
        c.check(handles(srv, 0) == 0, "deleting them releases every handle")
        c.check(settled(srv), "nothing left running")
    finally:
        c.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def long_run(oa, a, t):
    """A run that generates for a while (the tiny model rarely says EOS), once it is in progress."""
    run = oa.beta.threads.runs.create(thread_id=t.id, assistant_id=a.id, max_completion_tokens=3000)
    return poll(oa, run, statuses=("in_progress", "completed", "incomplete", "failed"))


def case_cancel(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    a = oa.beta.assistants.create(model="tiny", temperature=0)
    t = oa.beta.threads.create(messages=[{"role": "user", "content": "Go on and on"}])
    run = long_run(oa, a, t)
    c.check(run.status == "in_progress", "the long run is in progress (%s)" % run.status)
    expect_error(c, lambda: oa.beta.threads.runs.create(thread_id=t.id, assistant_id=a.id), 400, None,
                 "a second run on a busy thread is 400", "already has an active run")
    expect_error(c, lambda: oa.beta.threads.messages.create(t.id, role="user", content="x"), 400, None,
                 "a message while a run is active is 400", "while a run")
    cancelled = oa.beta.threads.runs.cancel(run.id, thread_id=t.id)
    c.check(cancelled.status in ("cancelling", "cancelled"), "cancel answers cancelling (%s)" % cancelled.status)
    run = poll(oa, cancelled, timeout=30)
    reply = oa.beta.threads.messages.list(t.id, limit=1).data[0]
    c.check(run.status == "cancelled" and run.cancelled_at is not None, "the run ends cancelled (%s)" % run.status)
    c.check(reply.status == "incomplete" and reply.incomplete_details.reason == "run_cancelled",
            "its reply is incomplete (run_cancelled) with the text so far (%d characters)" %
            len(reply.content[0].text.value))
    c.check(settled(srv), "nothing keeps running within 10 s: requests_running %s, calls_in_flight %s" %
            (metric(srv, "shardlm_requests_running"), metric(srv, "shardlm_calls_in_flight")))
    expect_error(c, lambda: oa.beta.threads.runs.cancel(run.id, thread_id=t.id), 400, None,
                 "cancelling an ended run is 400", "Cannot cancel run with status 'cancelled'")
    after = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=4,
                                                 poll_interval_ms=50)
    c.check(after.status == "incomplete", "the thread goes on (%s)" % after.status)
    # Deleting a thread stops the run generating for it.
    gone = oa.beta.threads.create(messages=[{"role": "user", "content": "Go on and on"}])
    busy = long_run(oa, a, gone)
    oa.beta.threads.delete(gone.id)
    c.check(busy.status == "in_progress" and settled(srv),
            "deleting a thread stops its run (requests_running %s)" % metric(srv, "shardlm_requests_running"))


def case_concurrent(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    a = oa.beta.assistants.create(model="tiny", temperature=0)
    prompts = ["The harbour committee met", "Name three colours"]
    threads = [oa.beta.threads.create(messages=[{"role": "user", "content": p}]) for p in prompts]
    runs = [oa.beta.threads.runs.create(thread_id=t.id, assistant_id=a.id, max_completion_tokens=40) for t in threads]
    runs = [poll(oa, r) for r in runs]
    c.check(all(r.status == "incomplete" for r in runs), "both runs end (%s)" % [r.status for r in runs])
    for t, p in zip(threads, prompts):
        want, _ = chat_text(oa, [{"role": "user", "content": p}], 40)
        got = oa.beta.threads.messages.list(t.id, limit=1).data[0].content[0].text.value
        c.check(got == want, "thread %s has its own reply" % p)


def case_responses(ctx, c):
    srv = ctx.shared()
    oa, ob = client(srv), client(srv, KEY_B)
    p1 = "The harbour committee met"
    r1 = oa.responses.create(model="tiny", input=p1, temperature=0, max_output_tokens=10)
    want1, u1 = chat_text(oa, [{"role": "user", "content": p1}], 10)
    c.check(r1.output_text == want1 and r1.usage.input_tokens == u1.prompt_tokens,
            "text input: chat's text and prompt tokens (%r vs %r)" % (r1.output_text, want1))
    c.check(r1.status == "incomplete" and r1.incomplete_details.reason == "max_output_tokens" and
            r1.output[0].status == "incomplete" and r1.usage.output_tokens == 10,
            "max_output_tokens 10 ends it incomplete: %s" % r1.incomplete_details)
    c.check(r1.id.startswith("resp_") and r1.object == "response" and r1.store is True and r1.model == "tiny",
            "response fields: %s" % r1.model_dump_json()[:240])
    r_items = oa.responses.create(model="tiny", temperature=0, max_output_tokens=6, input=[
        {"role": "developer", "content": "You are terse."},
        {"role": "user", "content": [{"type": "input_text", "text": p1}]}])
    want_items, _ = chat_text(oa, [{"role": "system", "content": "You are terse."}, {"role": "user", "content": p1}], 6)
    c.check(r_items.output_text == want_items, "item input, developer as system: chat's text")
    r_ins = oa.responses.create(model="tiny", temperature=0, max_output_tokens=6, instructions="You are terse.",
                                input=p1)
    c.check(r_ins.output_text == want_items and r_ins.instructions == "You are terse.",
            "instructions are the system message")

    r2 = oa.responses.create(model="tiny", temperature=0, max_output_tokens=8, previous_response_id=r1.id,
                             input="and then?")
    want2, _ = chat_text(oa, [{"role": "user", "content": p1}, {"role": "assistant", "content": want1},
                              {"role": "user", "content": "and then?"}], 8)
    c.check(r2.output_text == want2 and r2.previous_response_id == r1.id,
            "previous_response_id: chat's text for the whole history (%r vs %r)" % (r2.output_text, want2))
    # KV reuse along a chain: a first turn of several full KV blocks (16 tokens each), then the next.
    long_turn = "The harbour committee met on a grey Tuesday morning to discuss the state of the piers, " * 3
    first = oa.responses.create(model="tiny", input=long_turn, temperature=0, max_output_tokens=4)
    second = oa.responses.create(model="tiny", input="and then?", previous_response_id=first.id, temperature=0,
                                 max_output_tokens=4)
    full_blocks = first.usage.input_tokens // 16 * 16
    cached = second.usage.input_tokens_details.cached_tokens
    c.check(full_blocks >= 48 and cached >= full_blocks - 16,
            "the chain reuses the first turn's KV: cached_tokens %d of %d (first turn: %d tokens)" %
            (cached, second.usage.input_tokens, first.usage.input_tokens))
    got = oa.responses.retrieve(r1.id)
    c.check(got.output_text == r1.output_text and got.status == r1.status and got.usage == r1.usage,
            "retrieve equals what create answered")
    items = oa.responses.input_items.list(r2.id)
    c.check([i.content[0].text for i in items.data] == ["and then?"] and items.data[0].role == "user",
            "input_items: the response's own input")
    expect_error(c, lambda: ob.responses.retrieve(r1.id), 404, None, "key B cannot read A's response",
                 "No response found with id '%s'." % r1.id)
    expect_error(c, lambda: ob.responses.create(model="tiny", input="x", previous_response_id=r1.id), 404,
                 "previous_response_id", "nor continue it")

    r3 = oa.responses.create(model="tiny", input="not kept", store=False, max_output_tokens=3)
    expect_error(c, lambda: oa.responses.retrieve(r3.id), 404, None, "store: false is never stored")
    deleted = oa.responses.delete(r2.id)
    expect_error(c, lambda: oa.responses.retrieve(r2.id), 404, None, "a deleted response is 404")
    c.check(deleted is None or getattr(deleted, "deleted", True), "delete")

    schema = {"type": "object", "properties": {"name": {"enum": ["alpha", "beta"]}, "n": {"type": "boolean"}},
              "required": ["name", "n"], "additionalProperties": False}
    r4 = oa.responses.create(model="tiny", input="A name as JSON", max_output_tokens=60,
                             text={"format": {"type": "json_schema", "name": "n", "schema": schema}})
    try:
        jsonschema.validate(json.loads(r4.output_text), schema)
        valid = r4.status == "completed"
    except Exception as e:  # noqa: BLE001
        valid = False
        c.note("not valid: %s" % e)
    c.check(valid, "text.format json_schema: valid JSON (%s %r)" % (r4.status, r4.output_text[:80]))

    # A stream that completes (the schema makes the tiny model stop), read by the client's helper.
    names, deltas, seqs = [], [], []
    with oa.responses.stream(model="tiny", input="A name as JSON", max_output_tokens=60,
                             text={"format": {"type": "json_schema", "name": "n", "schema": schema}}) as stream:
        for event in stream:
            names.append(event.type)
            seqs.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    head = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done",
            "response.completed"]
    middle = names[len(head):len(names) - len(tail)]
    c.check(names[:len(head)] == head and names[-len(tail):] == tail and middle and
            all(n == "response.output_text.delta" for n in middle), "stream events in order: %s" %
            [n for n in names if n != "response.output_text.delta"])
    c.check(seqs == list(range(len(seqs))), "sequence_number counts from 0 without a gap")
    c.check("".join(deltas) == final.output_text == oa.responses.retrieve(final.id).output_text and
            all(deltas), "the deltas join to the stored text, none empty")
    # One cut short by max_output_tokens ends with response.incomplete.
    events = list(oa.responses.create(model="tiny", input=p1, temperature=0, max_output_tokens=10, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    c.check(events[-1].type == "response.incomplete" and text == want1 and
            events[-1].response.incomplete_details.reason == "max_output_tokens",
            "a stream cut by max_output_tokens: response.incomplete, chat's text")

    expect_error(c, lambda: oa.responses.create(model="gpt-4o", input="x"), 400, "model", "an unknown model")
    expect_error(c, lambda: oa.responses.create(model="tiny", input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "http://x/y.png"}]}]), 400, "input[0].content", "an image part")
    expect_error(c, lambda: oa.responses.create(model="tiny", input="word " * 40000), 400, "input",
                 "an input past the context", "longer than")
    expect_error(c, lambda: oa.responses.cancel(r1.id), 400, None, "cancel of a foreground response",
                 "background=true")


def poll_response(oa, r, timeout=60):
    deadline = time.monotonic() + timeout
    while r.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        r = oa.responses.retrieve(r.id)
    return r


def case_background(ctx, c):
    srv = ctx.shared()
    oa, ob = client(srv), client(srv, KEY_B)
    p1 = "The harbour committee met"
    r = oa.responses.create(model="tiny", input=p1, temperature=0, max_output_tokens=10, background=True)
    c.check(r.background is True and r.status in ("queued", "in_progress") and not r.output,
            "a background create answers at once, in progress (%s)" % r.status)
    done = poll_response(oa, r)
    want, u = chat_text(oa, [{"role": "user", "content": p1}], 10)
    c.check(done.status == "incomplete" and done.output_text == want and done.usage.input_tokens == u.prompt_tokens
            and done.background is True, "polled, it ends as a foreground one would: %s %r" %
            (done.status, done.output_text))
    expect_error(c, lambda: oa.responses.cancel(r.id), 400, "response_id", "cancelling an ended one",
                 "Cannot cancel a response with status 'incomplete'.")

    long = oa.responses.create(model="tiny", input="Go on and on", temperature=0, max_output_tokens=3000,
                               background=True)
    time.sleep(1)
    expect_error(c, lambda: ob.responses.cancel(long.id), 404, None, "key B cannot cancel A's response")
    t0 = time.monotonic()
    cancelled = oa.responses.cancel(long.id)
    took = time.monotonic() - t0
    c.check(cancelled.status == "cancelled" and oa.responses.retrieve(long.id).status == "cancelled",
            "a long one cancelled while it generates ends cancelled, stored so (%s, %.2f s)" %
            (cancelled.status, took))
    c.check(settled(srv), "nothing keeps running within 10 s: requests_running %s, calls_in_flight %s" %
            (metric(srv, "shardlm_requests_running"), metric(srv, "shardlm_calls_in_flight")))
    c.check(oa.responses.cancel(long.id).status == "cancelled", "cancelling it again answers it as it is")
    expect_error(c, lambda: oa.responses.create(model="tiny", input="x", background=True, store=False), 400,
                 "background", "background without store")
    expect_error(c, lambda: oa.responses.create(model="tiny", input="x", background=True, stream=True), 400,
                 "stream", "background and stream")


def case_conversations(ctx, c):
    srv = ctx.shared()
    oa, ob = client(srv), client(srv, KEY_B)
    p1 = "The harbour committee met"
    conv = oa.conversations.create(items=[{"type": "message", "role": "user", "content": p1}],
                                   metadata={"topic": "harbour"})
    c.check(conv.id.startswith("conv_") and conv.object == "conversation" and conv.metadata == {"topic": "harbour"},
            "create: %s" % conv.model_dump_json()[:200])
    all_fields(c, conv, Conversation, "conversation")
    first = oa.conversations.items.list(conv.id).data
    c.check(len(first) == 1 and first[0].role == "user" and first[0].content[0].text == p1 and
            first[0].id.startswith("msg_"), "the create's items are stored as message items")

    # A response in it is prompted with its items, then its input, and adds both and its reply.
    r1 = oa.responses.create(model="tiny", conversation=conv.id, input="and then?", temperature=0,
                             max_output_tokens=8)
    want1, u1 = chat_text(oa, [{"role": "user", "content": p1}, {"role": "user", "content": "and then?"}], 8)
    c.check(r1.output_text == want1 and r1.usage.input_tokens == u1.prompt_tokens and
            r1.conversation is not None and r1.conversation.id == conv.id,
            "a response in the conversation: chat's text for its items and the input (%r vs %r)" %
            (r1.output_text, want1))
    turn = oa.conversations.items.list(conv.id, order="asc").data
    c.check([i.role for i in turn] == ["user", "user", "assistant"] and turn[1].content[0].text == "and then?" and
            turn[2].id == r1.output[0].id and turn[2].content[0].text == r1.output_text,
            "the conversation now holds the input and the reply: %s" % [i.role for i in turn])
    r2 = oa.responses.create(model="tiny", conversation={"id": conv.id}, input="and after?", temperature=0,
                             max_output_tokens=8)
    want2, _ = chat_text(oa, [{"role": "user", "content": p1}, {"role": "user", "content": "and then?"},
                              {"role": "assistant", "content": want1}, {"role": "user", "content": "and after?"}], 8)
    c.check(r2.output_text == want2, "the next turn sees the whole history (%r vs %r)" % (r2.output_text, want2))

    added = oa.conversations.items.create(conv.id, items=[
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one more"}]}])
    c.check(len(added.data) == 1 and added.data[0].content[0].text == "one more", "items create")
    got = oa.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    c.check(got.id == added.data[0].id and got.role == "user", "item retrieve")
    after = oa.conversations.items.delete(added.data[0].id, conversation_id=conv.id)
    c.check(after.id == conv.id and after.object == "conversation", "item delete answers the conversation")
    expect_error(c, lambda: oa.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id), 404, None,
                 "a deleted item is 404")
    page = oa.conversations.items.list(conv.id, limit=2)
    c.check(len(page.data) == 2 and page.has_more and page.data[0].id == r2.output[0].id,
            "items list: newest first, by pages of `limit`")
    c.check(len(list(oa.conversations.items.list(conv.id, limit=2))) == 5, "the pager walks all 5 items")
    updated = oa.conversations.update(conv.id, metadata={"topic": "piers"})
    c.check(updated.metadata == {"topic": "piers"} and oa.conversations.retrieve(conv.id).metadata == {"topic": "piers"},
            "update")

    expect_error(c, lambda: oa.responses.create(model="tiny", input="x", conversation=conv.id,
                                                previous_response_id=r1.id), 400, "conversation",
                 "conversation with previous_response_id", "Mutually exclusive")
    expect_error(c, lambda: oa.responses.create(model="tiny", input="x", conversation="conv_nope"), 404,
                 "conversation", "an unknown conversation", "No conversation found with id 'conv_nope'.")
    expect_error(c, lambda: oa.responses.create(model="tiny", input="x", conversation=conv.id, store=False), 400,
                 "store", "store: false in a conversation")
    expect_error(c, lambda: ob.conversations.retrieve(conv.id), 404, None, "key B cannot read A's conversation")
    expect_error(c, lambda: ob.responses.create(model="tiny", input="x", conversation=conv.id), 404,
                 "conversation", "nor answer in it")
    expect_error(c, lambda: oa.conversations.items.create(conv.id, items=[
        {"type": "reasoning", "summary": []}]), 400, "items[0].type",
        "an item type this server does not keep")
    expect_error(c, lambda: oa.conversations.create(items=[{"role": "user", "content": "x"}] * 21), 400, "items",
                 "21 items", "at most 20")
    deleted = oa.conversations.delete(conv.id)
    c.check(deleted.deleted and deleted.object == "conversation.deleted" and deleted.id == conv.id, "delete")
    expect_error(c, lambda: oa.conversations.items.list(conv.id), 404, None, "its items went with it")
    c.check(oa.responses.retrieve(r1.id).output_text == r1.output_text, "its responses stay")


def workers_of(parent_pid):
    """{rank: pid} of the `shardlm worker` children of parent_pid."""
    out = {}
    for pid, ppid, _stat, args in harness.ps_rows():
        if ppid == parent_pid and " worker " in " %s " % args and "--rank " in args:
            out[int(args.split("--rank ")[1].split()[0])] = pid
    return out


def healthy(srv, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(srv.base.replace("/v1", "/health"), timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False


def case_worker_killed(ctx, c):
    srv = ctx.serve("serve-kill", *ctx.state_flags("state-kill", fresh=True), "--collective-timeout-ms", "3000")
    try:
        oa = client(srv)
        a = oa.beta.assistants.create(model="tiny", temperature=0)
        t = oa.beta.threads.create(messages=[{"role": "user", "content": "Go on and on"}])
        run = long_run(oa, a, t)
        workers = workers_of(srv.proc.pid)
        c.check(run.status == "in_progress" and sorted(workers) == [0, 1],
                "a run in progress on two workers (%s, %s)" % (run.status, workers))
        os.kill(workers[1], signal.SIGKILL)
        run = poll(oa, run, timeout=30)
        c.check(run.status == "failed" and run.last_error.code == "server_error" and
                "rank 1" in run.last_error.message, "the run ends failed naming rank 1: %s %s" %
                (run.status, run.last_error))
        reply = oa.beta.threads.messages.list(t.id, limit=1).data[0]
        c.check(reply.role == "assistant" and reply.incomplete_details.reason == "run_failed",
                "its reply is incomplete (run_failed)")
        c.check(healthy(srv, 60), "/health is 200 again (the group re-formed)")
        nxt = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=4,
                                                   poll_interval_ms=50)
        c.check(nxt.status == "incomplete" and nxt.usage.completion_tokens == 4,
                "the thread's next run completes (%s)" % nxt.status)
    finally:
        c.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def case_drain(ctx, c):
    state = ctx.state_flags("state-drain", fresh=True)
    srv = ctx.serve("serve-drain", *state, "--shutdown-grace-s", "1")
    oa = client(srv)
    a = oa.beta.assistants.create(model="tiny", temperature=0)
    t = oa.beta.threads.create(messages=[{"role": "user", "content": "Go on and on"}])
    run = long_run(oa, a, t)
    c.check(run.status == "in_progress", "a long run is in progress (%s)" % run.status)
    bg = oa.responses.create(model="tiny", input="Go on and on", max_output_tokens=3000, background=True)
    t0 = time.monotonic()
    rc = srv.stop()
    took = time.monotonic() - t0
    c.check(rc == 0 and took < 10, "serve exits 0 on SIGTERM within 10 s (rc %s, %.1f s)" % (rc, took))
    srv = ctx.serve("serve-drain-2", *state)
    try:
        ended = client(srv).beta.threads.runs.retrieve(run.id, thread_id=t.id)
        c.check(ended.status == "failed" and "shutting down" in ended.last_error.message,
                "the run reads failed: %s %s" % (ended.status, ended.last_error))
        bg_ended = client(srv).responses.retrieve(bg.id)
        c.check(bg_ended.status == "failed" and "shutting down" in bg_ended.error.message,
                "so does the background response: %s %s" % (bg_ended.status, bg_ended.error))
    finally:
        srv.stop()


def case_restart(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    a = oa.beta.assistants.create(model="tiny", name="survivor", metadata={"x": "1"})
    t = oa.beta.threads.create(messages=[{"role": "user", "content": "one"}])
    oa.beta.threads.messages.create(t.id, role="user", content="two")
    before = [x.id for x in oa.beta.assistants.list(limit=100)]
    ctx.stop_shared()
    srv = ctx.shared()
    oa = client(srv)
    c.check(oa.beta.assistants.retrieve(a.id).metadata == {"x": "1"}, "the assistant is there after a restart")
    c.check([m.content[0].text.value for m in oa.beta.threads.messages.list(t.id, order="asc")] == ["one", "two"],
            "the thread's messages too, in order")
    c.check([x.id for x in oa.beta.assistants.list(limit=100)] == before, "the list is the same")
    n = oa.beta.assistants.create(model="tiny", name="after")
    c.check(oa.beta.assistants.list(limit=1).data[0].id == n.id, "a new object lists first (newest)")
    if ctx.postgres:
        c.check("state in %s (schema " % ctx.state_flags("state")[1] in srv.text(), "serve printed its state")
    else:
        c.check("state in sqlite://%s/state.db (schema " % ctx.state_dir in srv.text(), "serve printed its state")
        mode = os.stat(os.path.join(ctx.state_dir, "state.db")).st_mode & 0o777
        c.check(mode == 0o600, "the database file is 0600 (%o)" % mode)

    a = oa.beta.assistants.create(model="tiny", temperature=0)
    t = oa.beta.threads.create(messages=[{"role": "user", "content": "Go on and on"}])
    run = long_run(oa, a, t)
    c.check(run.status == "in_progress", "a long run is in progress (%s)" % run.status)
    pid = srv.proc.pid
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    left = harness.wait_no_workers(ctx.model, 30)
    c.check(not left, "serve's workers go with it (%s)" % left)
    ctx.server = None
    srv = ctx.shared()
    oa = client(srv)
    dead = oa.beta.threads.runs.retrieve(run.id, thread_id=t.id)
    c.check(dead.status == "failed" and dead.last_error.code == "server_error" and
            "stopped" in dead.last_error.message, "the run of the killed serve (pid %d) reads failed: %s" %
            (pid, dead.last_error))
    c.check(len(oa.beta.threads.messages.list(t.id).data) == 1, "and left no half-written reply")
    nxt = oa.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=4,
                                               poll_interval_ms=50)
    c.check(nxt.status == "incomplete", "the thread's next run completes (%s)" % nxt.status)


def case_npm(ctx, c):
    srv = ctx.shared()
    npm = os.path.join(ROOT, "third_party", "npm", "node_modules")
    p = subprocess.run(["node", os.path.join(HERE, "stateful_client.mjs"), srv.base, KEY_A, "tiny", npm],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise Failure("the npm client failed: %s" % p.stderr[-1500:])
    out = json.loads(p.stdout.strip().split("\n")[-1])
    c.check(out["assistant"]["object"] == "assistant" and out["assistant"]["metadata"] == {"by": "npm"} and
            out["assistant"]["tools"] == [], "create: %s" % out["assistant"])
    c.check(out["retrieved"] == "npm" and out["updated"] == "from npm", "retrieve and update")
    c.check(out["paged"] == out["made"], "auto-paging two at a time: %s" % out["paged"])
    c.check(out["messages"] == ["first", "second"], "messages paged one at a time: %s" % out["messages"])
    c.check(out["thread_deleted"] and out["after_delete"] == {"status": 404, "name": "NotFoundError"},
            "a deleted thread is NotFoundError: %s" % out["after_delete"])
    c.check(out["refused"]["status"] == 400 and out["refused"]["param"] == "tools[0].type",
            "file_search refused naming tools[0].type: %s" % out["refused"])
    c.check(out["deleted"] is True, "assistant delete")
    oa = client(srv)
    want, _ = chat_text(oa, [{"role": "user", "content": "The harbour committee met"}], 6)
    c.check(out["response"]["text"] == want and out["response"]["status"] == "incomplete" and
            out["retrieved_text"] == want, "responses.create and retrieve: chat's text (%r)" % out["response"]["text"])
    c.check(out["chained"]["previous"] == out["response"]["id"] and out["chained"]["text"],
            "a previous_response_id chain")
    c.check(out["stream_types"][0] == "response.created" and out["stream_types"][-1] == "response.incomplete" and
            out["stream_text"] == want, "responses.stream: %s ... %s" % (out["stream_types"][:2],
                                                                          out["stream_types"][-1:]))
    c.check(out["input_items"] == ["message"] and out["response_deleted"] and
            out["background"] == {"status": "in_progress", "cancelled": "cancelled"},
            "responses input items, delete, a background one cancelled: %s %s %s" %
            (out["input_items"], out["response_deleted"], out["background"]))
    c.check(out["message"] == {"retrieved": "one", "updated": {"m": "1"}} and out["thread_updated"] == {"k": "w"}
            and out["message_deleted"] is True, "messages retrieve, update, delete; thread update: %s" %
            out["message"])
    r = out["run"]
    c.check(r["status"] == "incomplete" and r["listed"] and r["retrieved"] == "incomplete" and
            r["updated"] == {"r": "1"} and r["step"] == "message_creation", "runs: %s" % r)
    c.check(out["run_stream"][:3] == ["thread.run.created", "thread.run.queued", "thread.run.in_progress"] and
            out["run_stream"][-1] == "thread.run.incomplete", "runs.stream: %s" % out["run_stream"])
    c.check(out["create_and_run"] == "incomplete" and out["run_cancelled"] in ("cancelling", "cancelled"),
            "createAndRunPoll, and a cancel: %s %s" % (out["create_and_run"], out["run_cancelled"]))
    c.check(out["tools"] == {"asked": "requires_action", "name": "get_weather", "answered": "incomplete"} and
            out["function_call"] == ["function_call"], "function tools: %s %s" % (out["tools"], out["function_call"]))
    c.check(out["conversation"] == {"retrieved": {"c": "1"}, "updated": {"c": "2"}} and
            out["items"]["listed"] == 2 and out["items"]["retrieved"] == "message" and
            out["items"]["after_delete"].startswith("conv_") and out["conversation_deleted"] is True,
            "conversations and their items: %s %s" % (out["conversation"], out["items"]))


def case_flags(ctx, c):
    srv = ctx.serve("serve-none", "--state-db", "none")
    try:
        status, body = raw(srv, "GET", "/assistants")
        c.check(status == 404 and "--state-db" in body["error"]["message"], "none: 404 naming --state-db: %s" % body)
        chat = client(srv).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                   max_tokens=2)
        c.check(chat.usage.completion_tokens >= 1, "chat still works with --state-db none")
    finally:
        srv.stop()
    base = [ctx.binary, "serve", "--model", ctx.model, "--tp", "2", "--port", "0", "--http-port", "0"]
    p = subprocess.run(base + ["--state-db", "mysql://app:hunter2@db/x"], capture_output=True, text=True,
                       timeout=60)
    c.check(p.returncode == 2 and "--state-db" in p.stderr and "hunter2" not in p.stderr + p.stdout,
            "a bad --state-db exits 2 naming it, no password: rc %d %s" % (p.returncode, p.stderr.strip()[-200:]))
    c.check("worker" not in p.stdout, "before any worker starts")
    p = subprocess.run(base + ["--state-db", "postgresql://app:hunter2@/x?host=%s" % ctx.dir("no-server")],
                       capture_output=True, text=True, timeout=60)
    c.check(p.returncode == 1 and "--state-db" in p.stderr and "cannot connect" in p.stderr and
            "hunter2" not in p.stderr + p.stdout and "worker" not in p.stdout,
            "a PostgreSQL server that is not there exits 1 naming --state-db, no password, before any worker: "
            "rc %d %s" % (p.returncode, p.stderr.strip()[-240:]))
    blocker = ctx.dir("not-a-dir")
    with open(blocker, "w") as f:
        f.write("x")
    p = subprocess.run(base + ["--state-dir", blocker + "/sub"], capture_output=True, text=True, timeout=60)
    c.check(p.returncode == 1 and "--state-dir" in p.stderr,
            "an unusable --state-dir exits 1 naming it: rc %d %s" % (p.returncode, p.stderr.strip()[-200:]))

# A function whose arguments the grammar bounds: the tiny model's forced call always ends.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                   "required": ["city"], "additionalProperties": False}}}
FLAT_WEATHER = dict(WEATHER["function"], type="function")  # the Responses API's form
CALL_OUTPUT = "22 C and sunny"


def chat_calls(oa, messages, **kw):
    r = oa.chat.completions.create(model="tiny", messages=messages, tools=[WEATHER], temperature=0, **kw)
    return [(t.function.name, t.function.arguments) for t in (r.choices[0].message.tool_calls or [])]


def after_call(name, arguments):
    """Chat's messages for a call and its output (what a run or a response is prompted with next)."""
    return [{"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": CALL_OUTPUT}]


class ToolRecorder(Recorder):
    def on_event(self, event):
        super().on_event(event)
        if event.event == "thread.run.step.delta":
            self.deltas.append(event.data.delta.step_details.tool_calls[0].function.name)


def run_tools(ctx, c, oa):
    """A run that calls get_weather, its outputs submitted, then its reply."""
    system = {"role": "system", "content": "You call tools."}
    user = {"role": "user", "content": "Weather in Paris?"}
    a = oa.beta.assistants.create(model="tiny", instructions="You call tools.", tools=[WEATHER], temperature=0)
    t = oa.beta.threads.create(messages=[user])
    run = poll(oa, oa.beta.threads.runs.create(thread_id=t.id, assistant_id=a.id, tool_choice="required",
                                               max_completion_tokens=60),
               statuses=("requires_action", "completed", "incomplete", "failed", "cancelled"))
    want = chat_calls(oa, [system, user], tool_choice="required")
    calls = run.required_action.submit_tool_outputs.tool_calls if run.required_action else []
    c.check(run.status == "requires_action" and [(x.function.name, x.function.arguments) for x in calls] == want
            and calls[0].id.startswith("call_") and run.expires_at is not None,
            "tool_choice required: requires_action with chat's call %s (got %s %s)" % (want, run.status, calls))
    steps = oa.beta.threads.runs.steps.list(run.id, thread_id=t.id).data
    c.check([(s.type, s.status) for s in steps] == [("tool_calls", "in_progress")] and
            steps[0].step_details.tool_calls[0].function.output is None and
            [m.role for m in oa.beta.threads.messages.list(t.id).data] == ["user"],
            "an open tool_calls step and no message for a reply of calls only")
    submit = oa.beta.threads.runs.submit_tool_outputs
    expect_error(c, lambda: submit(run.id, thread_id=t.id, tool_outputs=[]), 400, "tool_outputs", "no outputs")
    expect_error(c, lambda: submit(run.id, thread_id=t.id, tool_outputs=[{"tool_call_id": "call_x", "output": "1"}]),
                 400, "tool_outputs", "an output for an unknown call")
    two = [{"tool_call_id": calls[0].id, "output": "1"}] * 2
    expect_error(c, lambda: submit(run.id, thread_id=t.id, tool_outputs=two), 400, "tool_outputs", "two outputs")
    done = oa.beta.threads.runs.submit_tool_outputs_and_poll(
        run_id=run.id, thread_id=t.id, tool_outputs=[{"tool_call_id": calls[0].id, "output": CALL_OUTPUT}],
        poll_interval_ms=50)
    reply = oa.beta.threads.messages.list(t.id, limit=1).data[0]
    n = done.usage.completion_tokens - run.usage.completion_tokens
    want_text, _ = chat_text(oa, [system, user] + after_call(*want[0]), n, tools=[WEATHER])
    c.check(done.status in ("completed", "incomplete") and reply.run_id == run.id and
            reply.content[0].text.value == want_text and done.usage.prompt_tokens > run.usage.prompt_tokens,
            "after the outputs: chat's text for the call and its output (%r vs %r), usage summed" %
            (reply.content[0].text.value[:60], want_text[:60]))
    steps = oa.beta.threads.runs.steps.list(run.id, thread_id=t.id, order="asc").data
    c.check([(s.type, s.status) for s in steps] == [("tool_calls", "completed"), ("message_creation", "completed")]
            and steps[0].step_details.tool_calls[0].function.output == CALL_OUTPUT,
            "the tool step completed with its output, then the message step: %s" % [(s.type, s.status) for s in steps])
    expect_error(c, lambda: submit(run.id, thread_id=t.id, tool_outputs=[{"tool_call_id": calls[0].id, "output": "x"}]),
                 400, None, "outputs to a run that requires no action")
    return a, t


def run_tools_stream(ctx, c, oa, a, t):
    oa.beta.threads.messages.create(t.id, role="user", content="And in Oslo?")
    rec = ToolRecorder()
    named = {"type": "function", "function": {"name": "get_weather"}}
    with oa.beta.threads.runs.stream(thread_id=t.id, assistant_id=a.id, tool_choice=named,
                                     max_completion_tokens=40, event_handler=rec) as stream:
        stream.until_done()
        run = stream.get_final_run()
    c.check(rec.names == ["thread.run.created", "thread.run.queued", "thread.run.in_progress",
                          "thread.run.step.created", "thread.run.step.in_progress", "thread.run.step.delta",
                          "thread.run.requires_action"] and rec.deltas == ["get_weather"] and
            run.status == "requires_action", "a streamed run of one call: %s" % rec.names)
    call = run.required_action.submit_tool_outputs.tool_calls[0]
    rec2 = Recorder()
    with oa.beta.threads.runs.submit_tool_outputs_stream(
            run_id=run.id, thread_id=t.id, tool_outputs=[{"tool_call_id": call.id, "output": CALL_OUTPUT}],
            event_handler=rec2) as stream:
        stream.until_done()
    names = [n for n in rec2.names if n != "thread.message.delta"]
    c.check(names[:3] == ["thread.run.step.completed", "thread.run.queued", "thread.run.in_progress"] and
            names[-1] in ("thread.run.completed", "thread.run.incomplete") and
            "thread.message.created" in names, "a streamed submit_tool_outputs: %s" % names)
    third = poll(oa, oa.beta.threads.runs.create(thread_id=t.id, assistant_id=a.id, tool_choice="required"),
                 statuses=("requires_action", "failed"))
    cancelled = oa.beta.threads.runs.cancel(third.id, thread_id=t.id)
    steps = oa.beta.threads.runs.steps.list(third.id, thread_id=t.id).data
    c.check(cancelled.status == "cancelled" and [s.status for s in steps] == ["cancelled"],
            "a run cancelled while it waits for outputs: cancelled, its tool step too")
    expect_error(c, lambda: oa.beta.threads.runs.create(thread_id=t.id, assistant_id=a.id,
                                                        tool_choice={"type": "function", "function": {"name": "nope"}}),
                 400, "tool_choice", "tool_choice naming a function not among tools")
    expect_error(c, lambda: oa.beta.threads.runs.create(
        thread_id=t.id, assistant_id=a.id, tool_choice="required",
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}),
        400, "tool_choice", "tool_choice required with a response format")


def response_tools(ctx, c, oa):
    user = {"role": "user", "content": "Weather in Paris?"}
    r = oa.responses.create(model="tiny", input=user["content"], tools=[FLAT_WEATHER], tool_choice="required",
                            temperature=0)
    want = chat_calls(oa, [user], tool_choice="required")
    calls = [o for o in r.output if o.type == "function_call"]
    c.check(r.status == "completed" and [(x.name, x.arguments) for x in calls] == want and
            calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_") and
            r.tools[0].name == "get_weather" and r.tool_choice == "required",
            "responses: tool_choice required gives chat's call as a function_call item (%s vs %s)" % (calls, want))
    r2 = oa.responses.create(model="tiny", previous_response_id=r.id, tools=[FLAT_WEATHER], temperature=0,
                             max_output_tokens=12, input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                                           "output": CALL_OUTPUT}])
    want_text, _ = chat_text(oa, [user] + after_call(*want[0]), 12, tools=[WEATHER])
    items = oa.responses.input_items.list(r2.id).data
    c.check(r2.output_text == want_text and items[0].type == "function_call_output",
            "the output sent back: chat's text for the call and its output (%r vs %r)" % (r2.output_text, want_text))
    names = []
    with oa.responses.stream(model="tiny", input=user["content"], tools=[FLAT_WEATHER],
                             tool_choice={"type": "function", "name": "get_weather"}) as stream:
        for event in stream:
            names.append(event.type)
        final = stream.get_final_response()
    c.check(names == ["response.created", "response.in_progress", "response.output_item.added",
                      "response.function_call_arguments.delta", "response.function_call_arguments.done",
                      "response.output_item.done", "response.completed"] and
            final.output[0].type == "function_call" and oa.responses.retrieve(final.id).output[0].arguments ==
            final.output[0].arguments, "a streamed call: OpenAI's function_call events: %s" % names)
    conv = oa.conversations.create(items=[
        {"type": "message", "role": "user", "content": user["content"]},
        {"type": "function_call", "call_id": "call_1", "name": want[0][0], "arguments": want[0][1]},
        {"type": "function_call_output", "call_id": "call_1", "output": CALL_OUTPUT}])
    r3 = oa.responses.create(model="tiny", conversation=conv.id, input="Thanks.", tools=[FLAT_WEATHER],
                             temperature=0, max_output_tokens=12)
    want3, _ = chat_text(oa, [user] + after_call(*want[0]) + [{"role": "user", "content": "Thanks."}], 12,
                         tools=[WEATHER])
    kinds = [i.type for i in oa.conversations.items.list(conv.id, order="asc").data]
    c.check(kinds == ["message", "function_call", "function_call_output", "message", "message"] and
            r3.output_text == want3,
            "a conversation keeps function calls and their outputs, and is prompted with them: %s (%r vs %r)" %
            (kinds, r3.output_text, want3))
    expect_error(c, lambda: oa.responses.create(model="tiny", input="x", tools=[{"type": "web_search"}]),
                 400, "tools[0].type", "a web_search tool")
    expect_error(c, lambda: oa.responses.create(model="tiny", input=[{"type": "function_call_output", "output": "1"}]),
                 400, "input[0].call_id", "an output without call_id")


def case_tools(ctx, c):
    srv = ctx.shared()
    oa = client(srv)
    a, t = run_tools(ctx, c, oa)
    run_tools_stream(ctx, c, oa, a, t)
    response_tools(ctx, c, oa)
    c.check(settled(srv), "nothing left running")


def replicas_on(ctx, c, url):
    a_srv = ctx.serve("serve-replica-a", "--state-db", url)
    b_srv = ctx.serve("serve-replica-b", "--state-db", url)
    try:
        oa, ob = client(a_srv), client(b_srv)
        a = oa.beta.assistants.create(model="tiny", temperature=0)
        t = oa.beta.threads.create(messages=[{"role": "user", "content": "The lighthouse keeper"}])
        run = ob.beta.threads.runs.create_and_poll(thread_id=t.id, assistant_id=a.id, max_completion_tokens=8,
                                                   poll_interval_ms=50)
        want, _ = chat_text(oa, [{"role": "user", "content": "The lighthouse keeper"}], 8)
        reply = oa.beta.threads.messages.list(t.id, limit=1).data[0]
        c.check(run.status == "incomplete" and reply.content[0].text.value == want and
                oa.beta.threads.runs.retrieve(run.id, thread_id=t.id).status == "incomplete",
                "a thread made on A runs on B; A reads B's reply (chat's text): %r vs %r" %
                (reply.content[0].text.value, want))
        r1 = oa.responses.create(model="tiny", input="The lighthouse keeper", temperature=0, max_output_tokens=6)
        r2 = ob.responses.create(model="tiny", input="and then?", previous_response_id=r1.id, temperature=0,
                                 max_output_tokens=6)
        want2, _ = chat_text(oa, [{"role": "user", "content": "The lighthouse keeper"},
                                  {"role": "assistant", "content": r1.output_text},
                                  {"role": "user", "content": "and then?"}], 6)
        c.check(r2.output_text == want2, "a chain begun on A goes on on B (chat's text for the whole history)")
        # A cancel through A reaches the run generating on B (its executor polls the store).
        long_t = ob.beta.threads.create(messages=[{"role": "user", "content": "Go on and on"}])
        long_r = long_run(ob, a, long_t)
        t0 = time.monotonic()
        oa.beta.threads.runs.cancel(long_r.id, thread_id=long_t.id)
        ended = poll(oa, oa.beta.threads.runs.retrieve(long_r.id, thread_id=long_t.id), timeout=20)
        c.check(ended.status == "cancelled" and time.monotonic() - t0 < 10 and settled(b_srv),
                "a run on B cancelled through A stops on B within seconds (%s, %.1f s)" %
                (ended.status, time.monotonic() - t0))
        bg = ob.responses.create(model="tiny", input="Go on and on", max_output_tokens=3000, background=True)
        oa.responses.cancel(bg.id)
        c.check(settled(b_srv), "a background response on B cancelled through A stops on B")
        # Tools across replicas: the run asks on A, the outputs come through B, which runs it.
        ta = oa.beta.assistants.create(model="tiny", tools=[WEATHER], temperature=0)
        tt = oa.beta.threads.create(messages=[{"role": "user", "content": "Weather in Oslo?"}])
        asked = poll(oa, oa.beta.threads.runs.create(thread_id=tt.id, assistant_id=ta.id, tool_choice="required",
                                                     max_completion_tokens=40),
                     statuses=("requires_action", "completed", "incomplete", "failed"))
        call = asked.required_action.submit_tool_outputs.tool_calls[0]
        done = ob.beta.threads.runs.submit_tool_outputs_and_poll(
            run_id=asked.id, thread_id=tt.id, tool_outputs=[{"tool_call_id": call.id, "output": CALL_OUTPUT}],
            poll_interval_ms=50)
        c.check(done.status in ("completed", "incomplete"), "outputs submitted through B end the run (%s)" %
                done.status)
        c.check("hunter2" not in a_srv.text() and "state in postgresql://" in a_srv.text(),
                "serve printed the database without its password")
    finally:
        for srv in (a_srv, b_srv):
            c.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def case_replicas(ctx, c):
    if ctx.postgres:
        url = postgres_server.database_url(ctx.postgres, "replicas", fresh=True)
        return replicas_on(ctx, c, url.replace("shardlm@", "shardlm:hunter2@"))
    with postgres_server.PostgresServer() as pg:
        # trust authentication: the password is not checked, only kept out of what serve prints
        return replicas_on(ctx, c, pg.url.replace("shardlm@", "shardlm:hunter2@"))


CASES = [("objects", case_objects), ("keys", case_keys), ("errors", case_errors), ("runs", case_runs),
         ("stream", case_stream), ("tools", case_tools), ("kv", case_kv), ("cancel", case_cancel), ("concurrent", case_concurrent),
         ("responses", case_responses), ("background", case_background),
         ("conversations", case_conversations), ("worker_killed", case_worker_killed), ("drain", case_drain),
         ("restart", case_restart), ("replicas", case_replicas), ("npm", case_npm), ("flags", case_flags)]


def main():
    return harness.case_main(__doc__, CASES, "stateful", lambda w, a, b: Ctx2(w, a, b), lambda ctx: ctx.stop_shared())


if __name__ == "__main__":
    sys.exit(main())
