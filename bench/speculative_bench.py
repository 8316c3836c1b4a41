#!/usr/bin/env python3
"""Speculative decoding against plain decoding on one model (docs/speculative_decoding.md).

For each round, each task (a code edit: rewrite a given function; a chat answer; a summary of a
given paragraph) and each batch size, `shardlm batch` runs the task's request (greedy, the same
request `batch` times, --max-num-seqs batch) to the end of its answer (at most --tokens) plainly
and with each proposer of --methods (--speculative ngram; --draft-model with prompt lookup first,
or alone), interleaved.
Reported per task and batch: decode tokens/s (tokens after each request's first over the span
from the first first token to the last token, `batch`'s decode_tokens_per_s), the acceptance
rate, the ratio to plain decoding, and at batch 1 the ratio to the memory floor's rate (1000 /
floor ms, the bytes a decode step reads over the read bandwidth `shardlm_bench` measures in the
same round). Median and range over every round.

    python3 bench/speculative_bench.py --shardlm build/shardlm --shardlm-bench build/shardlm_bench \\
        --model third_party/models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf --rounds 3 \\
        --json-out docs/bench_data/speculative_2026-11-29.json
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

FUNCTION = '''def parse_ranges(spec):
    result = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            start, end = part.split("-", 1)
            start = int(start)
            end = int(end)
            if end < start:
                raise ValueError("bad range: " + part)
            for value in range(start, end + 1):
                result.append(value)
        else:
            result.append(int(part))
    return sorted(set(result))
'''

PARAGRAPH = ("The city council met on Tuesday to discuss the new bicycle lanes planned for the "
             "downtown area. Supporters argued that the lanes would reduce traffic, cut pollution and "
             "make the streets safer for children walking to school. Several shop owners objected, "
             "saying that removing parking spaces would drive customers away and hurt small "
             "businesses that were still recovering from a difficult year. After three hours of "
             "debate, the council agreed to build the lanes on two streets first, to count cyclists "
             "and customers for six months, and to decide on the rest of the plan next spring.")


def chat(user):
    return ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + user +
            "<|im_end|>\n<|im_start|>assistant\n")


TASKS = {
    "code_edit": chat("Rename the variable `result` to `values` in this function and add a docstring. "
                      "Return the whole function.\n\n```python\n" + FUNCTION + "```"),
    "chat": chat("What is the difference between a process and a thread? Answer in a short paragraph."),
    "summary": chat("Summarize this paragraph in two sentences.\n\n" + PARAGRAPH),
}


def run_batch(args, prompt, batch, method, workdir):
    inp = os.path.join(workdir, "in.jsonl")
    with open(inp, "w") as f:
        for _ in range(batch):
            f.write(json.dumps({"prompt": prompt, "max_new_tokens": args.tokens, "temperature": 0}) + "\n")
    summary = os.path.join(workdir, "summary.json")
    cmd = [args.shardlm, "batch", "--model", args.model, "--input", inp, "--output",
           os.path.join(workdir, "out.jsonl"), "--json-summary", summary, "--max-num-seqs", str(batch)]
    method, _, tokens = method.partition("@")  # "ngram@8": at most 8 proposed tokens a step
    proposer, _, draft_weights = method.partition(":")  # "draft:q4_0": the draft requantized at load
    if method != "plain":
        cmd += ["--speculative", "ngram" if proposer == "ngram" else "draft",
                "--speculative-tokens", tokens or str(args.speculative_tokens),
                "--speculative-max-batch", str(args.speculative_max_batch)]
    if proposer in ("draft", "draft-alone"):
        cmd += ["--draft-model", args.draft_model]
        if draft_weights:
            cmd += ["--draft-weights", draft_weights]
        if proposer == "draft-alone":  # no prompt lookup first
            cmd += ["--draft-lookup-min", "0"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    with open(summary) as f:
        s = json.load(f)
    spec = s.get("speculation", {})
    return {"decode_tps": s["decode_tokens_per_s"], "output_tokens": s["output_tokens"],
            "steps": s["engine_steps"], "acceptance": spec.get("acceptance_rate", 0.0),
            "proposed": spec.get("proposed_tokens", 0), "accepted": spec.get("accepted_tokens", 0),
            "lookup_proposed": spec.get("lookup_proposed_tokens", 0)}


def run_llamacpp(args, prompt, speculative, workdir):
    """llama.cpp on the same files and prompt, batch 1, greedy: llama-completion (plain) or
    llama-speculative-simple with the draft model (--spec-type draft-simple, K proposals at most)."""
    path = os.path.join(workdir, "prompt.txt")
    with open(path, "w") as f:
        f.write(prompt)
    common = ["-m", args.model, "-f", path, "-n", str(args.tokens), "--temp", "0", "-t", str(args.threads),
              "-c", "4096"]
    if speculative:
        cmd = [args.llama_speculative] + common + ["-md", args.draft_model, "--spec-type", "draft-simple",
                                                   "-td", str(args.threads),
                                                   "--spec-draft-n-max", str(args.speculative_tokens)]
    else:
        cmd = [args.llama_completion] + common + ["-no-cnv"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL).stderr
    if speculative:
        # "decoded  166 tokens in   16.484 seconds, speed:   10.070 t/s" and "accept    = 81.098%"
        tps = float(re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", out).group(1))
        acc = float(re.search(r"accept\s+=\s+([\d.]+)%", out).group(1)) / 100
        return {"decode_tps": tps, "acceptance": acc}
    # "eval time =  5436.07 ms /   159 runs   (   34.19 ms per token,    29.25 tokens per second)"
    tps = float(re.search(r"\beval time =.*?([\d.]+) tokens per second", out.replace("prompt eval", "prompt")).group(1))
    return {"decode_tps": tps, "acceptance": 0.0}


def floor_ms(args):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run([args.shardlm_bench, "--model-dir", args.model, "--dtypes", "f32", "--batches", "1",
                          "--decode-steps", "8", "--prompt-len", "16", "--weights", "auto"],
                         capture_output=True, text=True, check=True, env=env).stdout
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0] == "f32/auto" and cells[1] == "1":
            try:
                return float(cells[7])
            except ValueError:
                continue
    sys.exit("could not read shardlm_bench's floor:\n" + out[-2000:])


def med(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--shardlm-bench", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--tokens", type=int, default=512,
                    help="at most this many tokens per answer (each task's whole answer ends well before)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--speculative-tokens", type=int, default=5)
    ap.add_argument("--speculative-max-batch", type=int, default=0,
                    help="shardlm's --speculative-max-batch (0: its default, 2 for ngram and 1 for draft)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--methods", default="ngram",
                    help="proposers against plain, comma-separated: ngram, draft (prompt lookup first where it "
                         "matches 3 tokens, shardlm's default), draft-alone (--draft-lookup-min 0), and either draft "
                         "as draft:WEIGHTS (with --draft-weights WEIGHTS); any of them METHOD@K with "
                         "--speculative-tokens K instead of this script's")
    ap.add_argument("--draft-model", default="", help="with --methods draft: the draft model's file")
    ap.add_argument("--llama-completion", default="", help="llama.cpp's llama-completion: its plain decode")
    ap.add_argument("--llama-speculative", default="",
                    help="llama.cpp's llama-speculative-simple: its draft-model speculation (batch 1)")
    ap.add_argument("--json-out", default="")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    tasks = args.tasks.split(",")
    methods = args.methods.split(",")
    if any("draft" in m for m in methods) and not args.draft_model:
        sys.exit("--methods draft needs --draft-model")
    rounds = []
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            one = {"floor_ms": floor_ms(args), "runs": {}}
            for task in tasks:
                for batch in batches:
                    for method in ["plain"] + methods:
                        key = f"{task}|{batch}|{method}"
                        one["runs"][key] = run_batch(args, TASKS[task], batch, method, workdir)
                    if batch == 1 and args.llama_completion and args.llama_speculative:
                        for speculative in (False, True):
                            key = f"{task}|1|llama.cpp {'draft' if speculative else 'plain'}"
                            one["runs"][key] = run_llamacpp(args, TASKS[task], speculative, workdir)
            rounds.append(one)
            print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    print("| task | batch | method | plain tok/s | speculating tok/s | speedup | acceptance | lookup's share "
          "| / floor rate |")
    print("|---|---|---|---|---|---|---|---|---|")
    for task in tasks:
        for batch in batches:
            plain = [x["runs"][f"{task}|{batch}|plain"]["decode_tps"] for x in rounds]
            for method in methods:
                spec = [x["runs"][f"{task}|{batch}|{method}"]["decode_tps"] for x in rounds]
                acc = [x["runs"][f"{task}|{batch}|{method}"]["acceptance"] for x in rounds]
                share = [x["runs"][f"{task}|{batch}|{method}"]["lookup_proposed"] /
                         max(1, x["runs"][f"{task}|{batch}|{method}"]["proposed"]) for x in rounds]
                speedup = [s / p for s, p in zip(spec, plain)]
                over_floor = [s / (1000.0 / x["floor_ms"]) for s, x in zip(spec, rounds)] if batch == 1 else None
                print(f"| {task} | {batch} | {method} | {med(plain)} | {med(spec)} | {med(speedup)} | {med(acc)} | "
                      f"{med(share)} | "
                      f"{med(over_floor) if over_floor else ''} |")
    if args.llama_completion and args.llama_speculative:
        print("\n| task | llama.cpp plain tok/s | llama.cpp draft tok/s | speedup | acceptance |")
        print("|---|---|---|---|---|")
        for task in tasks:
            plain = [x["runs"][f"{task}|1|llama.cpp plain"]["decode_tps"] for x in rounds]
            spec = [x["runs"][f"{task}|1|llama.cpp draft"]["decode_tps"] for x in rounds]
            acc = [x["runs"][f"{task}|1|llama.cpp draft"]["acceptance"] for x in rounds]
            print(f"| {task} | {med(plain)} | {med(spec)} | {med([s / p for s, p in zip(spec, plain)])} | "
                  f"{med(acc)} |")
    print(f"\nmedian (min-max) of {args.rounds} interleaved rounds, {args.threads} threads, "
          f"{os.path.basename(args.model)}, greedy, {args.tokens} tokens, K = {args.speculative_tokens}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"args": vars(args), "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
