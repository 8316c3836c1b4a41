#!/usr/bin/python3
"""`shardlm batch` and `shardlm bench` over real processes (docs/batch_and_loadgen.md).

Cases (a tiny f32 Llama with the Llama-3 tokenizer; one `serve` shared by the cases, and one
with --api-key-file):
  batch_in_process     a file mixing text prompts, prompt_ids, a blank line, a stop string, a
                       stop token, sampling fields with a seed and bad lines (bad JSON, an id
                       outside the vocabulary, an unknown key, a temperature out of range): one
                       output line per non-blank input line in input order, index 0..n-1; each bad
                       line's error names its file line number and the field and limit; exit 1
                       saying how many failed; greedy lines equal `generate --json` (tokens and
                       text); the stop-string line's text ends before the stop string, its tokens
                       are a prefix of the greedy ones, finish_reason "stop"; the stop-token line
                       ends with that token; --json-summary counts match the output
  batch_policies       --policy static and continuous with --max-num-seqs 3 give the same lines
                       as the default run (outputs compared, not timing)
  batch_server         --server with --concurrency 4 gives exactly the in-process lines
                       (errors included)
  bench_concurrency    bench --concurrency 4: --json parses, completed = --num-requests, no
                       errors, output tokens exact (ignore_eos), p50 <= p90 <= p99 for every
                       latency, ITL has one sample per token after the first; the table prints
  bench_rate           bench --rate 20 with distributions, a shared prefix and warmup: counts as
                       above, the warmup not counted
  bench_unauthenticated  a server with an API key: bench without one reports every request under
                       UNAUTHENTICATED and exits 1 (without --vocab-size it stops at GetModelInfo,
                       naming UNAUTHENTICATED); with --api-key-file it succeeds; batch --server
                       without the key gives UNAUTHENTICATED error lines

Usage:
  /usr/bin/python3 tests/integration/batch_loadgen_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import (SERVING_PORT, Ctx, Failure, LoggedProcess, case_main_args, ps_rows, run_cases,  # noqa: E402
                     wait_until_empty)

MODEL_FLAGS = ["--arch", "llama", "--hidden-size", "64", "--num-heads", "4", "--num-kv-heads", "2",
               "--intermediate-size", "128", "--num-layers", "2", "--seed", "31", "--dtype", "f32"]
TIMEOUT_S = 120
TEXT = "The harbour committee met on a grey Tuesday"
IDS = [128000, 791, 75742, 13093, 2322]
SAMPLED = {"prompt": "Once upon a time", "max_new_tokens": 10, "temperature": 0.8, "top_p": 0.9, "top_k": 50,
           "min_p": 0.01, "seed": 7, "repetition_penalty": 1.1, "presence_penalty": 0.2,
           "frequency_penalty": 0.1}
PERCENTILE_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


class BatchCtx(Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary
        self.model = self.dir("model")
        self._servers = {}
        self._reference = None
        if not os.path.isdir(self.model):
            p = subprocess.run([binary, "make-tiny-model", self.model, "--tokenizer", "llama3"] + MODEL_FLAGS,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                raise RuntimeError("make-tiny-model failed: %s" % p.stdout.decode(errors="replace"))

    def run(self, *args, timeout=TIMEOUT_S):
        p = subprocess.run([self.binary] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=timeout)
        if p.returncode < 0:
            raise Failure("shardlm %s died from signal %d: %s" % (args[0], -p.returncode, p.stderr.decode()[-800:]))
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def generate(self, *args):
        rc, out, err = self.run("generate", "--model", self.model, "--json", *args)
        if rc != 0:
            raise Failure("generate failed: %s" % err[-800:])
        return json.loads(out.strip().splitlines()[-1])

    def server(self, name="plain", *extra):
        if name not in self._servers:
            p = LoggedProcess([self.binary, "serve", "--model", self.model, "--port", 0] + list(extra),
                              self.dir("serve_%s.log" % name))
            self._servers[name] = p
            if not p.wait_for(re.escape("shardlm serving"), 60):
                raise Failure("serve %s not ready: %s" % (name, p.text()[-1500:]))
            p.address = "127.0.0.1:%d" % p.announced_port(SERVING_PORT)
        return self._servers[name].address

    def close(self):
        for p in self._servers.values():
            p.stop()

    def batch(self, name, input_path, *extra):
        """Runs batch; returns (rc, output lines as dicts, stderr, summary or None)."""
        out, summary = self.dir(name + ".jsonl"), self.dir(name + ".summary.json")
        for path in (out, summary):
            if os.path.exists(path):
                os.remove(path)
        rc, _, err = self.run("batch", "--input", input_path, "--output", out, "--json-summary", summary, *extra)
        lines = []
        if os.path.exists(out):
            with open(out) as f:
                lines = [json.loads(x) for x in f]
        s = None
        if os.path.exists(summary):
            with open(summary) as f:
                s = json.load(f)
        return rc, lines, err, s

    def reference(self):
        """The batch file, what `generate` gives for its greedy prompts, and the default in-process run."""
        if self._reference is None:
            text_ref = self.generate("--prompt", TEXT, "--max-new-tokens", 16, "--temperature", 0, "--ignore-eos")
            ids_ref = self.generate("--prompt-ids", ",".join(map(str, IDS)), "--max-new-tokens", 8,
                                    "--temperature", 0, "--ignore-eos")
            t = text_ref["text"]
            mid = len(t) // 2
            stop = next(t[i:i + 2] for i in range(mid, len(t) - 1) if "\ufffd" not in t[i:i + 2])
            stop_token = ids_ref["token_ids"][3]
            lines = [
                json.dumps({"prompt": TEXT, "max_new_tokens": 16, "temperature": 0, "ignore_eos": True}),  # line 1
                json.dumps({"prompt_ids": IDS, "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}),
                '{"prompt": "unterminated',                                                               # line 3
                "",                                                                                       # line 4
                json.dumps({"prompt_ids": [11, 999999], "max_new_tokens": 4}),                            # line 5
                json.dumps({"prompt": TEXT, "max_new_tokens": 16, "temperature": 0, "ignore_eos": True,
                            "stop": ["zzzz-never", stop]}),                                               # line 6
                json.dumps({"prompt_ids": IDS, "max_new_tokens": 8, "temperature": 0, "ignore_eos": True,
                            "stop_token_ids": [stop_token]}),                                             # line 7
                json.dumps(SAMPLED),                                                                      # line 8
                json.dumps({"prompt": "x", "bogus": 1}),                                                  # line 9
                json.dumps({"prompt": "x", "temperature": 500}),                                          # line 10
            ]
            lines += [json.dumps({"prompt_ids": [40 + i, 20, 30, 50 + i], "max_new_tokens": 4 + (i % 3) * 4,
                                  "temperature": 0, "ignore_eos": True}) for i in range(8)]
            path = self.dir("batch_in.jsonl")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            run = self.batch("default", path, "--model", self.model)
            self._reference = dict(path=path, text_ref=text_ref, ids_ref=ids_ref, stop=stop, stop_token=stop_token,
                                   run=run)
        return self._reference


def batch_in_process(ctx, chk):
    ref = ctx.reference()
    rc, out, err, summary = ref["run"]
    chk.check(rc == 1 and "4 of 17 lines failed" in err, "exit 1 saying 4 of 17 lines failed (rc %d): %s" %
              (rc, err.strip().splitlines()[-1:] if err.strip() else err))
    chk.check([r.get("index") for r in out] == list(range(17)),
              "17 output lines (the blank line skipped), index 0..16 in order")
    if len(out) != 17:
        raise Failure("cannot go on without 17 lines: %s" % out)
    errors = {i: r["error"] for i, r in enumerate(out) if "error" in r}
    chk.check(sorted(errors) == [2, 3, 7, 8], "exactly the bad lines failed: %s" % errors)
    chk.check(errors.get(2) == "line 3: not a JSON object", "bad JSON names line 3: %r" % errors.get(2))
    e = errors.get(3, "")
    chk.check(e.startswith("line 5: ") and "999999" in e and "vocabulary [0, 128256)" in e,
              "the out-of-vocab id names line 5, the id and the limit: %r" % e)
    e = errors.get(7, "")
    chk.check(e.startswith("line 9: ") and 'unknown key "bogus"' in e, "the unknown key is named: %r" % e)
    e = errors.get(8, "")
    chk.check(e.startswith("line 10: ") and "temperature" in e and "[0, 100]" in e and "500" in e,
              "the temperature names its limit: %r" % e)
    text_ref, ids_ref = ref["text_ref"], ref["ids_ref"]
    chk.check(out[0]["token_ids"] == text_ref["token_ids"] and out[0]["text"] == text_ref["text"] and
              out[0]["finish_reason"] == "length", "a greedy text line equals `generate --json` (tokens and text)")
    chk.check(out[1]["token_ids"] == ids_ref["token_ids"] and out[1]["finish_reason"] == "length",
              "a greedy prompt_ids line equals `generate --json`")
    s = out[4]
    t, stop = text_ref["text"], ref["stop"]
    want_text = t[:t.find(stop)]
    n = len(s.get("token_ids", []))
    chk.check(s.get("finish_reason") == "stop" and s.get("text") == want_text and 0 < n < 16 and
              s["token_ids"] == text_ref["token_ids"][:n],
              "the stop string %r cuts the text before it (%r), tokens a prefix of the greedy ones (%d)" %
              (stop, s.get("text"), n))
    want = ids_ref["token_ids"][:ids_ref["token_ids"].index(ref["stop_token"]) + 1]
    chk.check(out[5].get("token_ids") == want and out[5].get("finish_reason") == "stop",
              "the stop token ends the line with it: %s" % out[5].get("token_ids"))
    chk.check(len(out[6].get("token_ids", [])) >= 1 and "text" in out[6], "the sampled line ran")
    chk.check(all(len(out[9 + i]["token_ids"]) == 4 + (i % 3) * 4 for i in range(8)),
              "every ignore_eos line has its max_new_tokens")
    total_out = sum(len(r.get("token_ids", [])) for r in out)
    chk.check(summary is not None and summary["requests"] == 17 and summary["failed"] == 4 and
              summary["succeeded"] == 13 and summary["output_tokens"] == total_out and summary["wall_s"] > 0 and
              summary["policy"] == "continuous", "--json-summary matches the output: %s" % summary)
    chk.check(re.search(r"batch: 17 requests \(4 failed\), \d+ prompt tokens, %d output tokens in [\d.]+ s: "
                        r"[\d.]+ requests/s, [\d.]+ output tokens/s" % total_out, err) is not None,
              "the summary line on stderr")


def batch_policies(ctx, chk):
    ref = ctx.reference()
    want = ref["run"][1]
    for policy in ("static", "continuous"):
        rc, out, _, summary = ctx.batch(policy, ref["path"], "--model", ctx.model, "--max-num-seqs", 3,
                                        "--policy", policy)
        diff = [i for i, (a, b) in enumerate(zip(out, want)) if a != b]
        chk.check(rc == 1 and out == want, "--policy %s --max-num-seqs 3 gives the same lines (differ: %s)" %
                  (policy, diff or len(out)))
        chk.check(summary is not None and summary["policy"] == policy and summary["max_num_seqs"] == 3,
                  "its summary says policy %s" % policy)


def batch_server(ctx, chk):
    ref = ctx.reference()
    want = ref["run"][1]
    rc, out, err, summary = ctx.batch("server", ref["path"], "--server", ctx.server(), "--concurrency", 4)
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(out, want)) if a != b]
    ok = rc == 1 and len(out) == len(want) and not diff
    chk.check(ok, "--server gives exactly the in-process lines%s" %
              ("" if ok else ": rc %d, %d lines, differ %s, %s" % (rc, len(out), diff[:2], err[-300:])))
    chk.check(summary is not None and summary["mode"].startswith("server ") and summary["concurrency"] == 4,
              "its summary names the server")


def bench_json(ctx, chk, *args):
    rc, out, err = ctx.run("bench", "--server", ctx.server(), "--json", *args)
    try:
        report = json.loads(out)
    except ValueError:
        raise Failure("bench --json printed no JSON object (rc %d): %r %s" % (rc, out[:300], err[-500:]))
    return rc, report, err


def check_percentiles(chk, report, itl_count):
    ordered = all(report[k]["p50"] <= report[k]["p90"] <= report[k]["p99"] for k in PERCENTILE_KEYS)
    chk.check(ordered and all(report[k]["mean"] > 0 for k in ("ttft_ms", "e2e_ms")),
              "p50 <= p90 <= p99 for ttft, tpot, itl, e2e: %s" %
              {k: (report[k]["p50"], report[k]["p90"], report[k]["p99"]) for k in PERCENTILE_KEYS})
    chk.check(report["itl_ms"]["count"] == itl_count, "ITL has one sample per token after the first: %d of %d" %
              (report["itl_ms"]["count"], itl_count))


def bench_concurrency(ctx, chk):
    rc, r, err = bench_json(ctx, chk, "--concurrency", 4, "--num-requests", 12, "--prompt-len", "uniform:4:12",
                            "--output-len", 6)
    chk.check(rc == 0 and r["completed"] == 12 and r["failed"] == 0 and r["errors"] == {},
              "12 completed, no errors (rc %d): %s" % (rc, r["errors"]))
    chk.check(r["output_tokens"] == 72 and r["e2e_ms"]["count"] == 12 and r["duration_s"] > 0 and
              r["requests_per_s"] > 0 and r["output_tokens_per_s"] > 0 and
              r["total_tokens_per_s"] > r["output_tokens_per_s"], "exact output tokens and positive rates")
    check_percentiles(chk, r, 12 * 5)
    chk.check(r["config"]["concurrency"] == 4 and r["config"]["rate"] == "inf", "the config is echoed")
    rc, table, _ = ctx.run("bench", "--server", ctx.server(), "--concurrency", 2, "--num-requests", 4,
                           "--prompt-len", 4, "--output-len", 3)
    chk.check(rc == 0 and all(s in table for s in ("completed requests", "time to first token",
                                                    "time per output token", "inter-token latency",
                                                    "end-to-end latency", "p99")),
              "the default output is a table: %r" % table[:200])


def bench_rate(ctx, chk):
    rc, r, err = bench_json(ctx, chk, "--rate", 20, "--num-requests", 12, "--prompt-len", "normal:8:2",
                            "--output-len", "uniform:2:6", "--shared-prefix-frac", 0.5, "--seed", 3, "--warmup", 2)
    chk.check(rc == 0 and r["completed"] == 12 and r["failed"] == 0 and r["errors"] == {},
              "12 completed (the 2 warmup requests not counted), no errors (rc %d): %s" % (rc, r["errors"]))
    chk.check(r["e2e_ms"]["count"] == 12 and 24 <= r["output_tokens"] <= 72, "output tokens within the range: %d" %
              r["output_tokens"])
    check_percentiles(chk, r, r["output_tokens"] - 12)
    chk.check(r["config"]["rate"] == 20 and r["config"]["warmup"] == 2, "the config is echoed")


def bench_unauthenticated(ctx, chk):
    keys, key = ctx.dir("api_keys"), ctx.dir("api_key")
    with open(keys, "w") as f:
        f.write("# test\nbench-key-%d\n" % os.getpid())
    with open(key, "w") as f:
        f.write("bench-key-%d\n" % os.getpid())
    addr = ctx.server("keyed", "--api-key-file", keys)
    rc, out, err = ctx.run("bench", "--server", addr, "--num-requests", 5, "--prompt-len", 4, "--output-len", 2,
                           "--vocab-size", 1000, "--json")
    r = json.loads(out) if out.strip() else {}
    errs = r.get("errors", {})
    chk.check(rc == 1 and r.get("completed") == 0 and r.get("failed") == 5 and list(errs) == ["UNAUTHENTICATED"] and
              errs["UNAUTHENTICATED"]["count"] == 5 and "API key" in errs["UNAUTHENTICATED"]["example"],
              "without a key every request is counted under UNAUTHENTICATED, exit 1 (rc %d): %s" % (rc, errs))
    rc, _, err = ctx.run("bench", "--server", addr, "--num-requests", 2)
    chk.check(rc == 1 and "GetModelInfo" in err and "UNAUTHENTICATED" in err,
              "without --vocab-size it stops at GetModelInfo naming UNAUTHENTICATED: %r" % err.strip()[-200:])
    rc, out, _ = ctx.run("bench", "--server", addr, "--num-requests", 4, "--prompt-len", 4, "--output-len", 2,
                         "--api-key-file", key, "--json")
    r = json.loads(out) if out.strip() else {}
    chk.check(rc == 0 and r.get("completed") == 4 and r.get("failed") == 0, "with --api-key-file all succeed")
    path = ctx.dir("two.jsonl")
    with open(path, "w") as f:
        f.write('{"prompt_ids": [11, 12], "max_new_tokens": 2, "ignore_eos": true}\n'
                '{"prompt_ids": [13], "max_new_tokens": 2, "ignore_eos": true}\n')
    rc, lines, _, _ = ctx.batch("keyed", path, "--server", addr)
    chk.check(rc == 1 and len(lines) == 2 and all(l.get("error", "").startswith("line %d: UNAUTHENTICATED: " % (i + 1))
                                                   for i, l in enumerate(lines)),
              "batch --server without the key: UNAUTHENTICATED error lines: %s" % lines)
    rc, lines, _, _ = ctx.batch("keyed_ok", path, "--server", addr, "--api-key-file", key)
    chk.check(rc == 0 and [len(l.get("token_ids", [])) for l in lines] == [2, 2],
              "batch --server with --api-key-file runs: %s" % lines)


CASES = [("batch_in_process", batch_in_process), ("batch_policies", batch_policies), ("batch_server", batch_server),
         ("bench_concurrency", bench_concurrency), ("bench_rate", bench_rate),
         ("bench_unauthenticated", bench_unauthenticated)]


def main():
    parsed = case_main_args(__doc__, [n for n, _ in CASES])
    if parsed is None:
        return 2
    binary, workdir, only, args = parsed
    ctx = BatchCtx(workdir, args, binary)
    try:
        rc = run_cases(CASES, only, ctx, "batch_loadgen")
    finally:
        ctx.close()
    left = wait_until_empty(lambda: [r for r in ps_rows() if ctx.model in r[3] and "shardlm" in r[3]], 10)
    if left:
        print("FAIL processes left behind: %s" % left)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
