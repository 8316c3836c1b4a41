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
tiny_llama3_rope, tiny_qwen2_bias, tiny_qwen3_qknorm, tiny_mistral_window:
    checkpoints written by transformers itself (save_pretrained of a randomly initialised
    LlamaForCausalLM with rope_scaling llama3, Qwen2 with q/k/v bias, Qwen3 with q/k norms
    and head_dim != hidden/heads, Mistral with a sliding window of 8 under a 24-token
    prompt), read by the engine as checkpoint directories; greedy tokens and log-probs as
    above (16 tokens, random prompt ids), at tp 1 to 5 (6 query heads over 2 KV heads, an
    FFN of 100 and a hidden size of 96: tp 4 and 5 split them unevenly).

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
    """transformers' model and tokenizer from the GGUF, loaded once."""

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


def engine_generate(ctx, ids, tp):
    return engine_run(ctx, ctx.args.gguf, ids, NEW_TOKENS, tp)


def engine_run(ctx, model, ids, n, tp):
    # --weights dense: the file's blocks dequantized to f32, as transformers (through gguf-py)
    # does. The blocks kept quantized are judged against this very run by
    # tests/integration/quantized_test.py.
    cmd = [ctx.binary, "generate", "--model", model, "--prompt-ids", harness.ids_arg(ids),
           "--max-new-tokens", str(n), "--temperature", "0", "--ignore-eos", "--dtype", "f32",
           "--weights", "dense", "--json", "--warmup-tokens", "0"]
    if tp > 1:
        cmd += ["--tp", str(tp)]
    proc, _ = harness.run_engine(cmd, timeout=600)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    if proc.returncode != 0:
        raise harness.Failure("generate exited %d: %s" % (proc.returncode, harness.tail(err)))
    return harness.last_json_object(out)


def compare_tokens(ctx, c, what, got, want, lp, engine_logprobs, n_want):
    """Checks the engine's greedy tokens `got` against the reference's `want` and the engine's
    log-probs against lp (f32[len(got), vocab], the reference's log-softmax given the engine's
    prefix). Returns the largest |log-prob difference|."""
    n = len(got)
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            top2 = torch.topk(lp[i], 2).values
            gap = float(top2[0] - top2[1])
            c.note("%s: token %d differs (engine %d, transformers %d); transformers' top-2 gap %.2e" %
                   (what, i, g, w, gap))
            c.check(gap <= ctx.args.tie_tol and float(lp[i][g]) >= float(top2[1]) - 1e-6,
                    "%s: the difference at token %d is a near-tie (gap %.2e <= %.0e)" %
                    (what, i, gap, ctx.args.tie_tol))
            n = i + 1
            break
    c.check(len(got) == n_want, "%s: %d tokens" % (what, len(got)))
    diffs = [abs(float(lp[i][got[i]]) - engine_logprobs[i]) for i in range(n)]
    c.check(max(diffs) <= ctx.args.logprob_tol,
            "%s: %d tokens equal, max |logprob diff| %.2e <= %.0e" % (what, n, max(diffs), ctx.args.logprob_tol))
    return max(diffs)


def compare(ctx, tp, c):
    ref = ctx.reference()
    worst = 0.0
    for text in PROMPTS:
        ids = ref.prompt_ids(text)
        out = engine_generate(ctx, ids, tp)
        got = out["token_ids"]
        want = ref.greedy(ids)
        lp = ref.logprobs(ids, got)
        worst = max(worst, compare_tokens(ctx, c, repr(text[:24]), got, want, lp, out["logprobs"], NEW_TOKENS))
    c.note("tp %d: worst |logprob diff| over all prompts %.2e" % (tp, worst))
    print("    sample (tp %d): %r" % (tp, ref.tok.decode(got[:24])))


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
        self._ref = None

    def reference(self):
        if self._ref is None:
            self._ref = Reference(self.args.gguf)
        return self._ref


CASES = [
    ("smollm2_tp1", lambda ctx, c: compare(ctx, 1, c)),
    ("smollm2_tp2", lambda ctx, c: compare(ctx, 2, c)),
    ("smollm2_tp3", lambda ctx, c: compare(ctx, 3, c)),
    ("smollm2_tp4", lambda ctx, c: compare(ctx, 4, c)),
    ("smollm2_tp5", lambda ctx, c: compare(ctx, 5, c)),
] + [("tiny_" + k, (lambda k: lambda ctx, c: tiny_case(k, ctx, c))(k))
     for k in ("llama3_rope", "qwen2_bias", "qwen3_qknorm", "mistral_window")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--logprob-tol", type=float, default=5e-4)
    ap.add_argument("--tie-tol", type=float, default=1e-3)
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
