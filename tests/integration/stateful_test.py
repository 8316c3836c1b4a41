#!/usr/bin/env python3
"""OpenAI's Assistants API objects (assistants, threads, messages) in the state database, driven
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
  restart     after SIGTERM and a new `serve` on the same --state-dir every object is there,
              lists in the same order, and new objects list after the old ones
  npm         the official `openai` npm package: assistants create, retrieve, update, list
              (auto-paging two at a time), delete; a thread with messages paged one at a time;
              a deleted thread is NotFoundError; file_search is a 400 naming tools[0].type
  flags       --state-db none: the routes answer 404 naming --state-db, chat still works; a
              bad --state-db exits 2 naming the flag before any worker starts, with no
              password printed; a --state-dir that cannot be made exits 1 naming it

Usage:
  .venv/bin/python tests/integration/stateful_test.py --shardlm build/shardlm --workdir DIR
"""

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import harness  # noqa: E402
from harness import Ctx, Failure, LoggedProcess  # noqa: E402
import openai  # noqa: E402
from openai.types.beta import Assistant, Thread  # noqa: E402
from openai.types.beta.threads import Message  # noqa: E402

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
        self.server = None

    def serve(self, name, *extra):
        p = LoggedProcess([self.binary, "serve", "--model", self.model, "--tp", 2, "--port", 0, "--http-port", 0,
                           "--api-key-file", self.keys, "--served-model-name", "tiny"] + list(extra),
                          self.dir(name + ".log"))
        if not p.wait_for("shardlm serving", START_TIMEOUT_S):
            raise Failure("serve not ready (rc %s): %s" % (p.proc.poll(), p.text()[-1500:]))
        p.http = p.announced_port(harness.HTTP_PORT)
        p.base = "http://127.0.0.1:%d/v1" % p.http
        return p

    def shared(self):
        """The server most cases share, on the case's state directory."""
        if self.server is None:
            self.server = self.serve("serve", "--state-dir", self.state_dir)
        return self.server

    def stop_shared(self):
        if self.server is not None:
            self.server.stop()
            self.server = None


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
    c.check("state in sqlite://%s/state.db (schema " % ctx.state_dir in srv.text(), "serve printed its state")
    mode = os.stat(os.path.join(ctx.state_dir, "state.db")).st_mode & 0o777
    c.check(mode == 0o600, "the database file is 0600 (%o)" % mode)


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
    p = subprocess.run(base + ["--state-db", "postgres://app:hunter2@db/x"], capture_output=True, text=True,
                       timeout=60)
    c.check(p.returncode == 2 and "--state-db" in p.stderr and "hunter2" not in p.stderr + p.stdout,
            "a bad --state-db exits 2 naming it, no password: rc %d %s" % (p.returncode, p.stderr.strip()[-200:]))
    c.check("worker" not in p.stdout, "before any worker starts")
    blocker = ctx.dir("not-a-dir")
    with open(blocker, "w") as f:
        f.write("x")
    p = subprocess.run(base + ["--state-dir", blocker + "/sub"], capture_output=True, text=True, timeout=60)
    c.check(p.returncode == 1 and "--state-dir" in p.stderr,
            "an unusable --state-dir exits 1 naming it: rc %d %s" % (p.returncode, p.stderr.strip()[-200:]))


CASES = [("objects", case_objects), ("keys", case_keys), ("errors", case_errors), ("restart", case_restart),
         ("npm", case_npm), ("flags", case_flags)]


def main():
    parsed = harness.case_main_args(__doc__, [n for n, _ in CASES])
    if parsed is None:
        return 2
    binary, workdir, only, args = parsed
    ctx = Ctx2(workdir, args, binary)
    try:
        return harness.run_cases(CASES, only, ctx, "stateful")
    finally:
        ctx.stop_shared()


if __name__ == "__main__":
    sys.exit(main())
