#!/usr/bin/env python3
"""Constrained requests through a served engine on a GPU, masks following their step.

Usage (scripts/gpu/test.sh runs it on the GPU machine; CI's machine can run it with --device cpu):
    python3 tests/gpu/check_structured.py --shardlm BUNDLE/shardlm --tokenizer-dir DIR \
        --workdir /tmp/gpu-structured [--device cuda]

A tiny random llama with a real tokenizer (Llama 3's, carried in the bundle) is served by
`serve --device DEVICE` (one worker process; on a GPU its collectives through NCCL, CUDA graphs
on, steps overlapped: a constrained row's mask is computed on the coordinator while the step
before it runs and sent to the worker after it, docs/structured_outputs.md). `batch --server`
sends 24 requests at once: a phone-number regex, a choice, a bounded JSON Schema and
unconstrained ones, greedy and sampled. Each constrained output must keep to its constraint and
end with finish "stop"; every request must end with a result. The same file is then sent to a
server started with --no-overlap-steps (masks computed before each step is sent); the greedy
outputs of the two are compared and the differing ones reported (a different batch composition
may flip a near tie on a GPU). Exit 0 when every output keeps to its constraint.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

PHONE = r"\(\d{3}\) \d{3}-\d{4}"
CHOICES = ["red", "green", "blue"]
SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                   "ok": {"type": "boolean"},
                   "tag": {"enum": ["a", "b", "c"]}},
    "required": ["id", "ok", "tag"],
    "additionalProperties": False,
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def requests():
    out = []
    for i in range(24):
        r = {"prompt": "Request %d: tell me something." % i, "max_new_tokens": 40,
             "temperature": 0 if i % 2 == 0 else 0.8, "seed": i}
        kind = i % 4
        if kind == 0:
            r["regex"] = PHONE
        elif kind == 1:
            r["choice"] = CHOICES
        elif kind == 2:
            r["json_schema"] = SCHEMA
        else:
            r["max_new_tokens"] = 12 + i
            r["ignore_eos"] = True
        out.append(r)
    return out


def keeps_to(req, text):
    if "regex" in req:
        return re.fullmatch(req["regex"], text) is not None
    if "choice" in req:
        return text in req["choice"]
    if "json_schema" in req:
        try:
            v = json.loads(text)
        except ValueError:
            return False
        return (isinstance(v, dict) and set(v) == {"id", "ok", "tag"} and isinstance(v["id"], int)
                and 0 <= v["id"] <= 999 and isinstance(v["ok"], bool) and v["tag"] in ("a", "b", "c"))
    return True


def serve_and_send(args, model, inp, out, extra):
    port = free_port()
    cmd = [args.shardlm, "serve", "--model", model, "--device", args.device, "--port", str(port)]
    if args.device != "cpu":
        cmd += ["--collectives", "nccl"]
    log = open(out + ".serve.log", "w")
    srv = subprocess.Popen(cmd + extra, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            probe = subprocess.run([args.shardlm, "generate", "--server", "127.0.0.1:%d" % port,
                                    "--prompt", "hi", "--max-new-tokens", "1"],
                                   capture_output=True, text=True)
            if probe.returncode == 0:
                break
            if srv.poll() is not None or time.time() > deadline:
                sys.exit("serve did not come up (see %s.serve.log): %s" % (out, probe.stderr[-500:]))
            time.sleep(1)
        t0 = time.time()
        proc = subprocess.run([args.shardlm, "batch", "--server", "127.0.0.1:%d" % port,
                               "--input", inp, "--output", out, "--concurrency", "24",
                               "--timeout-s", "120"], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit("batch --server failed (rc %d): %s" % (proc.returncode, proc.stderr[-2000:]))
        print("serve %s: 24 requests in %.2f s" % (" ".join(extra) or "(overlapped)", time.time() - t0))
    finally:
        srv.terminate()
        srv.wait(timeout=60)
        log.close()
    with open(out) as f:
        return [json.loads(line) for line in f]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--tokenizer-dir", required=True, help="tokenizer.json and tokenizer_config.json")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.join(args.workdir, "model")
    subprocess.run([args.shardlm, "make-tiny-model", model, "--arch", "llama", "--tokenizer-dir",
                    args.tokenizer_dir, "--hidden-size", "64", "--intermediate-size", "128"],
                   check=True, capture_output=True)
    reqs = requests()
    inp = os.path.join(args.workdir, "in.jsonl")
    with open(inp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in reqs)

    failures = 0
    runs = {}
    for name, extra in (("overlapped", []), ("stepwise", ["--no-overlap-steps"])):
        results = serve_and_send(args, model, inp, os.path.join(args.workdir, name + ".jsonl"), extra)
        runs[name] = results
        for i, (req, res) in enumerate(zip(reqs, results)):
            if "error" in res:
                print("FAIL %s #%d: %s" % (name, i, res["error"]))
                failures += 1
                continue
            constrained = any(k in req for k in ("regex", "choice", "json_schema"))
            ok = keeps_to(req, res["text"]) and (not constrained or res["finish_reason"] == "stop")
            if not ok:
                print("FAIL %s #%d: %r (finish %s) breaks %s" % (name, i, res["text"],
                                                              res["finish_reason"],
                                                              {k: req[k] for k in req if k in ("regex", "choice", "json_schema")}))
                failures += 1
        if len(results) != len(reqs):
            print("FAIL %s: %d results for %d requests" % (name, len(results), len(reqs)))
            failures += 1
        shown = {k: results[k]["text"] for k in (0, 1, 2) if k < len(results) and "text" in results[k]}
        print("  %s: e.g. %s" % (name, json.dumps(shown)))

    greedy = [i for i, r in enumerate(reqs) if r["temperature"] == 0]
    differ = [i for i in greedy if runs["overlapped"][i].get("token_ids") != runs["stepwise"][i].get("token_ids")]
    print("greedy requests equal overlapped and stepwise: %d of %d%s"
          % (len(greedy) - len(differ), len(greedy), "; differ: %s" % differ if differ else ""))
    print("%s: %d constraint failures" % ("FAIL" if failures else "PASS", failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
