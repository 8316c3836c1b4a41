#!/usr/bin/env python3
"""Start-up: time from process start to the first streamed token of `shardlm generate`.

Usage:
    python3 bench/startup.py --shardlm build/shardlm \\
        --model third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf [--runs 7] [--tp 1] [-- extra flags]

Each run starts `shardlm generate --model M --prompt P --max-new-tokens 8 --temperature 0`
and times, from just before the process starts: the first byte of generated text on its
stdout (the first streamed token) and the process's exit. Each rank logs where its load went
("rank R loaded in ... ms: config, weights, KV pool, warm-up"); those parts are parsed from
stderr. Prints the median, minimum and maximum of every figure over the runs.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

LOAD_LINE = re.compile(r"rank (\d+) loaded in ([\d.]+) ms: config ([\d.]+) ms, weights ([\d.]+) ms, "
                       r"KV pool ([\d.]+) ms, warm-up ([\d.]+) ms")
PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def one_run(args):
    cmd = [args.shardlm, "generate", "--model", args.model, "--prompt", PROMPT, "--max-new-tokens", "8",
           "--temperature", "0"] + args.extra
    if args.tp > 1:  # worker processes; without --tp the model runs in this process
        cmd += ["--tp", str(args.tp)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    first = proc.stdout.read(1)
    t_first = time.monotonic() - t0
    rest, err = proc.communicate()
    t_exit = time.monotonic() - t0
    if proc.returncode != 0 or not first:
        sys.exit("generate failed (%d): %s" % (proc.returncode, err.decode()[-500:]))
    parts = {}
    for m in LOAD_LINE.finditer(err.decode()):
        if m.group(1) == "0":
            parts = {"rank 0 load": float(m.group(2)), "  config": float(m.group(3)),
                     "  weights": float(m.group(4)), "  KV pool": float(m.group(5)),
                     "  warm-up": float(m.group(6))}
    out = {"first token": 1e3 * t_first, "exit": 1e3 * t_exit}
    out.update(parts)
    return out, (first + rest).decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--tp", type=int, default=1, help="> 1: that many worker processes")
    ap.add_argument("extra", nargs="*", help="more generate flags, after --")
    args = ap.parse_args()
    runs = []
    text = ""
    for _ in range(args.runs):
        r, text = one_run(args)
        runs.append(r)
    print("shardlm generate --model %s --tp %d %s: %d runs; the text: %r" %
          (os.path.basename(args.model), args.tp, " ".join(args.extra), args.runs, text.strip()[:60]))
    print("| ms | median | min | max |\n|---|---|---|---|")
    for key in runs[0]:
        values = [r[key] for r in runs if key in r]
        print("| %s | %.0f | %.0f | %.0f |" % (key, statistics.median(values), min(values), max(values)))


if __name__ == "__main__":
    main()
