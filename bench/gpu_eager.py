#!/usr/bin/env python3
"""transformers' own greedy decode on a checkpoint, for docs/gpu.md's comparison.

Runs on the GPU machine, in the same call as shardlm_bench (scripts/gpu/bench.sh):
    python3 bench/gpu_eager.py --model /tmp/llama3-8b-bench --batches 1,8 --steps 64
Prints one table row per batch: decode ms/step, from generate() with `steps` new
tokens minus generate() with one (the prefill), over steps - 1 steps.
"""
import argparse
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    args = ap.parse_args()
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.bfloat16).to("cuda")
    model.eval()
    vocab = model.config.vocab_size
    print("\n| transformers %s, torch %s | batch | decode ms/step | tok/s |\n|---|---|---|---|"
          % (transformers.__version__, torch.__version__))
    for batch in [int(b) for b in args.batches.split(",")]:
        ids = torch.randint(1, vocab - 1, (batch, args.prompt_len), device="cuda")

        def run(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.no_grad():
                model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            return time.perf_counter() - t0

        run(2)  # warm-up
        prefill = min(run(1) for _ in range(2))
        full = min(run(args.steps) for _ in range(2))
        ms = 1e3 * (full - prefill) / (args.steps - 1)
        print("| eager generate | %d | %.2f | %.0f |" % (batch, ms, 1e3 * batch / ms))


if __name__ == "__main__":
    main()
