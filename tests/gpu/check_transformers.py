#!/usr/bin/env python3
"""The engine against Hugging Face transformers itself, on the GPU machine.

Usage (scripts/gpu/test.sh runs it):
    python3 tests/gpu/check_transformers.py --shardlm build-cuda/shardlm --workdir /tmp/hf \
        [--device cuda] [--only llama,qwen3]

For each architecture the engine writes a tiny random checkpoint
(`shardlm make-tiny-model`), transformers loads the same directory
(AutoModelForCausalLM, float32, on the GPU), and:
  - score: the engine's per-token log-probs of a seeded prompt equal
    transformers' log_softmax of the logits (max |diff| <= --tol, f32);
  - generate: 16 greedy tokens (--ignore-eos) equal transformers' own greedy
    continuation, token for token, except at a near-tie (top-2 logit gap under
    --tie-tol), which is reported and accepted.
bf16: the llama checkpoint stored in bf16, both sides computing in bf16;
max and mean |diff| of the scores within docs/numerics.md's bf16 bounds.
Exit status 0 when every case passes, 1 otherwise, 2 on a usage problem.
Needs python3 with torch and transformers (the GPU machine's image has both).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

ARCHS = {  # case: (make-tiny-model --arch, extra flags)
    "llama": ("llama", []),
    "mistral": ("mistral", []),
    "qwen2": ("qwen2", []),
    "qwen3": ("qwen3", []),
}


def run_engine(args, binary, device, timeout=300):
    cmd = [binary] + [str(a) for a in args]
    if device and args[0] in ("score", "generate"):
        cmd += ["--device", device]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), proc.returncode, proc.stderr.decode()[-2000:]))
    out = proc.stdout.decode().strip().splitlines()
    return json.loads(out[-1]) if args[0] != "make-tiny-model" else None


def prompt_ids(seed, n, vocab):
    # A fixed, seeded prompt that avoids id 0 (BOS of the tiny models).
    x, ids = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        ids.append(1 + x % (vocab - 2))
    return ids


def hf_logprobs(torch, model, ids, device):
    with torch.no_grad():
        t = torch.tensor([ids], device=device)
        logits = model(t).logits[0].float()
        return torch.log_softmax(logits, dim=-1)


def hf_greedy(torch, model, ids, n, device):
    out, gaps = list(ids), []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([out], device=device)).logits[0, -1].float()
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            out.append(int(top.indices[0]))
    return out[len(ids):], gaps


def check(case, args, torch, transformers):
    arch, extra = ARCHS.get(case, ("llama", []))
    dtype = "bf16" if case == "bf16" else "f32"
    d = os.path.join(args.workdir, case)
    if os.path.exists(d):
        shutil.rmtree(d)
    run_engine(["make-tiny-model", d, "--arch", arch, "--seed", "3", "--dtype", dtype, "--no-tokenizer",
                "--vocab-size", "512", "--hidden-size", "256", "--num-heads", "4", "--num-kv-heads", "2"] + extra,
               args.shardlm, None)
    cfg = json.load(open(os.path.join(d, "config.json")))
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch_dtype,
                                                              attn_implementation="eager").to(args.torch_device)
    model.eval()
    ids = prompt_ids(7, 24, cfg["vocab_size"])
    ref = hf_logprobs(torch, model, ids, args.torch_device)
    engine = run_engine(["score", "--model", d, "--prompt-ids", ",".join(map(str, ids)), "--json", "--dtype", dtype],
                        args.shardlm, args.device)
    diffs = [abs(engine["scores"][i] - float(ref[i - 1, ids[i]])) for i in range(1, len(ids))]
    worst, mean = max(diffs), sum(diffs) / len(diffs)
    ok = worst <= (args.bf16_max_tol if dtype == "bf16" else args.tol)
    if dtype == "bf16":
        ok = ok and mean <= args.bf16_mean_tol
    msg = "%s: score max |diff| %.3g, mean %.3g" % (case, worst, mean)
    if dtype == "f32":
        gen = run_engine(["generate", "--model", d, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", 16,
                          "--temperature", 0, "--ignore-eos", "--json"], args.shardlm, args.device)
        want, gaps = hf_greedy(torch, model, ids, 16, args.torch_device)
        for i, (a, b) in enumerate(zip(gen["token_ids"], want)):
            if a != b:
                if gaps[i] < args.tie_tol:
                    msg += "; token %d differs at a near-tie (gap %.2g), accepted" % (i, gaps[i])
                else:
                    ok = False
                    msg += "; token %d: engine %d, transformers %d (gap %.3g)" % (i, a, b, gaps[i])
                break
        else:
            msg += "; 16 greedy tokens equal"
    print(("PASS " if ok else "FAIL ") + msg)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda", help="the engine's --device")
    ap.add_argument("--torch-device", default="cuda", help="where transformers runs")
    ap.add_argument("--only", default="")
    ap.add_argument("--tol", type=float, default=1e-3, help="f32 (transformers on a GPU uses TF32 off)")
    ap.add_argument("--tie-tol", type=float, default=1e-3)
    ap.add_argument("--bf16-max-tol", type=float, default=0.25)
    ap.add_argument("--bf16-mean-tol", type=float, default=0.06)
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print("check_transformers: needs torch and transformers: %s" % e)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.workdir, exist_ok=True)
    cases = [c for c in args.only.split(",") if c] or list(ARCHS) + ["bf16"]
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    failed = [c for c in cases if not check(c, args, torch, transformers)]
    print("check_transformers: %d passed, %d failed" % (len(cases) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
