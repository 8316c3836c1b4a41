#!/usr/bin/python3
"""Weights kept quantized (--weights; docs/quantized_weights.md), end to end.

  real_model: SmolLM2-135M-Instruct's Q4_1 GGUF (its token embedding, the tied LM head, Q8_0)
      scored with --weights auto (the blocks kept, activations quantized per block of 32 to
      int8) against --weights dense (the same file dequantized to f32): per-token log-probs
      within --max-diff (0.55) and on average within --mean-diff (0.15); 32 greedy tokens equal
      until the first difference, which must be a near tie of the dense run (its top two
      within --tie (0.1)).
  tensor_parallel: the same file kept quantized at --tp 2 and --tp 3 (9 heads and 3 KV heads:
      uneven at 2; every shard of o and down on the 32-weight block grid) against the dense run
      within the same bounds, greedy tokens equal up to near ties (a sharded run sums in another
      order, which flips some 8-bit activation roundings: over 30 layers that is quantization
      noise, not rounding noise); a tiny 2-layer model at --tp 2 within 1e-3 of one rank.
  quantize_at_load: the real model's weights quantized again at load to q8_0 (within the
      bounds above) and q4_0 (a second 4-bit rounding: within 3.3 and 1.35, 1.1x what it measures,
      it being deterministic); a tiny safetensors
      llama quantized at load to each format, the K-quants on one of hidden 256 (more bits nearer
      the dense scores: q6_k, then q5_k, then q4_k); a model whose rows are not whole blocks (hidden
      48, intermediate 120) stays dense under --weights q8_0, the dense run's exact scores.
  kv_bf16: --kv-dtype bf16 under the dense f32 weights: log-probs within 0.1 (mean 0.03) of the
      f32 cache, greedy tokens equal up to near ties; with the blocks kept at --tp 2, within the
      quantized bounds.
  k_quants (with --qwen-gguf): Qwen2.5-Coder-0.5B-Instruct's Q4_K_M file, its Q4_K, Q6_K,
      Q5_0 and Q8_0 blocks kept (q/k/v mixing Q5_0 and Q8_0 in half the layers, the Q5_0
      embedding looked up in its blocks) at --tp 1, 2 and 3 (the FFN's 19 super-blocks split
      10/9 and 7/6/6) against the file dequantized to f32: log-probs within --k-max-diff and
      --k-mean-diff, greedy tokens equal up to a near tie; the kept weights hold the file's
      bytes, not the dequantized ones (the engine's resident memory says which).
  gemma3 (with --gemma-gguf): Gemma 3 270M's Q4_K_M blocks kept at --tp 1, 2 and 3 against the
      file dequantized to f32 within --g-max-diff and --g-mean-diff (1.5x what was measured:
      0.33 and 0.09); greedy tokens equal up to a near tie.
  bad_flag: --weights q9 exits 2 naming the flag.

Usage:
  python3 tests/integration/quantized_test.py --shardlm build/shardlm --workdir DIR --gguf FILE
Prints PASS/FAIL per case; exit 0 iff every case passes.
"""
import argparse
import json
import os
import subprocess
import sys

TEXT = ("Tensor parallelism splits each layer's weights across devices, so that every GPU holds a "
        "shard and the activations are exchanged with all-gather and reduce-scatter collectives.")


def run(args, cmd):
    p = subprocess.run([args.shardlm] + cmd, capture_output=True, text=True, timeout=300)
    return p


def run_json(args, cmd):
    p = run(args, cmd + ["--json"])
    if p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(cmd[:1]), p.returncode, p.stderr[-800:]))
    return json.loads(p.stdout)


def scores(args, model, *extra):
    out = run_json(args, ["score", "--model", model, "--prompt", TEXT] + list(extra))
    return out["scores"][1:]


def greedy(args, model, *extra):
    return run_json(args, ["generate", "--model", model, "--prompt", "What is tensor parallelism?",
                           "--max-new-tokens", "32", "--temperature", "0", "--ignore-eos",
                           "--top-logprobs", "2"] + list(extra))


def diffs(a, b):
    d = [abs(x - y) for x, y in zip(a, b)]
    assert len(a) == len(b) and d, "score lengths %d and %d" % (len(a), len(b))
    return max(d), sum(d) / len(d)


def case_real_model(args):
    dense, kept = scores(args, args.gguf, "--weights", "dense"), scores(args, args.gguf)
    mx, mean = diffs(dense, kept)
    print("  log-probs of %d tokens, kept Q4_1 vs dequantized f32: max |diff| %.3f, mean %.3f"
          % (len(dense), mx, mean))
    assert mx <= args.max_diff and mean <= args.mean_diff, "beyond %.2f / %.2f" % (args.max_diff, args.mean_diff)
    assert mx > 0, "the kept blocks gave the dense scores exactly: nothing was kept quantized"
    check_greedy(args, greedy(args, args.gguf, "--weights", "dense"), greedy(args, args.gguf), "kept Q4_1")


def case_tensor_parallel(args):
    # Sharded, each rank's f32 sums run in another order (log-probs move by ~1e-5 in the dense
    # model); an 8-bit activation rounding at a .5 boundary then flips, so across 30 layers a
    # sharded quantized run differs from one rank's by quantization noise, not by rounding
    # noise: each is held to the bounds against the dense run, and greedy tokens to near ties.
    dense = scores(args, args.gguf, "--weights", "dense")
    g_dense = greedy(args, args.gguf, "--weights", "dense")
    for tp in ("2", "3"):
        mx, mean = diffs(dense, scores(args, args.gguf, "--tp", tp))
        print("  --tp %s kept quantized: log-probs max |diff| %.3f, mean %.3f against dense one rank"
              % (tp, mx, mean))
        assert mx <= args.max_diff and mean <= args.mean_diff, "--tp %s beyond the bounds" % tp
        assert mx > 0, "--tp %s gave the dense scores exactly: its shards were not kept quantized" % tp
        check_greedy(args, g_dense, greedy(args, args.gguf, "--tp", tp), "--tp " + tp)
    # Two layers of a tiny model: too few to amplify the reordering; equal to one rank's run.
    model = tiny(args, "tiny64", 64, 4, 2)
    for fmt in ("q8_0", "q4_1"):
        one = tiny_scores(args, model, "--weights", fmt)
        mx, _ = diffs(one, tiny_scores(args, model, "--weights", fmt, "--tp", "2"))
        print("  tiny %s --tp 2 against one rank: max |diff| %.1e" % (fmt, mx))
        assert mx <= 1e-3, "tiny %s --tp 2 differs by %.1e" % (fmt, mx)


def check_greedy(args, g_dense, g, what):
    same = 0
    for a, b in zip(g_dense["token_ids"], g["token_ids"]):
        if a != b:
            break
        same += 1
    if same < len(g_dense["token_ids"]):
        top = g_dense["top_logprobs"][same]
        gap = top[0]["logprob"] - top[1]["logprob"]
        print("  %s greedy: %d tokens equal, then a near tie of the dense run (top-2 gap %.3f)" % (what, same, gap))
        assert gap < args.tie, "%s: token %d differs with a top-2 gap of %.3f" % (what, same, gap)
    else:
        print("  %s greedy: all %d tokens equal the dense run's" % (what, same))


def tiny(args, name, hidden, heads, kv, inter=128):
    path = os.path.join(args.workdir, name)
    if not os.path.exists(os.path.join(path, "config.json")):
        p = run(args, ["make-tiny-model", path, "--no-tokenizer", "--vocab-size", "512",
                       "--hidden-size", str(hidden), "--num-heads", str(heads), "--num-kv-heads", str(kv),
                       "--intermediate-size", str(inter), "--num-layers", "2", "--seed", "3"])
        assert p.returncode == 0, p.stderr[-500:]
    return path


def tiny_scores(args, model, *extra):
    ids = ",".join(str((i * 37 + 11) % 512) for i in range(40))
    out = run_json(args, ["score", "--model", model, "--prompt-ids", ids] + list(extra))
    return out["scores"][1:]


def case_quantize_at_load(args):
    # The real model's weights (the file's Q4_1 values, dequantized) quantized again at load.
    # Q8_0 adds little to the activations' rounding; Q4_0 of values already on Q4_1's grid
    # loses much more (a second 4-bit rounding, symmetric this time): bounds from measurement.
    dense = scores(args, args.gguf, "--weights", "dense")
    for fmt, max_diff, mean_diff in (("q8_0", args.max_diff, args.mean_diff), ("q4_0", 3.3, 1.35)):
        mx, mean = diffs(dense, scores(args, args.gguf, "--weights", fmt))
        print("  %s at load: log-probs max |diff| %.3f, mean %.3f (bounds %.2f, %.2f)"
              % (fmt, mx, mean, max_diff, mean_diff))
        assert mx <= max_diff and mean <= mean_diff, "%s beyond its bounds" % fmt
    # A safetensors checkpoint: every format quantizes at load and changes the scores.
    model = tiny(args, "tiny64", 64, 4, 2)
    plain = tiny_scores(args, model, "--weights", "dense")
    for fmt in ("q8_0", "q4_0", "q4_1"):
        mx, _ = diffs(plain, tiny_scores(args, model, "--weights", fmt))
        print("  tiny safetensors, %s at load: max |diff| %.3f from dense" % (fmt, mx))
        assert 0 < mx < 10, "%s at load: max |diff| %.3f" % (fmt, mx)
    # The K-quants at load take rows of whole 256-weight super-blocks: a tiny model of 256 and 512.
    wide = tiny(args, "tiny256", 256, 4, 2, inter=512)
    plain = tiny_scores(args, wide, "--weights", "dense")
    means = {}
    for fmt in ("q4_k", "q5_k", "q6_k"):
        mx, means[fmt] = diffs(plain, tiny_scores(args, wide, "--weights", fmt))
        print("  tiny safetensors, %s at load: max |diff| %.3f, mean %.4f from dense" % (fmt, mx, means[fmt]))
        assert 0 < mx < 10, "%s at load: max |diff| %.3f" % (fmt, mx)
    assert means["q6_k"] < means["q5_k"] < means["q4_k"], "more bits must come nearer dense: %s" % means
    odd = tiny(args, "tiny48", 48, 4, 2, inter=120)
    a, b = tiny_scores(args, odd, "--weights", "dense"), tiny_scores(args, odd, "--weights", "q8_0")
    assert a == b, "rows of 48 and 120 are not whole blocks: --weights q8_0 must leave them dense"
    print("  hidden 48, intermediate 120: --weights q8_0 leaves the weights dense (scores identical)")


def case_kv_bf16(args):
    # A bf16 KV cache under f32 compute: q, k and v rounded to bf16 for attention.
    base = scores(args, args.gguf, "--weights", "dense")
    mx, mean = diffs(base, scores(args, args.gguf, "--weights", "dense", "--kv-dtype", "bf16"))
    print("  --kv-dtype bf16, dense f32 weights: log-probs max |diff| %.3f, mean %.3f (bounds 0.1, 0.03)"
          % (mx, mean))
    assert 0 < mx <= 0.1 and mean <= 0.03, "beyond the bounds (or nothing changed)"
    check_greedy(args, greedy(args, args.gguf, "--weights", "dense"),
                 greedy(args, args.gguf, "--weights", "dense", "--kv-dtype", "bf16"), "--kv-dtype bf16")
    mx, mean = diffs(base, scores(args, args.gguf, "--kv-dtype", "bf16", "--tp", "2"))
    print("  --kv-dtype bf16, kept Q4_1, --tp 2: max |diff| %.3f, mean %.3f" % (mx, mean))
    assert mx <= args.max_diff and mean <= args.mean_diff, "beyond the quantized bounds"


def kept_against_dense(args, model, what, max_diff, mean_diff, greedy_tps):
    """`model`'s kept blocks at --tp 1, 2 and 3 against its dequantized f32 scores; greedy tokens
    at `greedy_tps` against the dense run's up to a near tie."""
    dense = scores(args, model, "--weights", "dense")
    for tp in ("1", "2", "3"):
        mx, mean = diffs(dense, scores(args, model, "--tp", tp))
        print("  %s kept, --tp %s: log-probs max |diff| %.3f, mean %.3f against dense (bounds %.2f, %.3f)"
              % (what, tp, mx, mean, max_diff, mean_diff))
        assert 0 < mx <= max_diff and mean <= mean_diff, "--tp %s beyond the bounds" % tp
    g_dense = greedy(args, model, "--weights", "dense")
    for tp in greedy_tps:
        check_greedy(args, g_dense, greedy(args, model, "--tp", tp), "%s --tp %s" % (what, tp))


def case_k_quants(args):
    if not args.qwen_gguf:
        raise AssertionError("needs --qwen-gguf")
    model = args.qwen_gguf
    kept_against_dense(args, model, "Q4_K_M", args.k_max_diff, args.k_mean_diff, ("1", "2"))
    # One rank's peak memory: the kept blocks (the 491 MB file) against f32 (about 2.5 GB).
    kept_kb, dense_kb = peak_kb(args, model), peak_kb(args, model, "--weights", "dense")
    print("  peak resident memory: kept %d MB, dense %d MB" % (kept_kb >> 10, dense_kb >> 10))
    assert kept_kb * 2 < dense_kb, "the kept weights take more than half the dense weights' memory"


def case_gemma3(args):
    if not args.gemma_gguf:
        raise AssertionError("needs --gemma-gguf")
    kept_against_dense(args, args.gemma_gguf, "Gemma 3", args.g_max_diff, args.g_mean_diff, ("2",))


def peak_kb(args, model, *extra):
    """The largest resident set of `score` and its worker processes, in KB (a fresh Python's
    RUSAGE_CHILDREN, so no earlier run counts)."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
             "assert p.returncode == 0, p.stderr[-500:]\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    p = subprocess.run([sys.executable, "-c", probe, args.shardlm, "score", "--model", model, "--prompt", "x"]
                       + list(extra), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-500:]
    return int(p.stdout.strip().splitlines()[-1])


def case_bad_flag(args):
    p = run(args, ["score", "--model", args.gguf, "--prompt", "x", "--weights", "q9"])
    assert p.returncode == 2 and "--weights" in p.stderr, "rc %d: %s" % (p.returncode, p.stderr[-300:])
    print("  %s" % p.stderr.strip().splitlines()[-1][:160])


CASES = [("real_model", case_real_model), ("tensor_parallel", case_tensor_parallel),
         ("quantize_at_load", case_quantize_at_load), ("kv_bf16", case_kv_bf16), ("k_quants", case_k_quants),
         ("gemma3", case_gemma3),
         ("bad_flag", case_bad_flag)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--max-diff", type=float, default=0.55)
    ap.add_argument("--mean-diff", type=float, default=0.15)
    ap.add_argument("--tie", type=float, default=0.1)
    ap.add_argument("--qwen-gguf", default="")
    ap.add_argument("--k-max-diff", type=float, default=0.26)
    ap.add_argument("--k-mean-diff", type=float, default=0.065)
    ap.add_argument("--gemma-gguf", default="")
    ap.add_argument("--g-max-diff", type=float, default=0.5)
    ap.add_argument("--g-mean-diff", type=float, default=0.135)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    failed = 0
    for name, fn in CASES:
        if args.only and name not in args.only.split(","):
            continue
        try:
            fn(args)
            print("PASS %s" % name)
        except (AssertionError, subprocess.TimeoutExpired, ValueError) as e:
            print("FAIL %s: %s" % (name, e))
            failed += 1
    print("quantized: %d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
