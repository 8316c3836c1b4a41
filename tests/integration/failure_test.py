#!/usr/bin/python3
"""Failure handling of tensor-parallel generation (`generate --tp 2`).

A streaming `shardlm generate --tp 2` runs on a tiny llama checkpoint with the
llama3 tokenizer (so text streams to stdout as it is produced).  Once tokens
are flowing, one of its `shardlm worker` processes is hit:

  sigkill_worker_low / sigkill_worker_high: SIGKILL the worker with the lower /
      higher pid (which rank that is is not known, so both are tried).
      Expect: generate exits within 15 s with a nonzero status (an ordinary
      exit, not a crash signal), its stderr error names a failed rank ("rank"
      and "failed"), and within 6 s no worker process for the model remains.
  sigstop_worker: SIGSTOP one worker (a stopped, still-connected peer; the
      collective timeout is 10 s).  Expect: nonzero exit within 30 s, the same
      error wording, and no worker process left.

Whatever happens, every process the test caused is continued (SIGCONT) and
killed in a finally block, so the test never leaks processes.

Usage:
  /usr/bin/python3 tests/integration/failure_test.py \\
      --shardlm build/shardlm --workdir DIR [--only NAME,...] [--verbose]
Prints PASS/FAIL per case and `failure: N passed, M failed`; exit 0 iff every
case passes (2 for a usage error).
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import harness  # noqa: E402
from harness import (Failure, parse_case_args, ps_rows, run_cases,  # noqa: E402
                     run_engine, strip_glog, tail as _tail, wait_until_empty)

MODEL_FLAGS = ["--arch", "llama", "--tokenizer", "llama3", "--hidden-size", "64",
               "--num-layers", "2", "--num-heads", "4", "--num-kv-heads", "2",
               "--intermediate-size", "128", "--max-position-embeddings", "4096",
               "--seed", "3101", "--dtype", "f32"]
# Long enough that generation is still running when the worker is hit (about
# 25 ms per token at --tp 2 here); retried once with MAX_TOKENS_RETRY.
MAX_TOKENS = 2000
MAX_TOKENS_RETRY = 4000
FIRST_OUTPUT_WAIT_S = 20     # wait this long for the first streamed bytes
AFTER_OUTPUT_S = 0.5         # then let it stream a little more
CLEANUP_S = 6                # workers must be gone this long after the exit


def _own_errors(stderr):
    """stderr lines that are not glog lines (I/W/E/F + date) of any process."""
    return strip_glog(stderr, "IWEF")


def workers_of(model_dir, ppid=None):
    """[(pid, stat, args)] of `shardlm worker` processes for model_dir."""
    found = []
    for pid, pp, stat, args in ps_rows():
        if "worker --coordinator" not in args or "shardlm" not in args:
            continue
        if not re.search(r"--model[ =]%s(\s|$)" % re.escape(model_dir), args):
            continue
        if ppid is not None and pp != ppid:
            continue
        found.append((pid, stat, args))
    return found


def wait_workers_gone(model_dir, seconds):
    return wait_until_empty(lambda: workers_of(model_dir), seconds)


def hard_kill(pid):
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class Streamed:
    """Collects a pipe's bytes in a thread, with the time of the first byte."""

    def __init__(self, f):
        self.chunks = []
        self.first_at = None
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(f,), daemon=True)
        self.thread.start()

    def _run(self, f):
        while True:
            b = f.read1(65536)
            if not b:
                break
            with self.lock:
                if self.first_at is None:
                    self.first_at = time.monotonic()
                self.chunks.append(b)

    def nbytes(self):
        with self.lock:
            return sum(len(c) for c in self.chunks)

    def text(self):
        with self.lock:
            return b"".join(self.chunks).decode("utf-8", "replace")


class Ctx(harness.Ctx):
    def __init__(self, binary, workdir, args):
        super().__init__(workdir, args)
        self.binary = binary
        self.model_dir = None

    def run_ok(self, argv, timeout=120):
        cmd = [self.binary] + argv
        p, _ = run_engine(cmd, timeout)
        if p.returncode != 0:
            raise Failure("exit status %d from `%s`: %s" % (
                p.returncode, " ".join(cmd), _tail(p.stderr.decode("utf-8", "replace"))))
        return p.stdout.decode("utf-8", "replace")

    def model(self):
        if self.model_dir is None:
            d = self.dir("tp_failure_llama")
            if os.path.exists(d):
                shutil.rmtree(d)
            self.run_ok(["make-tiny-model", d] + MODEL_FLAGS)
            if not os.path.exists(os.path.join(d, "tokenizer.json")):
                raise Failure("make-tiny-model --tokenizer llama3 wrote no tokenizer.json")
            self.model_dir = d
        return self.model_dir


def start_generate(ctx, model_dir, max_tokens):
    cmd = [ctx.binary, "generate", "--model", model_dir, "--prompt", "hello",
           "--max-new-tokens", str(max_tokens), "--ignore-eos", "--temperature", "0",
           "--tp", "2"]
    if ctx.args.verbose:
        print("    $ " + " ".join(cmd))
    for attempt in (0, 1):
        try:
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except OSError as e:
            if attempt == 0:
                time.sleep(3)
                continue
            raise Failure("could not start %s: %s" % (ctx.binary, e))


def hit_worker(ctx, chk, sig, pick, exit_limit_s):
    """Start a streaming tp=2 generate, hit one worker with `sig`, check the
    aftermath.  pick: "low" or "high" pid among the two workers."""
    model_dir = ctx.model()
    for max_tokens in (MAX_TOKENS, MAX_TOKENS_RETRY):
        proc = None
        victims = set()
        try:
            proc = start_generate(ctx, model_dir, max_tokens)
            t_start = time.monotonic()
            out, err = Streamed(proc.stdout), Streamed(proc.stderr)

            # Wait for both workers and for text to start streaming.
            workers = []
            while time.monotonic() - t_start < FIRST_OUTPUT_WAIT_S and proc.poll() is None:
                workers = workers_of(model_dir, ppid=proc.pid)
                if out.first_at is not None and len(workers) == 2:
                    break
                time.sleep(0.05)
            if proc.poll() is not None:
                raise Failure("generate exited (rc %s) before a worker was hit; stderr: %s"
                              % (proc.returncode, _tail("\n".join(_own_errors(err.text())))))
            if len(workers) != 2:
                raise Failure("expected 2 worker processes (args `worker --coordinator ... "
                              "--model %s`, parent %d), found %s"
                              % (model_dir, proc.pid, workers))
            if out.first_at is None:
                chk.note("no streamed output after %d s; hitting a worker anyway"
                         % FIRST_OUTPUT_WAIT_S)
            else:
                chk.note("first streamed output %.2f s after start" % (out.first_at - t_start))
                time.sleep(AFTER_OUTPUT_S)
            pids = sorted(w[0] for w in workers)
            victim = pids[0] if pick == "low" else pids[-1]
            before = out.nbytes()
            if proc.poll() is not None:
                if max_tokens != MAX_TOKENS_RETRY:
                    chk.note("generation finished before the hit; retrying with %d tokens"
                             % MAX_TOKENS_RETRY)
                    continue
                raise Failure("generation of %d tokens finished before a worker was hit"
                              % max_tokens)
            victims.add(victim)
            os.kill(victim, sig)
            t_hit = time.monotonic()
            chk.note("sent %s to worker pid %d (%s pid of %s) after %d streamed bytes"
                     % (signal.Signals(sig).name, victim, pick, pids, before))

            try:
                rc = proc.wait(exit_limit_s)
            except subprocess.TimeoutExpired:
                rc = None
            t_exit = time.monotonic() - t_hit
            if rc == 0 and max_tokens != MAX_TOKENS_RETRY and t_exit < 1.0:
                # Raced with the natural end of generation: not a verdict.
                chk.note("generate exited 0 right after the hit (finished first?); retrying")
                continue
            if not chk.check(rc is not None, "generate exits within %d s of the %s (took %s)"
                             % (exit_limit_s, signal.Signals(sig).name,
                                "%.1f s" % t_exit if rc is not None else "longer")):
                return
            chk.check(rc > 0, "generate exit status is nonzero and not a crash signal (rc %d)"
                      % rc)
            out.thread.join(2)
            err.thread.join(2)
            own = _own_errors(err.text())
            failed_lines = [l for l in own if re.search(r"\brank\b", l, re.I)
                            and re.search(r"fail", l, re.I)]
            chk.check(bool(failed_lines), "stderr error names the failed rank%s"
                      % (": " + failed_lines[-1][:240] if failed_lines else
                         " -- expected a line with \"rank\" and \"failed\"; got: %s"
                         % _tail("\n".join(own), 500)))
            chk.note("streamed %d bytes in total before the exit" % out.nbytes())
            left = wait_workers_gone(model_dir, CLEANUP_S)
            chk.check(not left, "no worker process for the model remains %d s after the exit%s"
                      % (CLEANUP_S, "" if not left else ": %s" % [(p, s) for p, s, _ in left]))
            return
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            for pid, _stat, _args in workers_of(model_dir):
                hard_kill(pid)
            for pid in victims:
                hard_kill(pid)


def sigkill_low_case(ctx, chk):
    hit_worker(ctx, chk, signal.SIGKILL, "low", 15)


def sigkill_high_case(ctx, chk):
    hit_worker(ctx, chk, signal.SIGKILL, "high", 15)


def sigstop_case(ctx, chk):
    hit_worker(ctx, chk, signal.SIGSTOP, "high", 30)


def no_coordinator_case(ctx, chk):
    """A worker pointed at an address where no coordinator listens says so at once, names the
    address, repeats it while it waits, and exits with the reason at the deadline (it was
    silent for the whole --register-timeout-ms, then said only "Deadline Exceeded")."""
    model = ctx.model()
    with socket.socket() as s:  # a port bound, so no other process takes it, and not listening
        s.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % s.getsockname()[1]
        cmd = [ctx.binary, "worker", "--coordinator", address, "--model", model, "--rank", "0",
               "--insecure-internal", "--register-timeout-ms", "7000"]
        t0 = time.monotonic()
        p, _ = run_engine(cmd, 60)
        took = time.monotonic() - t0
    err = p.stderr.decode("utf-8", "replace")
    waiting = [l for l in err.splitlines() if "cannot reach the coordinator at " + address in l]
    chk.check(len(waiting) >= 2, "%d 'cannot reach the coordinator at %s' lines while waiting" % (len(waiting), address))
    reason = [l for l in err.splitlines() if "could not reach" in l]
    chk.check(p.returncode != 0 and reason and took < 20,
              "exits %d after %.1f s with the reason: %s" % (p.returncode, took, reason[-1][-200:] if reason
                                                             else _tail(err)))


def no_orphans_case(ctx, chk):
    left = [w for w in workers_of_any(ctx.workdir)]
    chk.check(not left, "no `shardlm worker` process mentions %s%s"
              % (ctx.workdir, "" if not left else ": %s" % left))
    for pid, _ in left:
        hard_kill(pid)


def workers_of_any(workdir):
    return [(pid, args) for pid, _pp, _st, args in ps_rows()
            if "worker --coordinator" in args and "shardlm" in args and workdir in args]


CASES = [
    ("sigkill_worker_low", sigkill_low_case),
    ("sigkill_worker_high", sigkill_high_case),
    ("sigstop_worker", sigstop_case),
    ("no_coordinator", no_coordinator_case),
    ("no_orphans", no_orphans_case),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shardlm", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--only", default="", help="comma-separated case names (no_orphans always runs)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    setup = parse_case_args(args, [n for n, _ in CASES])
    if setup is None:
        return 2
    binary, workdir, only = setup

    ctx = Ctx(binary, workdir, args)
    return run_cases(CASES, only, ctx, "failure", always=("no_orphans",))


if __name__ == "__main__":
    sys.exit(main())
