"""Pieces shared by the Python integration test scripts (stdlib only).

The scripts under tests/integration, tests/reference and tests/tokenizer run
the real `shardlm` binary in subprocesses and print one line per sub-check.
What they have in common lives here; each script keeps its own cases, its own
per-case output format and its own summary line.  A script imports this file
with a path relative to itself:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "testing"))
    import harness

Contents:
  Failure            an expected kind of case failure (printed as a message)
  Checker            prints "ok"/"FAIL"/"note" sub-check lines, keeps failures
  Ctx                base of a script's per-run state (workdir, args, dir())
  Tally, run_case,   the PASS/FAIL-per-case loop with "NAME:" headers, timing,
  run_cases,         "total" and "<label>: N passed, M failed" lines, and the
  parse_case_args,   --shardlm/--workdir/--only handling around it
  case_main_args
  run_binary         subprocess.run, once (no retries: a crash is a failure);
                     "cannot execute" is a Failure
  run_engine         run_binary with stdin closed
  crashed            says whether a finished process died from a signal
  LoggedProcess      a long-running process with its output in a log file:
                     text(), wait_for(regex), announced_port(regex), stop()
  SERVING_PORT, WORKERS_PORT, WORKER_PORT, METRICS_PORT, HTTP_PORT
                     what a process given port 0 prints once it listens
  tail, strip_glog   shortening of output and removal of glog lines
  last_json_object   the last line of stdout that is a JSON object
  ids_arg            a --prompt-ids value
  free_port          a loopback port free a moment ago (not for shardlm's own listeners)
  ps_rows, worker_processes, wait_until_empty, wait_no_workers
                     `ps` scans for leftover `shardlm worker` processes
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.request

POLL_S = 0.2          # interval of the process scans in wait_until_empty


class Failure(Exception):
    """An expected kind of failure: printed as a message, not a traceback."""


# --- sub-checks and cases ----------------------------------------------------------------

class Checker:
    """Prints one line per sub-check and collects the failed ones."""

    def __init__(self):
        self.failures = []

    def check(self, cond, msg):
        print("    %s  %s" % ("ok  " if cond else "FAIL", msg))
        if not cond:
            self.failures.append(msg)
        return cond

    def note(self, msg):
        print("    note  " + msg)


class Ctx:
    """State the cases of one run share: the scratch folder and the arguments."""

    def __init__(self, workdir, args):
        self.workdir = workdir
        self.args = args

    def dir(self, name):
        return os.path.join(self.workdir, name)


class Tally:
    """Counts PASS/FAIL verdicts and prints the closing lines; the clock starts
    when it is made."""

    def __init__(self):
        self.passed = self.failed = 0
        self.start = time.monotonic()

    def verdict(self, name, failures, t0):
        print("%s %s (%.1f s)" % ("FAIL" if failures else "PASS", name, time.monotonic() - t0))
        sys.stdout.flush()
        if failures:
            self.failed += 1
        else:
            self.passed += 1

    def summary(self, label):
        """Prints `total` and `LABEL: N passed, M failed`; returns the exit status."""
        print("total %.1f s" % (time.monotonic() - self.start))
        print("%s: %d passed, %d failed" % (label, self.passed, self.failed))
        return 0 if self.failed == 0 else 1


def run_case(tally, name, fn, *args, handlers=()):
    """Prints `NAME:`, runs fn(*args, checker) and records the verdict.

    A Failure is printed as its message, any other exception as a traceback;
    handlers is a sequence of (exception type, fn(exc, checker)) for exceptions
    a script reports in its own way (tried in order, before the traceback)."""
    print("%s:" % name)
    chk = Checker()
    t0 = time.monotonic()
    try:
        fn(*args, chk)
    except Failure as e:
        chk.failures.append(str(e))
        print("    FAIL  " + str(e))
    except Exception as e:
        for exc_type, handle in handlers:
            if isinstance(e, exc_type):
                handle(e, chk)
                break
        else:
            chk.failures.append("exception")
            print("    FAIL  unexpected exception:\n" + traceback.format_exc())
    tally.verdict(name, chk.failures, t0)
    return chk


def run_cases(cases, only, ctx, label, always=()):
    """run_case(.., fn, ctx) for each (name, fn) of cases that --only selects
    (an empty `only` selects all; names in `always` run regardless); prints the
    closing lines and returns the exit status."""
    tally = Tally()
    for name, fn in cases:
        if only and name not in only and name not in always:
            continue
        run_case(tally, name, fn, ctx)
    return tally.summary(label)


def case_main(doc, cases, label, make_ctx, close):
    """A case script's main: parses --shardlm, --workdir and --only, makes the context with
    make_ctx(workdir, args, binary), runs the cases and finally close(ctx); returns the exit status."""
    parsed = case_main_args(doc, [n for n, _ in cases])
    if parsed is None:
        return 2
    binary, workdir, only, args = parsed
    ctx = make_ctx(workdir, args, binary)
    try:
        return run_cases(cases, only, ctx, label)
    finally:
        close(ctx)


def case_main_args(doc, case_names):
    """Parses the command line of a script that takes just --shardlm, --workdir and --only
    (its description: the first line of `doc`). Returns (binary, workdir, only, args) as
    parse_case_args does, or None after a usage error (exit 2)."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    parsed = parse_case_args(args, case_names)
    return None if parsed is None else parsed + (args,)


def parse_case_args(args, case_names):
    """--shardlm, --workdir and --only of a script whose cases are named.

    Returns (binary, workdir, only) with absolute paths (workdir created) and
    the set of --only names, or None after printing a usage error (exit 2)."""
    binary = os.path.abspath(args.shardlm)
    if not os.path.isfile(binary):
        print("shardlm binary not found: %s" % binary, file=sys.stderr)
        return None
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    only = set(x for x in args.only.split(",") if x)
    unknown = only - set(case_names)
    if unknown:
        print("unknown case(s): %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return None
    return binary, workdir, only


# --- running the binary ------------------------------------------------------------------

def run_binary(cmd, timeout, **kw):
    """subprocess.run(cmd) with stdout and stderr captured; returns (proc,
    seconds).  Runs once: a binary that dies from a signal is an answer for
    the caller to judge (a crash is a failure), never retried.
    subprocess.TimeoutExpired propagates; a binary that cannot be executed
    is a Failure."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, **kw)
    except OSError as e:
        raise Failure("could not run %s: %s" % (cmd[0], e))
    return proc, time.monotonic() - t0


def run_engine(cmd, timeout):
    """run_binary with stdin closed."""
    return run_binary(cmd, timeout, stdin=subprocess.DEVNULL)


def crashed(proc):
    """A message when proc died from a signal (a crash), else None."""
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = "signal %d" % -proc.returncode
        return "%s died from %s" % (proc.args[0] if isinstance(proc.args, list) else proc.args, name)
    return None


def tail(text, n=800):
    """The last n characters of text (stripped), with "..." where cut."""
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


def strip_glog(stderr, levels):
    """The lines of stderr that are not glog lines (a letter of `levels`, e.g.
    "IW", then the date) nor glog's "WARNING: Logging before ..." line."""
    glog = re.compile(r"^[%s]\d{8} " % levels)
    return [l for l in stderr.splitlines()
            if not glog.match(l) and not l.startswith("WARNING: Logging before")]


def last_json_object(text):
    """The last line of text that starts with "{" and parses as JSON, or None
    (log lines around the object are tolerated)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


# The /proc/cpuinfo flags each SHARDLM_CPU_ISA set needs (kernels/cpu/isa.cc's test).
ISA_FLAGS = {"avx2": {"avx2", "fma", "f16c"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}}


def cpu_flags():
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def ids_arg(ids):
    """Token ids as a --prompt-ids value: "1,2,3"."""
    return ",".join(str(int(t)) for t in ids)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, for a peer outside this project
    (or a port a test wants closed). Another process may take it before it is used, so a
    shardlm process is given port 0 instead and its log read: LoggedProcess.announced_port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# What a shardlm process prints once it listens, port 0 resolved: the bound port is group 1.
SERVING_PORT = r"shardlm serving .* on \S+:(\d+)"
WORKERS_PORT = r"waiting for \d+ workers at \S+:(\d+)"
WORKER_PORT = r"worker listening on \S+:(\d+)"
METRICS_PORT = r"metrics on http://\S+:(\d+)/metrics"
HTTP_PORT = r"OpenAI API on https?://\S+:(\d+)/v1"


# --- leftover processes ------------------------------------------------------------------

def ps_rows():
    """[(pid, ppid, stat, args)] of every process, from `ps`."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,stat=,args="], stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.strip().split(None, 3)
        if len(parts) == 4:
            rows.append((int(parts[0]), int(parts[1]), parts[2], parts[3]))
    return rows


def worker_processes(needle):
    """[(pid, args)] of `shardlm worker` processes whose args mention needle."""
    return [(pid, args) for pid, _ppid, _stat, args in ps_rows()
            if " worker " in " %s " % args and "shardlm" in args and needle in args]


class LoggedProcess:
    """A process started in the background (servers, workers) whose stdout and stderr go to
    `log_path`; stop() ends it with a signal and returns its exit code."""

    def __init__(self, argv, log_path, env=None, new_session=False):
        """new_session: the process leads a process group of its own, so that a test can
        signal the whole group (as a terminal's Ctrl-C does) without signalling itself."""
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})),
                                     start_new_session=new_session)

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_for(self, pattern, timeout):
        """True once the log matches the regex `pattern`; False at `timeout` or if the process ends."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.text()):
                return True
            if self.proc.poll() is not None:
                return re.search(pattern, self.text()) is not None
            time.sleep(0.05)
        return False

    def announced_port(self, pattern, timeout=60):
        """The port the process printed, matching group 1 of `pattern` (SERVING_PORT, ...),
        once it appears; raises Failure when it does not within `timeout` seconds."""
        if not self.wait_for(pattern, timeout):
            raise Failure("no port announced (/%s/) by %s (rc %s): %s" % (
                pattern, self.proc.args[:2], self.proc.poll(), self.text()[-1500:]))
        return int(re.search(pattern, self.text()).group(1))

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def metric_value(metrics_url, name):
    """The value of the unlabelled Prometheus sample `name` at metrics_url, or None."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        for line in r.read().decode().split("\n"):
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def settled(metrics_url, seconds=10):
    """True once no request runs and no call is in flight (the gauges follow the engine's step)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (metric_value(metrics_url, "shardlm_requests_running") == 0 and
                metric_value(metrics_url, "shardlm_calls_in_flight") == 0):
            return True
        time.sleep(0.1)
    return False


def wait_until_empty(scan, seconds):
    """Calls scan() every POLL_S until it returns an empty list or `seconds`
    have passed; returns its last answer."""
    deadline = time.monotonic() + seconds
    while True:
        left = scan()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_S)


def wait_no_workers(needle, seconds):
    """worker_processes(needle) once none are left, or what is left after `seconds`."""
    return wait_until_empty(lambda: worker_processes(needle), seconds)
