#!/usr/bin/env python3
"""shardlm against llama.cpp on the same GGUF files, interleaved, medians of N rounds.

llama.cpp is built outside the project for this comparison only (docs/benchmarks.md says how);
this script only runs the binaries it is given:

    python3 bench/llamacpp_compare.py --shardlm-bench build/shardlm_bench \\
        --llama-bench /path/llama-bench --llama-batched-bench /path/llama-batched-bench \\
        --model third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf --model other.Q8_0.gguf

On an AVX-512 host, --isa avx2 caps shardlm's kernels (SHARDLM_CPU_ISA=avx2); pair it with a
llama.cpp built with -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF.

Each round runs, per file, shardlm_bench (512-token prompt at batch 1; decode at batch 1 and 8
after a 16-token prompt, 64 steps; the read-bandwidth floor of the weights' bytes), then
llama-bench (-p 512 -n 64, one repetition) and llama-batched-bench (8 parallel sequences of a
16-token prompt and 64 generated tokens), all with --threads threads. Prints one markdown table:
batch-1 decode ms/token, 512-token prompt tokens/s, batch-8 decode tokens/s, each the median and
the range over every round (none is dropped), and shardlm's batch-1 step against the floor of the
bytes it reads in the same round. With --json-out every round's figures are saved, llama-bench's
and llama-batched-bench's own JSON included.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def shardlm_round(args, model):
    # The same threads as llama.cpp: shardlm's kernels use ATen's thread count.
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if args.isa:
        env["SHARDLM_CPU_ISA"] = args.isa
    out = subprocess.run([args.shardlm_bench, "--model-dir", model, "--dtypes", "f32", "--batches", "1,8",
                          "--decode-steps", "64", "--prompt-len", "512", "--weights", "auto"],
                         capture_output=True, text=True, check=True, env=env).stdout
    rows = {}
    floor = None
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        # | dtype | batch | prefill tok/s | prefill GFLOP/s | vs GEMM | decode tok/s | decode ms/step | floor ms | ...
        if len(cells) >= 8 and cells[0] == "f32/auto" and cells[1].isdigit() and cells[1] not in rows:
            try:
                rows[cells[1]] = (float(cells[2]), float(cells[5]), float(cells[6]), float(cells[7]))
            except ValueError:
                continue
    if "1" not in rows or "8" not in rows:
        sys.exit("could not read shardlm_bench's table:\n" + out[-2000:])
    floor = rows["1"][3]
    return {"decode_ms": rows["1"][2], "prompt_tps": rows["1"][0], "batch8_tps": rows["8"][1], "floor_ms": floor,
            "step_over_floor": rows["1"][2] / floor, "batch8_floor_ms": rows["8"][3]}


def llamacpp_round(args, model):
    out = subprocess.run([args.llama_bench, "-m", model, "-t", str(args.threads), "-p", "512", "-n", "64",
                          "-r", "1", "-o", "json"], capture_output=True, text=True, check=True).stdout
    res = {"llama_bench_json": json.loads(out)}
    for r in res["llama_bench_json"]:
        if r["n_prompt"] == 512 and r["n_gen"] == 0:
            res["prompt_tps"] = r["avg_ts"]
        if r["n_gen"] == 64 and r["n_prompt"] == 0:
            res["decode_ms"] = 1e3 / r["avg_ts"]
    if args.llama_batched_bench:
        out = subprocess.run([args.llama_batched_bench, "-m", model, "-t", str(args.threads), "-c", "4096",
                              "-b", "2048", "-ub", "512", "-npp", "16", "-ntg", "64", "-npl", "8",
                              "--output-format", "jsonl"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("pl") == 8:
                    res["batch8_tps"] = r["speed_tg"]
                    res["llama_batched_bench_json"] = r
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm-bench", required=True)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--llama-batched-bench", default="")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-out", default="")
    ap.add_argument("--isa", default="", choices=["", "scalar", "avx2", "avx512"],
                    help="cap shardlm's CPU kernels (SHARDLM_CPU_ISA); give llama.cpp binaries built for the same")
    args = ap.parse_args()
    runs = {(m, who): [] for m in args.model for who in ("shardlm", "llama.cpp")}
    for r in range(args.rounds):
        for m in args.model:
            runs[(m, "shardlm")].append(shardlm_round(args, m))
            runs[(m, "llama.cpp")].append(llamacpp_round(args, m))
        print("round %d of %d done" % (r + 1, args.rounds), file=sys.stderr)

    def cell(m, who, key, fmt):
        vals = [x[key] for x in runs[(m, who)] if key in x]
        if not vals:
            return ""
        return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(vals), min(vals), max(vals))

    print("| file | engine | batch-1 decode ms/token | floor ms | step / floor | 512-token prompt tok/s "
          "| batch-8 decode tok/s |")
    print("|---|---|---|---|---|---|---|")
    for m in args.model:
        name = m.rsplit("/", 1)[-1]
        for who in ("shardlm", "llama.cpp"):
            print("| %s | %s | %s | %s | %s | %s | %s |" % (
                name, who, cell(m, who, "decode_ms", "%.2f"), cell(m, who, "floor_ms", "%.2f"),
                cell(m, who, "step_over_floor", "%.2f"), cell(m, who, "prompt_tps", "%.0f"),
                cell(m, who, "batch8_tps", "%.0f")))
    print("\nmedian (min-max) of %d interleaved rounds, %d threads, shardlm's CPU kernels capped at %s" %
          (args.rounds, args.threads, args.isa or "none (the CPU's best)"))
    if args.json_out:
        with open(args.json_out, "w") as f:
            out = {"%s|%s" % k: v for k, v in runs.items()}
            out["settings"] = {"threads": args.threads, "shardlm_isa_cap": args.isa or None,
                               "llama_bench": args.llama_bench}
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
