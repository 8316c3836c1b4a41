"""The engine against Hugging Face transformers, the reference of record.

Usage (with the project's virtual environment, which has transformers, torch and gguf):
    .venv/bin/python tests/reference/check_hf_transformers.py --shardlm build/shardlm \
        --workdir /tmp/hf-check --gguf third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf [--only smollm2_tp1]

Cases
-----
smollm2_tp1 ... smollm2_tp5:
    transformers loads the SmolLM2 GGUF itself (from_pretrained(..., gguf_file=...), which
    dequantizes through gguf-py into float32) and so does the engine (its own GGUF reader,
    f32). For each prompt (chat-formatted by transformers' apply_chat_template):
      - transformers' own greedy generate() of 64 tokens equals the engine's greedy
        `generate --json` tokens, except after a step where transformers' top two logits
        are within --tie-tol of each other (such a near-tie is reported; the case then
        compares only up to it);
      - the engine's per-token log-probability equals transformers' log_softmax at the
        same position (one teacher-forced forward pass over prompt + engine tokens),
        within --logprob-tol (absolute).
    tp2 to tp5 run the engine with that many tensor-parallel worker processes: SmolLM2's
    9 query heads over 3 KV heads split unevenly at tp 2, 4 and 5 (5/4, 3/2/2/2 and
    2/2/2/2/1, KV heads replicated where a group spans two ranks), and at tp5 the hidden
    size (576) and the vocabulary (49152) too.
smollm2_bf16, smollm2_bf16_tp2:
    the same prompts computed in bf16 (--dtype bf16, the blocks dequantized to bf16) against
    transformers in f32, within the bf16 bounds (BF16); on a GPU (--device cuda) the GPU's bf16
    path, two ranks on one GPU at tp 2.
smollm2_q4_1:
    --weights q4_1: on the CPU its kernels, on a GPU the blocks' own product
    (docs/gpu_quantized.md); the tied head's Q8_0 blocks requantized to Q4_1; within KEPT's
    smollm2_q4_1 bounds.
smollm2_kept:
    the same prompts with the file's Q4_1 blocks kept (--weights auto, activations rounded
    to int8 per block of 32): log-probs within --kept-logprob-tol of transformers', at least
    --kept-min-equal greedy tokens equal, and a first difference only where transformers'
    top two are within --kept-tie-tol (0.1 nats).
qwen_coder_tp1 ... qwen_coder_tp3, qwen_coder_kept (with --qwen-gguf):
    Qwen2.5-Coder-0.5B-Instruct's Q4_K_M file (Q4_K, Q6_K, Q5_0 and Q8_0 tensors; q/k/v
    biases; 14 query heads over 2 KV heads, an FFN of 4864 = 19 super-blocks, split on
    super-block bounds), loaded by transformers the same way: dequantized at tp 1 to 3 within
    the SmolLM2 bounds; kept in its blocks at tp 1 and 2 within the kept bounds.
gemma3_tp1 ... gemma3_tp3, gemma3_kept (with --gemma-gguf):
    Gemma 3 270M's Q4_K_M file (docs/gemma3.md: GeGLU, a scaled embedding, norms of each block's
    output, q/k norms, five sliding-window layers of 512 to one full, two RoPE bases; 4 query
    heads over 1 KV head, replicated at tp 2 and 3; a SentencePiece vocabulary of 262144), the
    raw prompts after BOS (a base model: no chat template): dequantized at tp 1 to 3 within the
    SmolLM2 bounds, kept in its blocks at tp 1 within the kept bounds.
tiny_llama3_rope, tiny_qwen2_bias, tiny_qwen3_qknorm, tiny_mistral_window:
    checkpoints written by transformers itself (save_pretrained of a randomly initialised
    LlamaForCausalLM with rope_scaling llama3, Qwen2 with q/k/v bias, Qwen3 with q/k norms
    and head_dim != hidden/heads, Mistral with a sliding window of 8 under a 24-token
    prompt), read by the engine as checkpoint directories; greedy tokens and log-probs as
    above (16 tokens, random prompt ids), at tp 1 to 5 (6 query heads over 2 KV heads, an
    FFN of 100 and a hidden size of 96: tp 4 and 5 split them unevenly).

--device cuda runs the engine on the GPU machine's GPU (transformers stays on the CPU, in f32),
ranks beyond one sharing it through host-staged collectives (scripts/gpu/test.sh, step
smollm2_transformers, where SmolLM2's file was carried). The engine's processes inherit the
environment: SHARDLM_CPU_ISA=avx2 (ctest's
integration.engine_vs_transformers_avx2) runs the same references on the AVX2 kernels.

The script shares no code with the engine: transformers' modeling code and gguf-py's
dequantization are the reference. Prints one line per check and
"hf_transformers: N passed, M failed"; exit 0 when every case passes.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import harness  # noqa: E402

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loading draws progress bars

import torch  # noqa: E402
import transformers  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List three facts about the Moon.",
    "Translate 'good morning' into Spanish and German.",
]
NEW_TOKENS = 64


class Reference:
    """transformers' model and tokenizer from one GGUF, loaded once."""

    def __init__(self, gguf):
        folder, name = os.path.split(os.path.abspath(gguf))
        t0 = time.time()
        self.tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                                       dtype=torch.float32)
        self.model.eval()
        self._greedy = {}  # prompt ids -> greedy tokens, shared by the tp cases
        print("transformers %s, torch %s: loaded %s in %.1f s" %
              (transformers.__version__, torch.__version__, name, time.time() - t0))

    def prompt_ids(self, text):
        if self.tok.chat_template is None:  # a base model (Gemma 3 270M): the text itself, after BOS
            return self.tok(text)["input_ids"]
        rendered = self.tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                add_generation_prompt=True)
        return self.tok(rendered, add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def greedy(self, ids):
        key = tuple(ids)
        if key not in self._greedy:
            self._greedy[key] = self._generate(ids)
        return self._greedy[key]

    def _generate(self, ids):
        # An explicit mask: the prompt holds <|im_end|>, which is also the pad token, and
        # generate() would otherwise infer a mask that hides it.
        x = torch.tensor([ids])
        out = self.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS,
                                  do_sample=False, eos_token_id=None, pad_token_id=self.tok.eos_token_id)
        return out[0, len(ids):].tolist()

    @torch.no_grad()
    def logprobs(self, ids, new):
        """f32[len(new), vocab] log-probabilities of each position that predicts new[i]."""
        logits = self.model(torch.tensor([ids + new])).logits[0].float()
        return torch.log_softmax(logits[len(ids) - 1:len(ids) + len(new) - 1], dim=-1)


class Bounds:
    def __init__(self, logprob, tie, min_equal=0):
        self.logprob, self.tie, self.min_equal = logprob, tie, min_equal


def engine_run(ctx, model, ids, n, tp, weights="dense", dtype="f32"):
    # --weights dense: the file's blocks dequantized to f32, as transformers (through gguf-py)
    # does; auto: the blocks kept (judged with the kept bounds).
    cmd = [ctx.binary, "generate", "--model", model, "--prompt-ids", harness.ids_arg(ids),
           "--max-new-tokens", str(n), "--temperature", "0", "--ignore-eos", "--dtype", dtype,
           "--weights", weights, "--json", "--warmup-tokens", "0", "--device", ctx.args.device]
    if tp > 1:
        cmd += ["--tp", str(tp)]
        if ctx.args.device != "cpu":  # several ranks on one GPU: host-staged collectives
            cmd += ["--collectives", "host"]
    proc, _ = harness.run_engine(cmd, timeout=600)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    if proc.returncode != 0:
        raise harness.Failure("generate exited %d: %s" % (proc.returncode, harness.tail(err)))
    return harness.last_json_object(out)


def dense_bounds(ctx):
    return Bounds(ctx.args.logprob_tol, ctx.args.tie_tol)


# SmolLM2 computed in bf16 (its blocks dequantized to bf16) against transformers in f32, about
# 1.5x what was measured on the CPU (2026-11-30, the four prompts): worst |log-prob diff| 0.169;
# first differences at tokens 19, 55 and 1 where transformers' top two were 0.158, 0.178 and 0.009
# apart. The same as docs/numerics.md's bf16 bound for the tiny models (max 0.25).
BF16 = Bounds(0.25, 0.27, 0)


def bf16_bounds(ctx):
    a = ctx.args
    return Bounds(a.bf16_logprob_tol or BF16.logprob, a.bf16_tie_tol or BF16.tie,
                  BF16.min_equal if a.bf16_min_equal is None else a.bf16_min_equal)


# Blocks kept, about 1.5x what was measured (2026-11-29, the four prompts). Qwen2.5-Coder-0.5B's
# Q4_K_M: worst |log-prob diff| 0.086 on AVX-512 and 0.131 with SHARDLM_CPU_ISA=avx2, one
# difference, at token 12 where transformers' top two were 0.010 apart. (The quantized products
# give the same bits on both; attention adds in another order, ~1e-6 relative, and where that
# moves an activation across an int8 rounding boundary the kept model's log-probs move by up to
# 0.1: the two sets' kept log-probs differ by a median 0.006 on 48 tokens, dense ones by 4e-6.)
# SmolLM2's Q4_1 (4 bits and a 135M model: the int8 activations move its log-probs by up to 0.41)
# differs at tokens 0, 3, 20 and 23 of the four prompts, where the top two were 0.08 to 0.63 apart:
# a 0.1-nat tie cannot hold there, the 0.95 bound is the measured noise, and it is the
# kept-against-dense bounds of tests/integration/quantized_test.py that hold this file tighter.
# Gemma 3 270M's Q4_K_M: worst 0.25; differences at token 7 of two prompts, where the top two were
# 0.036 and 0.002 apart.
# SmolLM2 with --weights q4_1 (its tied head, Q8_0 in the file, requantized to Q4_1; on the CPU the
# activations rounded to int8 too): worst 0.612, first differences where the top two were 0.03 to
# 0.62 apart (2026-11-30, CPU); on a GPU the same blocks with activations in f32.
KEPT = {"smollm2": Bounds(0.6, 0.95, 0), "smollm2_q4_1": Bounds(0.92, 0.95, 0), "qwen_coder": Bounds(0.2, 0.1, 8),
        "gemma3": Bounds(0.38, 0.1, 4)}


def kept_bounds(ctx, model):
    b = KEPT[model]
    a = ctx.args
    return Bounds(a.kept_logprob_tol or b.logprob, a.kept_tie_tol or b.tie,
                  b.min_equal if a.kept_min_equal is None else a.kept_min_equal)


def compare_tokens(ctx, c, what, got, want, lp, engine_logprobs, n_want, bounds=None):
    """Checks the engine's greedy tokens `got` against the reference's `want` and the engine's
    log-probs against lp (f32[len(got), vocab], the reference's log-softmax given the engine's
    prefix). Returns the largest |log-prob difference|."""
    b = bounds or dense_bounds(ctx)
    n = len(got)
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            top2 = torch.topk(lp[i], 2).values
            gap = float(top2[0] - top2[1])
            c.note("%s: token %d differs (engine %d, transformers %d); transformers' top-2 gap %.2e" %
                   (what, i, g, w, gap))
            c.check(gap <= b.tie and float(lp[i][g]) >= float(top2[1]) - 1e-6,
                    "%s: the difference at token %d is a near-tie (gap %.2e <= %.0e)" % (what, i, gap, b.tie))
            c.check(i >= b.min_equal, "%s: %d greedy tokens equal (at least %d)" % (what, i, b.min_equal))
            n = i + 1
            break
    c.check(len(got) == n_want, "%s: %d tokens" % (what, len(got)))
    diffs = [abs(float(lp[i][got[i]]) - engine_logprobs[i]) for i in range(n)]
    c.check(max(diffs) <= b.logprob,
            "%s: %d tokens equal, max |logprob diff| %.2e <= %.0e" % (what, n, max(diffs), b.logprob))
    return max(diffs)


def compare(ctx, tp, c, gguf=None, weights="dense", model="smollm2", dtype="f32"):
    gguf = gguf or ctx.args.gguf
    ref = ctx.reference(gguf)
    if dtype == "bf16":
        bounds = bf16_bounds(ctx)
    else:
        bounds = dense_bounds(ctx) if weights == "dense" else kept_bounds(ctx, model)
    worst = 0.0
    for text in PROMPTS:
        ids = ref.prompt_ids(text)
        out = engine_run(ctx, gguf, ids, NEW_TOKENS, tp, weights, dtype)
        got = out["token_ids"]
        want = ref.greedy(ids)
        lp = ref.logprobs(ids, got)
        worst = max(worst, compare_tokens(ctx, c, repr(text[:24]), got, want, lp, out["logprobs"], NEW_TOKENS,
                                          bounds))
    c.note("tp %d, --weights %s, --dtype %s: worst |logprob diff| over all prompts %.2e" % (tp, weights, dtype, worst))
    print("    sample (tp %d): %r" % (tp, ref.tok.decode(got[:24])))


def file_case(tp, weights, model):
    """A case on the file of --qwen-gguf or --gemma-gguf (`model`: qwen_coder or gemma3)."""
    def run(ctx, c):
        gguf = ctx.args.qwen_gguf if model == "qwen_coder" else ctx.args.gemma_gguf
        if not gguf:
            raise harness.Failure("needs --%s-gguf" % ("qwen" if model == "qwen_coder" else "gemma"))
        compare(ctx, tp, c, gguf, weights, model)
    return run


# 6 query heads over 2 KV heads, an FFN of 100, hidden 96: tp 4 and 5 split them unevenly.
TINY = dict(vocab_size=480, hidden_size=96, intermediate_size=100, num_hidden_layers=2,
            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256,
            initializer_range=0.2, tie_word_embeddings=False)


def tiny_config(kind):
    if kind == "llama3_rope":
        return transformers.LlamaConfig(**TINY, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32, "rope_theta": 10000.0})
    if kind == "qwen2_bias":
        return transformers.Qwen2Config(**TINY)
    if kind == "qwen3_qknorm":
        return transformers.Qwen3Config(**dict(TINY, head_dim=24))
    if kind == "mistral_window":
        return transformers.MistralConfig(**TINY, sliding_window=8)
    raise ValueError(kind)


def tiny_case(kind, ctx, c):
    folder = ctx.dir("tiny_" + kind)
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(kind), dtype=torch.float32).eval()
    model.save_pretrained(folder)
    c.note("%s written by transformers: %s" % (type(model).__name__, ", ".join(sorted(os.listdir(folder)))))
    ids = [int(x) for x in torch.randint(3, 470, (24,), generator=torch.Generator().manual_seed(7))]
    n = 16
    with torch.no_grad():
        x = torch.tensor([ids])
        want = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    for tp in (1, 2, 3, 4, 5):
        out = engine_run(ctx, folder, ids, n, tp)
        got = out["token_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids + got])).logits[0].float()
        lp = torch.log_softmax(logits[len(ids) - 1:len(ids) + n - 1], dim=-1)
        compare_tokens(ctx, c, "%s tp %d" % (kind, tp), got, want, lp, out["logprobs"], n)


class Ctx(harness.Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary
        self._refs = {}

    def reference(self, gguf):
        # One model in memory at a time: the cases of one file run one after another.
        if gguf not in self._refs:
            self._refs = {gguf: Reference(gguf)}
        return self._refs[gguf]


CASES = [
    ("smollm2_tp1", lambda ctx, c: compare(ctx, 1, c)),
    ("smollm2_tp2", lambda ctx, c: compare(ctx, 2, c)),
    ("smollm2_tp3", lambda ctx, c: compare(ctx, 3, c)),
    ("smollm2_tp4", lambda ctx, c: compare(ctx, 4, c)),
    ("smollm2_tp5", lambda ctx, c: compare(ctx, 5, c)),
    ("smollm2_kept", lambda ctx, c: compare(ctx, 1, c, weights="auto")),
    ("smollm2_bf16", lambda ctx, c: compare(ctx, 1, c, dtype="bf16")),
    ("smollm2_bf16_tp2", lambda ctx, c: compare(ctx, 2, c, dtype="bf16")),
    # --weights q4_1: on a GPU the blocks' own product (docs/gpu_quantized.md), the tied head's Q8_0
    # requantized to Q4_1; judged with the kept bounds.
    ("smollm2_q4_1", lambda ctx, c: compare(ctx, 1, c, weights="q4_1", model="smollm2_q4_1")),
    ("qwen_coder_tp1", file_case(1, "dense", "qwen_coder")),
    ("qwen_coder_tp2", file_case(2, "dense", "qwen_coder")),
    ("qwen_coder_tp3", file_case(3, "dense", "qwen_coder")),
    ("qwen_coder_kept", file_case(1, "auto", "qwen_coder")),
    ("qwen_coder_kept_tp2", file_case(2, "auto", "qwen_coder")),
    ("gemma3_tp1", file_case(1, "dense", "gemma3")),
    ("gemma3_tp2", file_case(2, "dense", "gemma3")),
    ("gemma3_tp3", file_case(3, "dense", "gemma3")),
    ("gemma3_kept", file_case(1, "auto", "gemma3")),
] + [("tiny_" + k, (lambda k: lambda ctx, c: tiny_case(k, ctx, c))(k))
     for k in ("llama3_rope", "qwen2_bias", "qwen3_qknorm", "mistral_window")]


def main():
    isa = os.environ.get("SHARDLM_CPU_ISA")
    if isa:
        # A cap above the CPU's own set would run its best kernels instead: not this run's point.
        missing = sorted(harness.ISA_FLAGS.get(isa, set()) - harness.cpu_flags())
        if missing:
            print("SKIP: SHARDLM_CPU_ISA=%s, but this CPU lacks %s" % (isa, ", ".join(missing)))
            return 77
        print("note  the engine's CPU kernels capped at SHARDLM_CPU_ISA=%s" % isa)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--logprob-tol", type=float, default=5e-4)
    ap.add_argument("--tie-tol", type=float, default=1e-3)
    ap.add_argument("--qwen-gguf", default="")
    ap.add_argument("--gemma-gguf", default="")
    # Override the kept cases' bounds (KEPT) to measure.
    ap.add_argument("--kept-logprob-tol", type=float, default=0.0)
    ap.add_argument("--kept-tie-tol", type=float, default=0.0)
    ap.add_argument("--kept-min-equal", type=int, default=None)
    ap.add_argument("--bf16-logprob-tol", type=float, default=0.0)
    ap.add_argument("--bf16-tie-tol", type=float, default=0.0)
    ap.add_argument("--bf16-min-equal", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="the engine's device (the GPU machine: cuda)")
    args = ap.parse_args()
    parsed = harness.parse_case_args(args, [n for n, _ in CASES])
    if parsed is None:
        return 2
    binary, workdir, only = parsed
    if not os.path.isfile(args.gguf):
        print("model not found: %s (scripts/setup.sh fetches it)" % args.gguf, file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    return harness.run_cases(CASES, only, Ctx(workdir, args, binary), "hf_transformers")


if __name__ == "__main__":
    sys.exit(main())
