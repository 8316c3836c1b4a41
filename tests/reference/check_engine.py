#!/usr/bin/python3
"""Compare the shardlm engine CLI with the independent NumPy reference.

Usage:
    /usr/bin/python3 tests/reference/check_engine.py --shardlm build/shardlm \
        --workdir /tmp/shardlm-check [--only llama,qwen3] [--timeout 120] [--list]

Exit status: 0 when every selected case passes, 1 when any case fails, 2 for a
usage problem (engine binary missing, bad arguments).

What is checked and why
-----------------------
The engine builds its own tiny random checkpoints (`shardlm make-tiny-model`),
so every case first checks that the checkpoint really has the feature the case
is about (right architecture, f32/bf16 storage, rope_scaling present, two
shards, tied embeddings, ...); otherwise a pass would prove nothing.  The
reference (hf_reference.py, float64 NumPy, no shared code with the engine)
then re-reads that checkpoint and the engine's answers are compared with it:

  per-architecture cases (f32, tolerance --tol, default 1e-4 absolute):
    llama, mistral (sliding window), qwen2 (qkv bias), qwen3 (q/k norm,
    head_dim != hidden/heads), llama_rope_llama3 (rope_scaling llama3),
    llama_shards2 (sharded checkpoint), qwen3_tied (tie_word_embeddings)
      - `score`: per-token log-probs of a seeded random prompt equal the
        reference's;
      - `generate` (greedy, 16 tokens, --ignore-eos): every generated token is
        the reference's argmax given the engine's own prefix (so the sequence
        equals the reference greedy sequence; a token that differs only at an
        exact near-tie, within --tol, is reported but accepted), and the
        engine's logprobs equal the reference's log p of those tokens.
  blocks_matter: on the llama checkpoint, logits with every decoder layer
    skipped (embed -> final norm -> lm_head) must have a different argmax from
    the full model at >= 50% of positions, and greedy output must not be one
    repeated token.  Guards against tiny models whose random weights are so
    small that the residual stream alone decides and the blocks are untested.
  bf16: llama checkpoint stored as bf16; engine `score --dtype bf16` vs the
    reference on the exact bf16 weights in float64.  Max and mean |diff| are
    printed; bf16 compute error is expected, so the tolerances are loose
    (--bf16-max-tol, --bf16-mean-tol).  Generation in bf16 is reported.
  bf16_weights_f32_compute: the same bf16 checkpoint with `--dtype f32` must
    match the reference to --tol (bf16 -> f32 widening is exact).
  f32_weights_bf16_compute: the f32 llama checkpoint with `--dtype bf16`,
    compared with the reference on the weights rounded to bf16 (nearest-even),
    bf16 tolerances.

Only the stdlib and NumPy are used; every engine call has a timeout.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import hf_reference as ref  # noqa: E402
import harness  # noqa: E402
from harness import ids_arg as _ids_arg, last_json_object  # noqa: E402

# Small model shape shared by all cases (the brief's "small sizes").
SMALL_MODEL_ARGS = [
    "--no-tokenizer", "--vocab-size", "512", "--hidden-size", "64",
    "--num-layers", "2", "--num-heads", "4", "--num-kv-heads", "2",
    "--intermediate-size", "128",
]
PROMPT_LEN = 24
MISTRAL_PROMPT_LEN = 40
NEW_TOKENS = 16

EXPECTED_ARCH = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


CaseFailure = harness.Failure   # an expected kind of failure: a message, never a traceback
TAIL_CHARS = 600               # how much engine output a failure message quotes


# ---------------------------------------------------------------------------
# engine invocation
# ---------------------------------------------------------------------------

class Engine:
    def __init__(self, binary, timeout, verbose, device=None):
        self.binary = binary
        self.timeout = timeout
        self.verbose = verbose
        self.device = device

    def run(self, args):
        """Run the engine; return stdout.  Any problem raises CaseFailure."""
        cmd = [self.binary] + [str(a) for a in args]
        # --device goes to the commands that compute (not make-tiny-model).
        if self.device and cmd[1] in ("score", "generate", "prefill", "batch"):
            cmd += ["--device", self.device]
        if self.verbose:
            print("    $ " + " ".join(cmd))
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise CaseFailure("timed out after %ss: %s" % (self.timeout, " ".join(cmd)))
        except OSError as e:
            raise CaseFailure("could not run %s: %s" % (cmd[0], e))
        out = proc.stdout.decode("utf-8", errors="replace")
        err = proc.stderr.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            raise CaseFailure("exit status %d from: %s\n      stderr: %s"
                              % (proc.returncode, " ".join(cmd), _tail(err)))
        return out

    def run_json(self, args):
        """Run the engine and parse its single JSON object from stdout."""
        out = self.run(args)
        text = out.strip()
        try:
            obj = json.loads(text)
        except ValueError:
            # Tolerate log lines before the JSON: take the last line that parses.
            obj = last_json_object(text)
            if obj is None:
                raise CaseFailure("engine did not print a JSON object for: %s\n      stdout: %s"
                                  % (" ".join(str(a) for a in args), _tail(out)))
        if not isinstance(obj, dict):
            raise CaseFailure("engine JSON output is not an object: %s" % _tail(text))
        return obj

    def make_tiny_model(self, model_dir, extra):
        if os.path.exists(model_dir):
            shutil.rmtree(model_dir)
        self.run(["make-tiny-model", model_dir] + list(extra))

    def score(self, model_dir, ids, dtype=None):
        args = ["score", "--model", model_dir, "--prompt-ids", _ids_arg(ids), "--json"]
        if dtype:
            args += ["--dtype", dtype]
        obj = self.run_json(args)
        _require_keys(obj, ["token_ids", "scores"], "score")
        if list(obj["token_ids"]) != list(ids):
            raise CaseFailure("score: token_ids echoed %s, expected %s"
                              % (_short(obj["token_ids"]), _short(ids)))
        scores = obj["scores"]
        if not isinstance(scores, list) or len(scores) != len(ids):
            raise CaseFailure("score: expected %d scores, got %r" % (len(ids), _short(scores)))
        if scores[0] is not None:
            raise CaseFailure("score: scores[0] must be null, got %r" % (scores[0],))
        if any(not isinstance(s, (int, float)) for s in scores[1:]):
            raise CaseFailure("score: non-numeric entries in scores: %s" % _short(scores))
        return scores

    def generate(self, model_dir, ids, n, dtype=None):
        args = ["generate", "--model", model_dir, "--prompt-ids", _ids_arg(ids),
                "--max-new-tokens", n, "--temperature", "0", "--ignore-eos", "--json"]
        if dtype:
            args += ["--dtype", dtype]
        obj = self.run_json(args)
        _require_keys(obj, ["prompt_token_ids", "token_ids", "logprobs", "finish_reason"],
                      "generate")
        if list(obj["prompt_token_ids"]) != list(ids):
            raise CaseFailure("generate: prompt_token_ids echoed %s, expected %s"
                              % (_short(obj["prompt_token_ids"]), _short(ids)))
        toks, lps = obj["token_ids"], obj["logprobs"]
        if not isinstance(toks, list) or len(toks) != n:
            raise CaseFailure("generate: expected %d tokens with --ignore-eos, got %s"
                              % (n, _short(toks)))
        if not isinstance(lps, list) or len(lps) != len(toks):
            raise CaseFailure("generate: %d logprobs for %d tokens" % (len(lps), len(toks)))
        if obj["finish_reason"] != "length":
            raise CaseFailure("generate: finish_reason %r, expected \"length\" with --ignore-eos"
                              % (obj["finish_reason"],))
        if "text" in obj and not isinstance(obj["text"], str):
            raise CaseFailure("generate: \"text\" is not a string")
        return obj


def _require_keys(obj, keys, what):
    missing = [k for k in keys if k not in obj]
    if missing:
        raise CaseFailure("%s: JSON output lacks %s; got keys %s" % (what, missing, sorted(obj)))


def _tail(text, n=TAIL_CHARS):
    return harness.tail(text, n)


def _short(seq, n=12):
    if not isinstance(seq, list):
        return repr(seq)
    if len(seq) <= n:
        return json.dumps(seq)
    return json.dumps(seq[:n])[:-1] + ", ... (%d items)]" % len(seq)


# ---------------------------------------------------------------------------
# helpers shared by the cases
# ---------------------------------------------------------------------------

class Report(harness.Checker):
    """Collects the sub-check lines of one case; also unconditional ok/fail
    lines and warnings (weak checks, listed after the summary)."""

    def __init__(self):
        super().__init__()
        self.warnings = []

    def ok(self, msg):
        self.check(True, msg)

    def fail(self, msg):
        return self.check(False, msg)

    def warn(self, msg):
        print("    WARN  " + msg)
        self.warnings.append(msg)


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise CaseFailure("cannot read %s: %s" % (path, e))


def load_reference(model_dir, **kw):
    try:
        return ref.load_model(model_dir, **kw)
    except Exception as e:  # malformed checkpoint written by the engine
        raise CaseFailure("reference could not load %s: %s: %s"
                          % (model_dir, type(e).__name__, e))


def checkpoint_dtypes(model):
    return sorted(set(model.weight_dtypes.values()))


def random_prompt(seed, length, vocab):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, vocab, size=length)]


def score_diffs(engine_scores, ref_scores):
    e = np.array(engine_scores[1:], dtype=np.float64)
    r = np.array(ref_scores[1:], dtype=np.float64)
    d = np.abs(e - r)
    if not np.all(np.isfinite(e)):
        return float("inf"), float("inf"), int(np.argmax(~np.isfinite(e))) + 1
    return float(d.max()), float(d.mean()), int(np.argmax(d)) + 1


def compare_generation(rep, model, prompt, gen, tol, tie_tol, label="generate"):
    """Check the engine's greedy tokens and logprobs against the reference.

    The reference evaluates the engine's full sequence once; row p-1 of its
    log-probs is the distribution of token p given the engine's prefix.  Each
    engine token must be the reference argmax (or within tie_tol of it), and
    its logprob must match.  Returns (ok, reference greedy tokens).
    """
    toks = [int(t) for t in gen["token_ids"]]
    seq = list(prompt) + toks
    lp = ref.log_softmax(ref.forward(model, seq))
    P = len(prompt)
    ok = True
    near_ties = []
    first_bad = None
    ref_lps = []
    for i, t in enumerate(toks):
        row = lp[P + i - 1]
        best = int(np.argmax(row))
        ref_lps.append(float(row[t]))
        if t != best:
            gap = float(row[best] - row[t])
            if gap <= tie_tol:
                near_ties.append((i, t, best, gap))
            elif first_bad is None:
                first_bad = (i, t, best, gap)
    ref_greedy = ref.greedy(model, prompt, len(toks))
    same = sum(1 for a, b in zip(ref_greedy, toks) if a == b)
    if first_bad is not None:
        i, t, best, gap = first_bad
        ok = rep.fail("%s: step %d engine chose %d but reference argmax is %d "
                       "(log-prob gap %.3g)\n          engine    %s\n          reference %s"
                       % (label, i, t, best, gap, toks, ref_greedy))
    else:
        rep.ok("%s: %d/%d tokens are the reference argmax; equals reference greedy: %s"
               % (label, len(toks) - len(near_ties), len(toks),
                  "yes" if ref_greedy == toks else "no (%d/%d same)" % (same, len(toks))))
        for i, t, best, gap in near_ties:
            rep.note("%s: step %d near-tie accepted: engine %d, reference %d, gap %.2e"
                     % (label, i, t, best, gap))
    e = np.array(gen["logprobs"], dtype=np.float64)
    d = np.abs(e - np.array(ref_lps))
    dmax = float(d.max()) if d.size else 0.0
    if not np.all(np.isfinite(e)):
        dmax = float("inf")
    ok = rep.check(dmax <= tol, "%s: logprobs max|diff| = %.3g (tol %g)" % (label, dmax, tol))
    return ok, ref_greedy


# ---------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------

class Context(harness.Ctx):
    def __init__(self, engine, workdir, args):
        super().__init__(workdir, args)
        self.engine = engine
        self.results = {}   # case name -> dict with data later cases reuse


def arch_case(name, arch, seed, extra=(), feature=None):
    """Build a case function for one f32 architecture/feature combination."""

    def run(ctx, rep):
        tol = ctx.args.tol
        d = ctx.dir(name)
        ctx.engine.make_tiny_model(d, ["--arch", arch, "--seed", seed, "--dtype", "f32"]
                                   + SMALL_MODEL_ARGS + list(extra))
        cfg = read_config(d)
        got_arch = (cfg.get("architectures") or ["?"])[0]
        if got_arch != EXPECTED_ARCH[arch]:
            raise CaseFailure("config.json architectures[0] = %r, expected %r"
                              % (got_arch, EXPECTED_ARCH[arch]))
        model = load_reference(d)
        dts = checkpoint_dtypes(model)
        if dts != ["F32"]:
            raise CaseFailure("checkpoint made with --dtype f32 stores %s" % dts)
        rep.note("config: hidden %d, layers %d, heads %d/%d kv, head_dim %d, vocab %d"
                 % (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads,
                    model.head_dim, model.vocab_size))

        prompt_len = PROMPT_LEN
        if feature is not None:
            prompt_len = feature(ctx, rep, d, cfg, model, seed) or PROMPT_LEN
        prompt = random_prompt(seed, prompt_len, model.vocab_size)

        # score
        ref_scores = ref.score(model, prompt)
        eng_scores = ctx.engine.score(d, prompt)
        dmax, dmean, at = score_diffs(eng_scores, ref_scores)
        rep.check(dmax <= tol, "score: %d tokens, max|diff| = %.3g at position %d, mean %.3g (tol %g)"
                  % (len(prompt), dmax, at, dmean, tol))

        # Later cases (blocks_matter, f32_weights_bf16_compute) reuse this model.
        result = {"dir": d, "model": model, "prompt": prompt,
                  "ref_greedy": ref.greedy(model, prompt, NEW_TOKENS), "engine_tokens": None}
        ctx.results[name] = result

        # greedy generate
        gen = ctx.engine.generate(d, prompt, NEW_TOKENS)
        compare_generation(rep, model, prompt, gen, tol, tie_tol=tol)
        result["engine_tokens"] = [int(t) for t in gen["token_ids"]]

    run.__name__ = name
    return run


def feature_sliding_window(ctx, rep, d, cfg, model, seed):
    """Mistral: make sure the prompt is longer than the sliding window."""
    sw = cfg.get("sliding_window")
    if sw is None or isinstance(sw, bool) or not isinstance(sw, int) or sw <= 0:
        rep.warn("config sliding_window is %r: sliding-window attention is NOT exercised" % (sw,))
        return MISTRAL_PROMPT_LEN
    length = MISTRAL_PROMPT_LEN
    max_pos = int(cfg.get("max_position_embeddings") or 4096)
    if sw >= length:
        if sw + 16 + NEW_TOKENS <= min(max_pos, 512):
            length = sw + 16
            rep.note("sliding_window %d >= %d: prompt lengthened to %d tokens"
                     % (sw, MISTRAL_PROMPT_LEN, length))
        else:
            rep.warn("sliding_window %d >= prompt length %d: window NOT exercised" % (sw, length))
            return length
    # How much does the window change the answer?  (If nothing, the case is vacuous.)
    prompt = random_prompt(seed, length, model.vocab_size)  # the prompt the case will use
    with_w = ref.forward(model, prompt)
    without = ref.forward(model, prompt, sliding_window=None)
    effect = float(np.abs(with_w - without).max())
    rep.note("sliding_window %d, prompt %d tokens; window changes reference logits by up to %.3g"
             % (sw, length, effect))
    if effect <= 10 * ctx.args.tol:
        rep.warn("sliding window barely affects the logits; the check is weak")
    return length


def feature_rope_llama3(ctx, rep, d, cfg, model, seed):
    rs = cfg.get("rope_scaling")
    rtype = (rs or {}).get("rope_type", (rs or {}).get("type"))
    if rtype != "llama3":
        raise CaseFailure("config rope_scaling is %r, expected rope_type llama3" % (rs,))
    rep.note("rope_scaling: %s" % json.dumps(rs, sort_keys=True))
    base = ref.rope_inv_freq(model.head_dim, model.rope_theta, None)
    scaled = ref.rope_inv_freq(model.head_dim, model.rope_theta, rs)
    changed = int(np.sum(np.abs(base - scaled) > 0))
    prompt = random_prompt(seed, PROMPT_LEN, model.vocab_size)  # the prompt the case will use
    effect = float(np.abs(ref.forward(model, prompt)
                          - ref.forward(model, prompt, rope_scaling=None)).max())
    rep.note("llama3 scaling changes %d of %d inverse frequencies; logits by up to %.3g"
             % (changed, base.size, effect))
    if effect <= 10 * ctx.args.tol:
        rep.warn("rope scaling barely affects the logits at these positions; the check is weak")
    return None


def feature_shards(ctx, rep, d, cfg, model, seed):
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        raise CaseFailure("--shards 2 did not write model.safetensors.index.json")
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    if len(files) < 2:
        raise CaseFailure("index maps tensors to %d file(s): %s" % (len(files), files))
    rep.note("sharded checkpoint: %s" % ", ".join(files))
    if os.path.exists(os.path.join(d, "model.safetensors")):
        rep.note("model.safetensors also present next to the index (reference uses the index)")
    return None


def feature_tied(ctx, rep, d, cfg, model, seed):
    if cfg.get("tie_word_embeddings") is not True:
        raise CaseFailure("config tie_word_embeddings = %r, expected true"
                          % (cfg.get("tie_word_embeddings"),))
    if "lm_head.weight" in model.weights:
        rep.note("checkpoint still stores lm_head.weight; as in HF it is ignored when tied")
    else:
        rep.note("no lm_head.weight in checkpoint: lm_head = embed_tokens")
    return None


def feature_head_dim(ctx, rep, d, cfg, model, seed):
    if model.head_dim == model.hidden_size // model.num_heads:
        rep.warn("head_dim %d == hidden/heads; the explicit head_dim path is not exercised"
                 % model.head_dim)
    else:
        rep.note("head_dim %d != hidden/heads %d" % (model.head_dim,
                                                     model.hidden_size // model.num_heads))
    if "model.layers.0.self_attn.q_norm.weight" not in model.weights:
        raise CaseFailure("qwen3 checkpoint has no q_norm weights")
    return None


def feature_qkv_bias(ctx, rep, d, cfg, model, seed):
    if "model.layers.0.self_attn.q_proj.bias" not in model.weights:
        raise CaseFailure("qwen2 checkpoint has no q_proj.bias")
    b = model.weights["model.layers.0.self_attn.q_proj.bias"]
    if not np.any(b):
        rep.warn("qwen2 q_proj.bias is all zeros; the bias path is not really exercised")
    return None


def case_blocks_matter(ctx, rep):
    """(b) The decoder blocks, not the residual stream, decide the output."""
    base = ctx.results.get("llama")
    if base is None:
        raise CaseFailure("the 'llama' case did not get far enough to build its model")
    model, prompt = base["model"], base["prompt"]
    seq = prompt + base["ref_greedy"]
    full = ref.forward(model, seq).argmax(-1)
    skipped = ref.forward(model, seq, skip_layers=True).argmax(-1)
    frac = float(np.mean(full != skipped))
    rep.check(frac >= 0.5, "argmax with all layers skipped differs at %.0f%% of %d positions "
              "(need >= 50%%)" % (100 * frac, len(seq)))
    for who, toks in (("reference", base["ref_greedy"]), ("engine", base["engine_tokens"])):
        if toks is None:
            rep.note("%s greedy output unavailable (its generate step failed)" % who)
            continue
        distinct = len(set(toks))
        rep.check(distinct > 1, "%s greedy output has %d distinct tokens: %s"
                  % (who, distinct, toks))


def _bf16_compare(ctx, rep, label, model_dir, model, prompt, dtype):
    """Score (and generate) with --dtype `dtype`, compare with loose bf16 tolerances."""
    mx_tol, mean_tol = ctx.args.bf16_max_tol, ctx.args.bf16_mean_tol
    ref_scores = ref.score(model, prompt)
    eng = ctx.engine.score(model_dir, prompt, dtype=dtype)
    dmax, dmean, at = score_diffs(eng, ref_scores)
    print("    %s score vs reference: max|diff| = %.4g (at position %d), mean|diff| = %.4g"
          % (label, dmax, at, dmean))
    rep.check(dmax <= mx_tol, "score max|diff| %.4g <= %g" % (dmax, mx_tol))
    rep.check(dmean <= mean_tol, "score mean|diff| %.4g <= %g" % (dmean, mean_tol))

    gen = ctx.engine.generate(model_dir, prompt, NEW_TOKENS, dtype=dtype)
    toks = [int(t) for t in gen["token_ids"]]
    lp = ref.log_softmax(ref.forward(model, list(prompt) + toks))
    P = len(prompt)
    ref_lp = np.array([lp[P + i - 1, t] for i, t in enumerate(toks)])
    argmax_agree = sum(1 for i, t in enumerate(toks) if int(np.argmax(lp[P + i - 1])) == t)
    gaps = [float(lp[P + i - 1].max() - lp[P + i - 1, t]) for i, t in enumerate(toks)]
    d = np.abs(np.array(gen["logprobs"], dtype=np.float64) - ref_lp)
    gmax = float(d.max()) if np.all(np.isfinite(d)) else float("inf")
    print("    %s generate: %d/%d tokens are the reference argmax (largest gap %.3g); "
          "logprobs max|diff| = %.4g" % (label, argmax_agree, len(toks), max(gaps), gmax))
    rep.check(gmax <= mx_tol, "generate logprobs max|diff| %.4g <= %g" % (gmax, mx_tol))
    rep.check(max(gaps) <= mx_tol, "every bf16 greedy token is within %g of the reference "
              "argmax log-prob (largest gap %.3g)" % (mx_tol, max(gaps)))


def _make_bf16_llama(ctx):
    """The bf16 llama checkpoint shared by the two bf16-storage cases."""
    if "bf16" in ctx.results:
        return ctx.results["bf16"]
    d = ctx.dir("llama_bf16")
    seed = 3001
    ctx.engine.make_tiny_model(d, ["--arch", "llama", "--seed", seed, "--dtype", "bf16"]
                               + SMALL_MODEL_ARGS)
    model = load_reference(d)
    dts = checkpoint_dtypes(model)
    if dts != ["BF16"]:
        raise CaseFailure("checkpoint made with --dtype bf16 stores %s" % dts)
    prompt = random_prompt(seed, PROMPT_LEN, model.vocab_size)
    ctx.results["bf16"] = {"dir": d, "model": model, "prompt": prompt}
    return ctx.results["bf16"]


def case_bf16(ctx, rep):
    """(c) bf16 checkpoint computed in bf16 vs exact-weights f64 reference."""
    b = _make_bf16_llama(ctx)
    _bf16_compare(ctx, rep, "bf16/bf16", b["dir"], b["model"], b["prompt"], "bf16")


def case_bf16_weights_f32_compute(ctx, rep):
    """bf16 checkpoint computed in f32 must match the reference tightly."""
    b = _make_bf16_llama(ctx)
    tol = ctx.args.tol
    ref_scores = ref.score(b["model"], b["prompt"])
    eng = ctx.engine.score(b["dir"], b["prompt"], dtype="f32")
    dmax, dmean, at = score_diffs(eng, ref_scores)
    rep.check(dmax <= tol, "score --dtype f32 on bf16 weights: max|diff| = %.3g at position %d, "
              "mean %.3g (tol %g)" % (dmax, at, dmean, tol))
    gen = ctx.engine.generate(b["dir"], b["prompt"], NEW_TOKENS, dtype="f32")
    compare_generation(rep, b["model"], b["prompt"], gen, tol, tie_tol=tol)


def case_f32_weights_bf16_compute(ctx, rep):
    """(d) f32 checkpoint with --dtype bf16 vs reference on bf16-rounded weights."""
    base = ctx.results.get("llama")
    if base is None:
        raise CaseFailure("the 'llama' case did not get far enough to build its model")
    rounded = load_reference(base["dir"], round_weights_to_bf16=True)
    _bf16_compare(ctx, rep, "f32->bf16", base["dir"], rounded, base["prompt"], "bf16")


CASES = [
    ("llama", arch_case("llama", "llama", 1001)),
    ("mistral", arch_case("mistral", "mistral", 1002, feature=feature_sliding_window)),
    ("qwen2", arch_case("qwen2", "qwen2", 1003, feature=feature_qkv_bias)),
    ("qwen3", arch_case("qwen3", "qwen3", 1004, extra=["--head-dim", "32"],
                        feature=feature_head_dim)),
    ("llama_rope_llama3", arch_case("llama_rope_llama3", "llama", 1005,
                                    extra=["--rope-scaling-llama3"],
                                    feature=feature_rope_llama3)),
    ("llama_shards2", arch_case("llama_shards2", "llama", 1006, extra=["--shards", "2"],
                                feature=feature_shards)),
    ("qwen3_tied", arch_case("qwen3_tied", "qwen3", 1007, extra=["--tie-embeddings"],
                             feature=feature_tied)),
    ("blocks_matter", case_blocks_matter),
    ("bf16", case_bf16),
    ("bf16_weights_f32_compute", case_bf16_weights_f32_compute),
    ("f32_weights_bf16_compute", case_f32_weights_bf16_compute),
]

# Cases that reuse another case's checkpoint; --only pulls these in automatically.
DEPENDS = {
    "blocks_matter": ["llama"],
    "f32_weights_bf16_compute": ["llama"],
}


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", help="path to the engine binary (e.g. build/shardlm)")
    ap.add_argument("--workdir", help="scratch directory for generated checkpoints")
    ap.add_argument("--only", default="", help="comma-separated case names to run")
    ap.add_argument("--list", action="store_true", help="list case names and exit")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per engine call")
    ap.add_argument("--tol", type=float, default=1e-4, help="f32 max abs tolerance")
    # bf16 tolerance. bf16 keeps 8 significant bits, so every rounding of an
    # activation (the residual stream, each projection's output, q/k after
    # rotary, the attention output) adds a relative error of up to 2^-9. The
    # tiny models' logits reach |20| and pass ~10 such roundings per layer, so
    # log-prob errors of 20 * 2^-9 * sqrt(20) ~ 0.17 are expected at the
    # extremes and ~1/4 of that on average. Hugging Face's own bf16 forward
    # shows errors of the same size against f64. Measured here: max 0.11,
    # mean 0.038 (see docs/numerics.md).
    ap.add_argument("--bf16-max-tol", type=float, default=0.25)
    ap.add_argument("--bf16-mean-tol", type=float, default=0.06)
    ap.add_argument("-v", "--verbose", action="store_true", help="print engine command lines")
    ap.add_argument("--device", default=None,
                    help="pass --device to every computing call (e.g. cuda on the GPU machine)")
    args = ap.parse_args(argv)

    names = [n for n, _ in CASES]
    if args.list:
        print("\n".join(names))
        return 0
    if not args.shardlm or not args.workdir:
        ap.error("--shardlm and --workdir are required")
    binary = os.path.abspath(args.shardlm)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print("check_engine: engine binary %s not found or not executable" % binary)
        return 2
    selected = [n for n in args.only.split(",") if n] or names
    unknown = [n for n in selected if n not in names]
    if unknown:
        print("check_engine: unknown case(s) %s; known: %s" % (unknown, ", ".join(names)))
        return 2
    selected = set(selected)
    for n in list(selected):
        selected.update(DEPENDS.get(n, []))
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)

    ctx = Context(Engine(binary, args.timeout, args.verbose, args.device), workdir, args)
    passed, failed, warned = [], [], []
    for name, fn in CASES:
        if name not in selected:
            continue
        print("== %s" % name)
        rep = Report()
        try:
            fn(ctx, rep)
        except CaseFailure as e:
            rep.fail(str(e))
        except Exception:
            rep.fail("internal error in the checker:\n" + traceback.format_exc())
        if rep.failures:
            print("FAIL %s" % name)
            failed.append(name)
        else:
            print("PASS %s" % name)
            passed.append(name)
        if rep.warnings:
            warned.append(name)

    print()
    if failed:
        print("failed cases: %s" % ", ".join(failed))
    if warned:
        print("cases with warnings (weak checks): %s" % ", ".join(warned))
    print("check_engine: %d passed, %d failed" % (len(passed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
