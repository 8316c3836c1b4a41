#!/usr/bin/env python3
"""transformers' greedy decode at its strongest setting, for docs/gpu.md's comparison.

Runs on the GPU machine in the same call as shardlm_bench (scripts/gpu/bench.sh), on the same
checkpoint, prompt length and number of steps as shardlm_bench's decode (a 16-token context,
64 steps):

    python3 bench/gpu_transformers.py --model /tmp/llama3-8b-bench --batches 1,8 --steps 64

Three settings, each labelled in the table:
  - eager:     generate() with transformers' default dynamic cache, no compilation;
  - static:    generate() with the static KV cache (cache_implementation="static");
  - compiled:  the static cache and the model's forward under
               torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs), the setting
               transformers' own docs give for the fastest decode.
Decode ms/step is generate() with `steps` new tokens minus generate() with one (the prefill),
over steps - 1 steps. Every round is printed, then the median; compilation and CUDA-graph
capture happen in untimed warm-up calls first. The attention implementation is named in the
header (sdpa unless --attn).
"""
import argparse
import statistics
import time


def load(args, torch, transformers):
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype,
                                                              attn_implementation=args.attn)
    return model.to(args.device).eval()


def timer(torch, device):
    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return sync


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=16, help="shardlm_bench's --decode-context")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="eager,static,compiled")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa, eager, flash_attention_2")
    args = ap.parse_args()
    import torch
    import transformers
    sync = timer(torch, args.device)
    batches = [int(b) for b in args.batches.split(",")]
    print("\n| transformers %s, torch %s, %s, attention %s, %d-token prompt | setting | batch | rounds ms/step "
          "| median ms/step | tok/s |\n|---|---|---|---|---|---|"
          % (transformers.__version__, torch.__version__, args.dtype, args.attn, args.prompt_len))
    for mode in args.modes.split(","):
        model = load(args, torch, transformers)
        if mode in ("static", "compiled"):
            model.generation_config.cache_implementation = "static"
        if mode == "compiled":
            # One static graph per (batch, cache length): the 1-token and the `steps`-token calls
            # size their static caches differently; without this, the second shape would make
            # dynamo compile a dynamic-shape graph that CUDA graphs serve worse.
            torch._dynamo.config.automatic_dynamic_shapes = False
            torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        vocab = model.config.vocab_size
        for batch in batches:
            ids = torch.randint(1, vocab - 1, (batch, args.prompt_len), device=args.device)
            mask = torch.ones_like(ids)

            def run(n):
                sync()
                t0 = time.perf_counter()
                with torch.no_grad():
                    model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                   pad_token_id=0)
                sync()
                return time.perf_counter() - t0

            # Warm-up: compilation and graph capture for this batch's shapes (both lengths).
            for n in (1, args.steps, 1, args.steps):
                run(n)
            rounds = []
            for _ in range(args.rounds):
                prefill = run(1)
                full = run(args.steps)
                rounds.append(1e3 * (full - prefill) / (args.steps - 1))
            med = statistics.median(rounds)
            print("| | %s | %d | %s | %.2f | %.0f |" % (mode, batch, ", ".join("%.2f" % r for r in rounds), med,
                                                      1e3 * batch / med))
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
