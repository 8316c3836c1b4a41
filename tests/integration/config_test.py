#!/usr/bin/python3
"""One configuration for `serve`, `coordinator` and `worker`, over the real binary.

Cases:
  print_config   `serve --print-config` with a --config file, SHARDLM_* variables and flags:
                 each setting shows the source that won (flag > env > file > default), nothing
                 starts, exit 0; the output read back with --config gives the same settings;
                 `worker` reads its variables too, and main()'s SHARDLM_INTERNAL_TOKEN is no
                 setting
  bad_config     a misspelt key, an out-of-range value, a missing file, a bad variable and a
                 missing required setting each exit 2 naming the file and line, key, variable
                 or flag, and the allowed range; nothing on stdout
  serve_from_file `serve --config FILE` on a tiny model listens on the file's port, and the
                 file's metrics-port turns metrics on ("unset means off" works from a file)

The script clears SHARDLM_* variables from its own environment first, so that the caller's
cannot leak into a case.

Usage:
  /usr/bin/python3 tests/integration/config_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import (METRICS_PORT, SERVING_PORT, Ctx, Failure, LoggedProcess, case_main_args,  # noqa: E402
                     free_port, run_binary, run_cases, tail, wait_no_workers)

MODEL_FLAGS = ["--arch", "llama", "--hidden-size", "64", "--num-layers", "2", "--num-heads", "4",
               "--num-kv-heads", "2", "--intermediate-size", "128", "--seed", "5", "--dtype", "f32"]
TIMEOUT_S = 60
START_TIMEOUT_S = 60
# "key: value   # source" and "# key: value   # default" lines of --print-config.
SET_LINE = re.compile(r"^([a-z0-9-]+): (.*?) +# (.+)$")
DEFAULT_LINE = re.compile(r"^# ([a-z0-9-]+):(?: (\S.*?))? +# (.+)$")


class Run(Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary

    def run(self, *args, env=None):
        """Runs the binary with exactly `env` (plus PATH) as its environment."""
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        full_env.update(env or {})
        proc, _ = run_binary([self.binary] + [str(a) for a in args], TIMEOUT_S,
                             stdin=subprocess.DEVNULL, env=full_env)
        return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")

    def write(self, name, text):
        path = self.dir(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def model(self):
        path = self.dir("model")
        if not os.path.isfile(os.path.join(path, "config.json")):
            rc, out, err = self.run("make-tiny-model", path, *MODEL_FLAGS)
            if rc != 0:
                raise Failure("make-tiny-model failed: " + tail(out + err))
        return path


def settings(yaml_text):
    """{key: (value, source, active)} of every setting line of --print-config output; value is
    None for a commented-out setting without one."""
    def unquote(value):  # a double-quoted YAML scalar of the kind the binary writes reads as JSON
        return json.loads(value) if value and value.startswith('"') else value

    out = {}
    for line in yaml_text.splitlines():
        m = SET_LINE.match(line)
        if m:
            out[m.group(1)] = (unquote(m.group(2)), m.group(3), True)
            continue
        m = DEFAULT_LINE.match(line)
        if m:
            out[m.group(1)] = (unquote(m.group(2)), m.group(3), False)
    return out


# --- cases ---------------------------------------------------------------------------------

def print_config(ctx, chk):
    port = free_port()
    path = ctx.write("print.yaml", "# a file\nport: %d\nkv_cache_mb: 512\ndtype: f32\nhandle-ttl-s: 60\n" % port)
    model = ctx.dir("not-loaded")  # --print-config loads nothing
    env = {"SHARDLM_TP": "2", "SHARDLM_DTYPE": "bf16", "SHARDLM_INTERNAL_TOKEN": "not-a-setting",
           "SHARDLM_UNRELATED": "x"}
    rc, out, err = ctx.run("serve", "--config", path, "--model", model, "--kv-cache-mb", "128",
                           "--print-config", env=env)
    if not chk.check(rc == 0, "serve --print-config exits 0 (rc %d): %s" % (rc, tail(err))):
        return
    got = settings(out)
    want = {
        "model": (model, "flag", True),
        "tp": ("2", "env SHARDLM_TP", True),
        "dtype": ("bf16", "env SHARDLM_DTYPE", True),   # the variable beats the file
        "kv-cache-mb": ("128", "flag", True),           # the flag beats the file
        "port": (str(port), "file " + path, True),
        "handle-ttl-s": ("60", "file " + path, True),
        "host": ("127.0.0.1", "default", False),        # defaults are commented out
        "tls-cert": (None, "default (unset)", False),
    }
    for key, expected in want.items():
        chk.check(got.get(key) == expected, "%s: want %r, got %r" % (key, expected, got.get(key)))
    chk.check(not os.path.exists(model), "--print-config created nothing")

    # Round trip: the printed configuration, read back alone, is the same configuration.
    again_path = ctx.write("roundtrip.yaml", out)
    rc, again, err = ctx.run("serve", "--config", again_path, "--print-config")
    chk.check(rc == 0, "serve --config <printed> --print-config exits 0 (rc %d): %s" % (rc, tail(err)))
    round_trip = settings(again)
    chk.check(set(round_trip) == set(got) and len(got) > 20, "the same %d keys after the round trip" % len(got))
    changed = []
    for key, (value, source, active) in got.items():
        want_back = (value, "file " + again_path if active else source, active)
        if round_trip.get(key) != want_back:
            changed.append("%s: %r -> %r" % (key, want_back, round_trip.get(key)))
    chk.check(not changed, "every value the same after the round trip, set ones now from the file: %s" % changed)

    # `worker` opted in as well.
    rc, out, err = ctx.run("worker", "--print-config", "--model", model,
                           env={"SHARDLM_COORDINATOR": "10.0.0.1:50052", "SHARDLM_RANK": "3"})
    got = settings(out)
    chk.check(rc == 0 and got.get("coordinator") == ("10.0.0.1:50052", "env SHARDLM_COORDINATOR", True)
              and got.get("rank") == ("3", "env SHARDLM_RANK", True),
              "worker --print-config reads SHARDLM_COORDINATOR and SHARDLM_RANK: rc %d %r %r"
              % (rc, got.get("coordinator"), got.get("rank")))


def bad_config(ctx, chk):
    model = ctx.dir("not-loaded")
    typo = ctx.write("typo.yaml", "model: %s\nkv-cahce-mb: 512\n" % model)
    zero = ctx.write("zero.yaml", "model: %s\n\nkv-cache-mb: 0\n" % model)
    cases = [
        (["serve", "--config", typo], {},
         ["%s:2: unknown key 'kv-cahce-mb' (did you mean kv-cache-mb?)" % typo]),
        (["serve", "--config", zero], {}, ["%s:3: kv-cache-mb must be in [1, 1048576], got 0" % zero]),
        (["serve", "--config", ctx.dir("missing.yaml")], {},
         ["cannot read --config file '%s'" % ctx.dir("missing.yaml")]),
        (["serve", "--model", model], {"SHARDLM_TP": "0"}, ["SHARDLM_TP must be in [1, 64], got 0"]),
        (["coordinator", "--model", model], {"SHARDLM_INSECURE_INTERNAL": "perhaps"},
         ["SHARDLM_INSECURE_INTERNAL must be 1, 0, true or false, got 'perhaps'"]),
        (["serve"], {}, ["--model is required", "'model:'", "SHARDLM_MODEL"]),
        (["serve", "--model", model, "--kv-cache-mb", "0"], {}, ["--kv-cache-mb must be in [1, 1048576], got 0"]),
        (["serve", "--model", model, "--bogus"], {}, ["unknown flag --bogus"]),
    ]
    for args, env, needles in cases:
        rc, out, err = ctx.run(*args, env=env)
        missing = [n for n in needles if n not in err]
        chk.check(rc == 2 and not missing and out == "",
                  "%s %s: exit 2 naming %r (rc %d, stderr %r)" % (" ".join(args[:3]), env, needles, rc, tail(err, 300)))


def serve_from_file(ctx, chk):
    model = ctx.model()
    # Port 0 in the file: the port bound is the system's choice, not the default 50051, so the
    # file's value was used (a port picked free beforehand could be taken by another process).
    path = ctx.write("serve.yaml", "model: %s\ntp: 1\nhost: 127.0.0.1\nport: 0\nmetrics-port: 0\n" % model)
    srv = LoggedProcess([ctx.binary, "serve", "--config", path], ctx.dir("serve.log"))
    try:
        ready = srv.wait_for(r"shardlm serving .* on 127\.0\.0\.1:\d+", START_TIMEOUT_S)
        if not chk.check(ready, "serve --config listens on the file's host: %s" % tail(srv.text())):
            return
        port = srv.announced_port(SERVING_PORT)
        chk.check(port != 50051, "... on the file's port 0, bound to %d (not the default 50051)" % port)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            chk.check(True, "port %d accepts connections" % port)
        metrics_port = srv.announced_port(METRICS_PORT)
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=10) as r:
            body = r.read().decode()
        chk.check("shardlm_" in body, "the file's metrics-port (0, bound to %d) serves /metrics" % metrics_port)
    finally:
        rc = srv.stop()
    chk.check(rc == 0, "SIGTERM: serve exits 0 (rc %s)" % rc)
    left = wait_no_workers(model, 10)
    chk.check(not left, "no worker left behind: %s" % left)


CASES = [("print_config", print_config), ("bad_config", bad_config), ("serve_from_file", serve_from_file)]


def main():
    parsed = case_main_args(__doc__, [n for n, _ in CASES])
    if parsed is None:
        return 2
    binary, workdir, only, args = parsed
    for name in [k for k in os.environ if k.startswith("SHARDLM_")]:
        del os.environ[name]
    return run_cases(CASES, only, Run(workdir, args, binary), "config")


if __name__ == "__main__":
    sys.exit(main())
