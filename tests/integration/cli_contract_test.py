#!/usr/bin/env python3
"""End-to-end contract test of the `shardlm` command line.

Every case runs the real binary in subprocesses (60 s timeout each) on tiny
random checkpoints that `shardlm make-tiny-model` writes into --workdir.
What is checked:

  1. make-tiny-model writes a complete Hugging Face checkpoint (config.json,
     model.safetensors, generation_config.json, tokenizer.json,
     tokenizer_config.json) whose config and tensor shapes match the flags.
  2. generate --json prints exactly one object with the documented keys and
     types; --ignore-eos yields max_new_tokens tokens, finish_reason "length",
     logprobs <= 0; prompt_token_ids agree with `tokenize`.
  3. Greedy decoding is deterministic; a fixed --seed reproduces sampling and
     different seeds give different samples; top-k 1 / tiny top-p / min-p 1
     reduce sampling to greedy.
  4. Streaming (text) mode prints the same text as the JSON "text", plus "\\n".
  5. score --json: {"token_ids", "scores"} with scores[0] null and the others
     log p(token_i | prefix), equal to generate's logprobs for the same tokens.
  6. --top-logprobs N: N distinct alternatives per token, sorted descending;
     under greedy the first one is the chosen token with the same logprob.
  7. --stop-token-ids: generation stops at (and includes) a stop token.
  8. tokenize: one {"ids"} line per {"text"} line, no special tokens.
  9. Bad flags and values exit 2 with a stderr message naming the flag and the
     allowed range; a missing --model directory fails with its path. --device:
     a bad value exits 2 naming the choices; cuda without a GPU (or in the CPU
     build) fails before loading, saying why; cpu generates.
 10. The context length is enforced at its exact boundary.
 11. A --no-tokenizer checkpoint works with --prompt-ids; --prompt exits 2.
 12. bf16 checkpoints load and decode deterministically (auto, f32, bf16).
 13. Repetition / frequency / presence penalties act as defined.
 14. `shardlm COMMAND --help` prints the command's flags and has no side
     effects (in particular make-tiny-model writes no model).

Usage:
  /usr/bin/python3 tests/integration/cli_contract_test.py \\
      --shardlm build/shardlm --workdir DIR
Exit status 0 when every case passes, 1 otherwise.
"""

import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from harness import Failure, run_binary  # noqa: E402

TIMEOUT_S = 60
SIZE_FLAGS = ["--hidden-size", "64", "--num-layers", "2", "--num-heads", "4",
              "--num-kv-heads", "2", "--intermediate-size", "128"]
GENERATE_KEYS = {"prompt_token_ids", "token_ids", "logprobs", "text", "finish_reason"}
CHECKPOINT_FILES = {"config.json", "model.safetensors", "generation_config.json",
                    "tokenizer.json", "tokenizer_config.json"}
# Real Llama-3 / Qwen3 ids of "Hello" and " world" ("Hello world" = both).
KNOWN_IDS = {"llama": ([9906], [1917]), "qwen3": ([9707], [1879])}


def check(cond, msg):
    """A contract violation is a Failure whose message says what was expected and seen."""
    if not cond:
        raise Failure(msg)


class Result:
    def __init__(self, argv, proc):
        self.argv = argv
        self.rc = proc.returncode
        self.out_bytes = proc.stdout
        self.out = proc.stdout.decode("utf-8", errors="replace")
        self.err = proc.stderr.decode("utf-8", errors="replace")

    def describe(self):
        return "`%s` -> rc=%d, stdout=%r, stderr=%r" % (
            " ".join(self.argv), self.rc, self.out[:300], self.err[:300])


class Cli:
    """Runs the binary and builds (once) the tiny checkpoints the cases use."""

    # name -> make-tiny-model flags after the output directory.
    MODELS = {
        "llama": ["--arch", "llama"] + SIZE_FLAGS,  # default tokenizer: llama3
        "qwen3": ["--arch", "qwen3", "--tokenizer", "qwen3"] + SIZE_FLAGS,
        "notok": ["--arch", "llama", "--no-tokenizer", "--vocab-size", "512"] + SIZE_FLAGS,
        "short": ["--arch", "llama", "--no-tokenizer", "--vocab-size", "512",
                  "--max-position-embeddings", "64"] + SIZE_FLAGS,
        "bf16": ["--arch", "llama", "--dtype", "bf16"] + SIZE_FLAGS,
    }

    def __init__(self, binary, workdir):
        self.binary = os.path.abspath(binary)
        self.workdir = os.path.abspath(workdir)
        self.models_dir = os.path.join(self.workdir, "cli_contract_models")
        shutil.rmtree(self.models_dir, ignore_errors=True)
        os.makedirs(self.models_dir)
        self._built = {}

    def run(self, *args, stdin=None, cwd=None, env=None):
        argv = [self.binary] + [str(a) for a in args]
        # Run once: a crash (death by signal) is an answer, judged by the caller.
        proc, _ = run_binary(argv, TIMEOUT_S,
                            input=stdin.encode() if stdin is not None else None,
                            stdin=None if stdin is not None else subprocess.DEVNULL, cwd=cwd,
                            env=dict(os.environ, **env) if env else None)
        return Result(argv, proc)

    def ok(self, *args, stdin=None):
        r = self.run(*args, stdin=stdin)
        check(r.rc == 0, "expected exit 0: " + r.describe())
        return r

    def json(self, *args):
        """Runs a --json command; stdout must be exactly one JSON object."""
        r = self.ok(*args)
        lines = r.out.splitlines()
        check(len(lines) == 1, "expected one JSON line on stdout: " + r.describe())
        try:
            obj = json.loads(lines[0])
        except ValueError as e:
            raise Failure("stdout is not JSON (%s): %s" % (e, r.describe()))
        check(isinstance(obj, dict), "expected a JSON object: " + r.describe())
        return obj

    def model(self, name):
        if name not in self._built:
            path = os.path.join(self.models_dir, name)
            self.ok("make-tiny-model", path, *self.MODELS[name])
            self._built[name] = path
        return self._built[name]

    def generate(self, model, *args):
        return self.json("generate", "--model", self.model(model), "--json", *args)

    def greedy(self, model, prompt_args, n, *extra):
        return self.generate(model, *prompt_args, "--max-new-tokens", n,
                             "--temperature", 0, "--ignore-eos", *extra)

    def score(self, model, ids):
        return self.json("score", "--model", self.model(model), "--json",
                         "--prompt-ids", ",".join(map(str, ids)))

    def tokenize(self, model, texts):
        stdin = "".join(json.dumps({"text": t}) + "\n" for t in texts)
        r = self.ok("tokenize", "--model", self.model(model), stdin=stdin)
        lines = r.out.splitlines()
        check(len(lines) == len(texts),
              "tokenize: %d input lines, %d output lines: %s" % (len(texts), len(lines), r.describe()))
        out = [json.loads(line) for line in lines]
        for o in out:
            check(set(o) == {"ids"} and is_int_list(o["ids"]), "tokenize: bad line %r" % o)
        return [o["ids"] for o in out]

    def config(self, name):
        with open(os.path.join(self.model(name), "config.json")) as f:
            return json.load(f)


# ----------------------------------------------------------------- helpers

def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def is_int_list(xs):
    return isinstance(xs, list) and all(is_int(x) for x in xs)


def is_logprob(x):
    return isinstance(x, float) and math.isfinite(x) and x <= 0.0


def repeats(ids):
    return len(ids) - len(set(ids))


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return n, header


def tokenizer_vocab_size(path):
    with open(path) as f:
        tok = json.load(f)
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1


def check_generate_object(obj, vocab, n_new, what):
    """The shape every `generate --json` object must have."""
    check(set(obj) - {"top_logprobs"} == GENERATE_KEYS,
          "%s: keys %s, expected %s" % (what, sorted(obj), sorted(GENERATE_KEYS)))
    check(is_int_list(obj["prompt_token_ids"]) and obj["prompt_token_ids"],
          "%s: prompt_token_ids must be a non-empty int list: %r" % (what, obj["prompt_token_ids"]))
    check(is_int_list(obj["token_ids"]), "%s: token_ids must be ints: %r" % (what, obj["token_ids"]))
    check(isinstance(obj["logprobs"], list) and all(is_logprob(x) for x in obj["logprobs"]),
          "%s: logprobs must be finite floats <= 0: %r" % (what, obj["logprobs"]))
    check(len(obj["logprobs"]) == len(obj["token_ids"]),
          "%s: %d logprobs for %d tokens" % (what, len(obj["logprobs"]), len(obj["token_ids"])))
    check(isinstance(obj["text"], str), "%s: text must be a string: %r" % (what, obj["text"]))
    check(obj["finish_reason"] in ("length", "stop"), "%s: finish_reason %r" % (what, obj["finish_reason"]))
    check(all(0 <= t < vocab for t in obj["token_ids"]),
          "%s: token id outside [0, %d): %r" % (what, vocab, obj["token_ids"]))
    if n_new is not None:
        check(len(obj["token_ids"]) == n_new and obj["finish_reason"] == "length",
              "%s: with --ignore-eos expected %d tokens and finish_reason 'length', got %d and %r"
              % (what, n_new, len(obj["token_ids"]), obj["finish_reason"]))


HELLO = ["--prompt", "Hello world"]


# ------------------------------------------------------------------- cases

def case_make_tiny_model_writes_checkpoint(cli):
    for name, arch, model_type in (("llama", "llama", "llama"), ("qwen3", "qwen3", "qwen3")):
        path = cli.model(name)
        files = set(os.listdir(path))
        check(CHECKPOINT_FILES <= files, "%s: missing %s" % (name, sorted(CHECKPOINT_FILES - files)))
        cfg = cli.config(name)
        expect = {"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}
        for key, value in expect.items():
            check(cfg.get(key) == value, "%s config.json: %s = %r, expected %r" % (name, key, cfg.get(key), value))
        # Llama-3's vocabulary is exactly its tokenizer's; Qwen3 pads it (151669 -> 151936) like HF.
        tok_vocab = tokenizer_vocab_size(os.path.join(path, "tokenizer.json"))
        vocab = cfg["vocab_size"]
        check(vocab == tok_vocab if arch == "llama" else tok_vocab <= vocab < tok_vocab + 1024,
              "%s: config vocab_size %r does not fit tokenizer size %d" % (name, vocab, tok_vocab))
        with open(os.path.join(path, "generation_config.json")) as f:
            gen = json.load(f)
        eos = gen["eos_token_id"] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"]]
        check(eos and all(is_int(e) and 0 <= e < vocab for e in eos), "%s: bad eos ids %r" % (name, eos))
        with open(os.path.join(path, "tokenizer_config.json")) as f:
            check(isinstance(json.load(f), dict), "%s: tokenizer_config.json is not an object" % name)

        st = os.path.join(path, "model.safetensors")
        n, header = safetensors_header(st)
        embed = header.get("model.embed_tokens.weight")
        check(embed is not None and embed["shape"] == [vocab, 64] and embed["dtype"] == "F32",
              "%s: embed_tokens is %r, expected F32 [%d, 64]" % (name, embed, vocab))
        layers = {int(m.group(1)) for k in header for m in [re.match(r"model\.layers\.(\d+)\.", k)] if m}
        check(layers == {0, 1}, "%s: layers in safetensors %s, expected {0, 1}" % (name, sorted(layers)))
        has_qk_norm = "model.layers.0.self_attn.q_norm.weight" in header
        check(has_qk_norm == (arch == "qwen3"), "%s: q_norm present=%s" % (name, has_qk_norm))
        data_end = max(t["data_offsets"][1] for t in header.values())
        check(os.path.getsize(st) == 8 + n + data_end,
              "%s: safetensors size %d != 8 + %d + %d" % (name, os.path.getsize(st), n, data_end))


def case_generate_json_contract(cli):
    for name in ("llama", "qwen3"):
        vocab = cli.config(name)["vocab_size"]
        obj = cli.greedy(name, HELLO, 8)
        check("top_logprobs" not in obj, "%s: top_logprobs present without --top-logprobs" % name)
        check_generate_object(obj, vocab, 8, name)
        check(obj["text"] != "", "%s: empty text for 8 generated tokens" % name)
        hello, world = KNOWN_IDS[name]
        [tokenized] = cli.tokenize(name, ["Hello world"])
        check(tokenized == hello + world, "%s: tokenize('Hello world') = %r, expected %r"
              % (name, tokenized, hello + world))
        check(obj["prompt_token_ids"] == tokenized,
              "%s: generate prompt_token_ids %r != tokenize %r" % (name, obj["prompt_token_ids"], tokenized))
    zero = cli.greedy("llama", HELLO, 0)
    check(zero["token_ids"] == [] and zero["logprobs"] == [] and zero["text"] == ""
          and zero["finish_reason"] == "length", "--max-new-tokens 0: got %r" % zero)


def case_greedy_is_deterministic(cli):
    a = cli.greedy("llama", HELLO, 12)
    b = cli.greedy("llama", HELLO, 12)
    check(a["token_ids"] == b["token_ids"], "greedy runs differ: %r vs %r" % (a["token_ids"], b["token_ids"]))
    check(a["logprobs"] == b["logprobs"], "greedy logprobs differ: %r vs %r" % (a["logprobs"], b["logprobs"]))


def case_seeded_sampling(cli):
    vocab = cli.config("llama")["vocab_size"]

    def sample(seed):
        obj = cli.generate("llama", *HELLO, "--max-new-tokens", 16, "--temperature", 1.0,
                           "--seed", seed, "--ignore-eos")
        check_generate_object(obj, vocab, 16, "seed %d" % seed)
        return obj["token_ids"]

    s1, s1_again, s2 = sample(1), sample(1), sample(2)
    check(s1 == s1_again, "--seed 1 twice gave %r and %r" % (s1, s1_again))
    check(s1 != s2, "--seed 1 and --seed 2 gave the same 16 tokens %r" % s1)
    greedy = cli.greedy("llama", HELLO, 12)["token_ids"]
    for flags in (["--top-k", 1], ["--top-p", 1e-6], ["--min-p", 1]):
        got = cli.generate("llama", *HELLO, "--max-new-tokens", 12, "--temperature", 1.0,
                           "--seed", 5, "--ignore-eos", *flags)["token_ids"]
        check(got == greedy, "%s at temperature 1 should equal greedy %r, got %r" % (flags, greedy, got))


def case_streaming_text_matches_json(cli):
    for name in ("llama", "qwen3"):
        args = ["generate", "--model", cli.model(name), *HELLO, "--max-new-tokens", 24,
                "--temperature", 0, "--ignore-eos"]
        text = cli.json(*args, "--json")["text"]
        streamed = cli.ok(*args).out_bytes
        check(streamed == (text + "\n").encode("utf-8"),
              "%s: streamed %r, JSON text + newline %r" % (name, streamed, (text + "\n").encode("utf-8")))


def case_score_contract_and_consistency(cli):
    r = cli.json("score", "--model", cli.model("llama"), *HELLO, "--json")
    check(set(r) == {"token_ids", "scores"}, "score keys %s" % sorted(r))
    check(r["token_ids"] == KNOWN_IDS["llama"][0] + KNOWN_IDS["llama"][1],
          "score token_ids %r, expected the tokenize ids" % r["token_ids"])
    check(len(r["scores"]) == len(r["token_ids"]) and r["scores"][0] is None
          and all(is_logprob(s) for s in r["scores"][1:]),
          "scores must be [null, logprob...] of len(token_ids): %r" % r["scores"])

    sampled = ["--temperature", 1.0, "--seed", 7]
    for label, extra in (("greedy", ["--temperature", 0]), ("sampled T=1", sampled)):
        g = cli.generate("llama", *HELLO, "--max-new-tokens", 10, "--ignore-eos", *extra)
        full = g["prompt_token_ids"] + g["token_ids"]
        s = cli.score("llama", full)
        check(s["token_ids"] == full, "score echoed %r for %r" % (s["token_ids"], full))
        tail = s["scores"][len(g["prompt_token_ids"]):]
        diffs = [abs(a - b) for a, b in zip(tail, g["logprobs"])]
        check(len(tail) == len(g["logprobs"]) and max(diffs) <= 1e-4,
              "%s: score of prompt+generated %r != generate logprobs %r (max diff %g)"
              % (label, tail, g["logprobs"], max(diffs)))


def case_top_logprobs(cli):
    for label, extra in (("greedy", ["--temperature", 0]), ("sampled", ["--temperature", 1.0, "--seed", 3])):
        obj = cli.generate("llama", *HELLO, "--max-new-tokens", 6, "--ignore-eos", "--top-logprobs", 3, *extra)
        top = obj.get("top_logprobs")
        check(isinstance(top, list) and len(top) == len(obj["token_ids"]),
              "%s: top_logprobs must have one entry per token: %r" % (label, top))
        for i, alts in enumerate(top):
            check(isinstance(alts, list) and len(alts) == 3, "%s: entry %d has %r" % (label, i, alts))
            check(all(set(a) == {"id", "logprob"} and is_int(a["id"]) and is_logprob(a["logprob"]) for a in alts),
                  "%s: entry %d malformed: %r" % (label, i, alts))
            lps = [a["logprob"] for a in alts]
            check(lps == sorted(lps, reverse=True), "%s: entry %d not sorted descending: %r" % (label, i, lps))
            check(len({a["id"] for a in alts}) == 3, "%s: entry %d repeats an id: %r" % (label, i, alts))
            check(sum(math.exp(x) for x in lps) <= 1 + 1e-5, "%s: entry %d probabilities sum > 1" % (label, i))
            chosen, chosen_lp = obj["token_ids"][i], obj["logprobs"][i]
            if label == "greedy":
                check(alts[0]["id"] == chosen and abs(alts[0]["logprob"] - chosen_lp) <= 1e-6,
                      "greedy: token %d (%g) is not the first alternative %r" % (chosen, chosen_lp, alts[0]))
            else:
                check(chosen_lp <= alts[0]["logprob"] + 1e-6,
                      "sampled: token logprob %g above the best alternative %r" % (chosen_lp, alts[0]))
                for a in alts:
                    if a["id"] == chosen:
                        check(abs(a["logprob"] - chosen_lp) <= 1e-6, "sampled: %r vs %g" % (a, chosen_lp))


def case_stop_token_ids(cli):
    base = cli.greedy("llama", HELLO, 8)["token_ids"]
    stop = base[2]
    check(stop not in base[:2], "test setup: token %d already appears before index 2 in %r" % (stop, base))
    other = next(t for t in range(100) if t not in base)  # a stop id never produced
    for ids in (str(stop), "%d,%d" % (other, stop)):
        obj = cli.greedy("llama", HELLO, 8, "--stop-token-ids", ids)
        check(obj["finish_reason"] == "stop" and obj["token_ids"] == base[:3] and len(obj["logprobs"]) == 3,
              "--stop-token-ids %s: expected finish 'stop' with %r, got %r / %r"
              % (ids, base[:3], obj["finish_reason"], obj["token_ids"]))


def case_tokenize(cli):
    texts = ["Hello world", "", "Hello", " world", "h\u00e9llo \U0001F642", "Hello world"]
    ids = cli.tokenize("llama", texts)
    hello, world = KNOWN_IDS["llama"]
    check(ids[0] == hello + world, "tokenize('Hello world') = %r" % ids[0])
    check(ids[1] == [], "tokenize('') = %r, expected []" % ids[1])
    check(ids[2] == hello and ids[3] == world, "tokenize('Hello'), (' world') = %r, %r" % (ids[2], ids[3]))
    check(len(ids[4]) >= 2 and ids[5] == ids[0], "unicode / repeated line: %r, %r" % (ids[4], ids[5]))
    vocab = cli.config("llama")["vocab_size"]
    check(all(0 <= t < vocab for line in ids for t in line), "ids outside the vocabulary: %r" % ids)
    bos = cli.config("llama")["bos_token_id"]
    check(all(bos not in line for line in ids), "tokenize added BOS %d without --add-special-tokens" % bos)


def case_bad_input_exits_2(cli):
    llama = cli.model("llama")
    gen = ["generate", "--model", llama, "--prompt", "hi"]
    bad_vocab_needles = ["vocabulary", "128256", "999999"]
    cases = [
        (gen + ["--max-new-tokens", "-1"], None, ["--max-new-tokens", "[0, ", "-1"]),
        (gen + ["--temperature", "-0.5"], None, ["--temperature", "[0, 100]", "-0.5"]),
        (gen + ["--top-p", "0"], None, ["--top-p", "(0, 1]"]),
        (gen + ["--top-p", "1.5"], None, ["--top-p", "(0, 1]", "1.5"]),
        (gen + ["--top-k", "abc"], None, ["--top-k", "integer", "abc"]),
        (gen + ["--top-logprobs", "21"], None, ["--top-logprobs", "[0, 20]"]),
        (gen + ["--bogus"], None, ["--bogus"]),
        (gen + ["--dtype", "f16"], None, ["--dtype", "auto|f32|bf16"]),
        (["generate", "--prompt", "hi"], None, ["--model"]),
        (gen + ["--prompt-ids", "1,2"], None, ["--prompt", "--prompt-ids"]),
        (["generate", "--model", llama, "--prompt-ids", "1,x,3"], None, ["--prompt-ids", "'x'"]),
        (["generate", "--model", llama, "--prompt-ids", "1,999999,3"], None, bad_vocab_needles),
        (["score", "--model", llama, "--prompt-ids", "1,999999", "--json"], None, bad_vocab_needles),
        (["generate", "--model", llama, "--prompt", "hi", "--stop-token-ids", "3,-4"], None, ["--stop-token-ids"]),
        (["make-tiny-model", os.path.join(cli.workdir, "gpt2-model"), "--arch", "gpt2"], None,
         ["--arch", "gpt2", "llama|mistral|qwen2|qwen3"]),
        (["tokenize", "--model", llama], '{"text": "ok"}\nnot json\n', ["line 2"]),
    ]
    for args, stdin, needles in cases:
        r = cli.run(*args, stdin=stdin)
        check(r.rc == 2, "expected exit 2: " + r.describe())
        missing = [n for n in needles if n not in r.err]
        check(not missing, "stderr should mention %r: %s" % (missing, r.describe()))
        if args[0] != "tokenize":
            check(r.out == "", "expected no stdout on a usage error: " + r.describe())
    check(not os.path.exists(os.path.join(cli.workdir, "gpt2-model")), "--arch gpt2 still wrote a directory")

    # A SHARDLM_* switch that cannot be read: exit 2 naming the variable, before any command runs.
    for var, value in (("SHARDLM_CPU_ISA", "avx3"), ("SHARDLM_GEMV_MAX_ROWS", "many")):
        r = cli.run("generate", "--model", llama, "--prompt", "hi", env={var: value})
        check(r.rc == 2 and var in r.err and value in r.err and r.out == "",
              "%s=%s: expected exit 2 naming the variable: %s" % (var, value, r.describe()))

    missing_dir = os.path.join(cli.workdir, "no-such-model")
    r = cli.run("generate", "--model", missing_dir, "--prompt", "hi")
    check(r.rc > 0 and missing_dir in r.err and r.out == "",
          "nonexistent --model: expected failure naming the path: " + r.describe())


def case_device_flag(cli):
    # --device: a bad value is a usage error naming the choices; cuda where this build or
    # machine has none fails before loading, saying why (docs/gpu.md).
    llama = cli.model("llama")
    gen = ["generate", "--model", llama, "--prompt-ids", "1,2,3", "--max-new-tokens", "2", "--json"]
    r = cli.run(*(gen + ["--device", "gpu"]))
    check(r.rc == 2 and "--device" in r.err and "cpu, cuda or cuda:N" in r.err and r.out == "",
          "--device gpu: expected exit 2 naming the choices: " + r.describe())
    r = cli.run(*(gen + ["--device", "cpu"]))
    check(r.rc == 0 and json.loads(r.out)["token_ids"], "--device cpu generates: " + r.describe())
    for args in (gen + ["--device", "cuda"], gen + ["--device", "cuda", "--tp", "2"]):
        r = cli.run(*args)
        if r.rc == 0:
            continue  # a CUDA build on a machine with GPUs
        check("--device cuda" in r.err and ("without CUDA" in r.err or "GPU" in r.err) and r.out == "",
              "--device cuda without a GPU: expected a failure saying why: " + r.describe())
    r = cli.run(*(gen + ["--device", "cuda:7"]))
    check(r.rc != 0 and "--device cuda:7" in r.err and r.out == "",
          "--device cuda:7: expected a failure naming it: " + r.describe())


def case_context_length_limit(cli):
    short = cli.model("short")
    check(cli.config("short")["max_position_embeddings"] == 64, "short model: max_position_embeddings != 64")
    r = cli.run("generate", "--model", short, "--prompt-ids", "1,2,3", "--max-new-tokens", 100)
    check(r.rc == 2, "3 prompt + 100 new tokens over a 64 context: expected exit 2: " + r.describe())
    check(re.search(r"\b64\b", r.err) and re.search(r"\b100\b", r.err),
          "message should name 64 and 100: " + r.describe())
    fits = cli.greedy("short", ["--prompt-ids", "1,2,3"], 61)  # 3 + 61 == 64: allowed
    check(len(fits["token_ids"]) == 61, "3 + 61 tokens should fit a 64 context: %r" % fits)
    r = cli.run("generate", "--model", short, "--prompt-ids", "1,2,3", "--max-new-tokens", 62)
    check(r.rc == 2, "3 + 62 tokens over a 64 context: expected exit 2: " + r.describe())


def case_no_tokenizer_model(cli):
    path = cli.model("notok")
    files = set(os.listdir(path))
    check("tokenizer.json" not in files and "tokenizer_config.json" not in files,
          "--no-tokenizer still wrote tokenizer files: %s" % sorted(files))
    check(cli.config("notok")["vocab_size"] == 512, "vocab_size != 512")
    obj = cli.greedy("notok", ["--prompt-ids", "1,2,3"], 5)
    check_generate_object(obj, 512, 5, "notok")
    check(obj["prompt_token_ids"] == [1, 2, 3] and obj["text"] == "",
          "notok: prompt_token_ids %r, text %r" % (obj["prompt_token_ids"], obj["text"]))
    s = cli.score("notok", [1, 2, 3] + obj["token_ids"])
    check(s["scores"][0] is None and len(s["scores"]) == 8, "notok score: %r" % s)
    r = cli.run("generate", "--model", path, "--prompt", "hello", "--json")
    check(r.rc == 2 and "tokenizer" in r.err and r.out == "",
          "--prompt without a tokenizer: expected exit 2 mentioning the tokenizer: " + r.describe())


def case_bf16_checkpoint(cli):
    path = cli.model("bf16")
    check(cli.config("bf16")["torch_dtype"] == "bfloat16", "bf16 config torch_dtype != bfloat16")
    _, header = safetensors_header(os.path.join(path, "model.safetensors"))
    dtypes = {t["dtype"] for t in header.values()}
    check(dtypes == {"BF16"}, "bf16 checkpoint holds dtypes %s" % sorted(dtypes))
    vocab = cli.config("bf16")["vocab_size"]
    for dtype in ("auto", "f32", "bf16"):
        a = cli.greedy("bf16", HELLO, 8, "--dtype", dtype)
        b = cli.greedy("bf16", HELLO, 8, "--dtype", dtype)
        check_generate_object(a, vocab, 8, "bf16 --dtype " + dtype)
        check(a["token_ids"] == b["token_ids"] and a["logprobs"] == b["logprobs"],
              "bf16 --dtype %s greedy not deterministic: %r vs %r" % (dtype, a["token_ids"], b["token_ids"]))


def case_repetition_penalty(cli):
    prompt = ["--prompt-ids", "1,2,3"]
    plain = cli.greedy("notok", prompt, 24)["token_ids"]
    pen = cli.greedy("notok", prompt, 24, "--repetition-penalty", 1.5)["token_ids"]
    check(repeats(pen) <= repeats(plain),
          "--repetition-penalty 1.5 repeats more (%d) than plain greedy (%d): %r vs %r"
          % (repeats(pen), repeats(plain), pen, plain))
    if repeats(plain):
        check(pen != plain, "plain greedy repeats tokens but --repetition-penalty 1.5 changed nothing: %r" % plain)


def case_frequency_and_presence_penalty(cli):
    """OpenAI penalties: the penalized greedy choice maximizes
    log p(x) - penalty * (count of x in the output so far, or min(count, 1) for
    presence), checked against the raw top-20 while the runs share a prefix."""
    prompt = [1, 2, 3]
    prompt_args = ["--prompt-ids", "1,2,3"]
    plain = cli.greedy("notok", prompt_args, 24, "--top-logprobs", 20)
    check(repeats(plain["token_ids"]) > 0, "test setup: plain greedy repeats nothing: %r" % plain["token_ids"])
    for kind in ("frequency", "presence"):
        pen = cli.greedy("notok", prompt_args, 24, "--%s-penalty" % kind, 2)["token_ids"]
        check(pen != plain["token_ids"], "--%s-penalty 2 changed nothing: %r" % (kind, pen))
        diverge = next(i for i, (a, b) in enumerate(zip(pen, plain["token_ids"])) if a != b)
        raw_scores = cli.score("notok", prompt + pen)["scores"][len(prompt):]
        for i in range(diverge + 1):
            def count(t):
                c = pen[:i].count(t)
                return c if kind == "frequency" else min(c, 1)
            raw = {a["id"]: a["logprob"] for a in plain["top_logprobs"][i]}  # shared prefix up to i
            raw[pen[i]] = raw_scores[i]
            best = max(raw, key=lambda t: raw[t] - 2 * count(t))
            check(raw[pen[i]] - 2 * count(pen[i]) >= raw[best] - 2 * count(best) - 1e-4,
                  "--%s-penalty 2, step %d: chose %d (log p %.4f, count %d) over %d (log p %.4f, count %d)"
                  % (kind, i, pen[i], raw[pen[i]], count(pen[i]), best, raw[best], count(best)))


def case_help_flag(cli):
    cwd = os.path.join(cli.workdir, "help-cwd")
    shutil.rmtree(cwd, ignore_errors=True)
    os.makedirs(cwd)
    r = cli.run("--help", cwd=cwd)
    check(r.rc == 0 and "generate" in r.out and "make-tiny-model" in r.out, "shardlm --help: " + r.describe())
    for command, flag in (("generate", "--max-new-tokens"), ("score", "--prompt-ids"),
                          ("tokenize", "--add-special-tokens"), ("make-tiny-model", "--arch")):
        r = cli.run(command, "--help", cwd=cwd)
        text = r.out + r.err
        created = os.listdir(cwd)
        check(not created, "`%s --help` wrote %r into the working directory: %s"
              % (command, created, r.describe()))
        check(r.rc in (0, 2) and ("usage: shardlm " + command) in text and flag in text,
              "`%s --help` should print the command's usage: %s" % (command, r.describe()))


CASES = [
    case_make_tiny_model_writes_checkpoint,
    case_generate_json_contract,
    case_greedy_is_deterministic,
    case_seeded_sampling,
    case_streaming_text_matches_json,
    case_score_contract_and_consistency,
    case_top_logprobs,
    case_stop_token_ids,
    case_tokenize,
    case_bad_input_exits_2,
    case_device_flag,
    case_context_length_limit,
    case_no_tokenizer_model,
    case_bf16_checkpoint,
    case_repetition_penalty,
    case_frequency_and_presence_penalty,
    case_help_flag,
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shardlm", required=True, help="path to the shardlm binary")
    parser.add_argument("--workdir", required=True, help="scratch directory for checkpoints")
    parser.add_argument("--only", default="", help="run only cases whose name contains this")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    cli = Cli(args.shardlm, args.workdir)
    passed = failed = 0
    start = time.monotonic()
    for case in CASES:
        name = case.__name__[len("case_"):]
        if args.only not in name:
            continue
        t0 = time.monotonic()
        try:
            case(cli)
        except Failure as e:
            failed += 1
            print("FAIL %s: %s" % (name, e), flush=True)
            continue
        except Exception:  # a crash of the test itself (bad JSON, timeout, ...) is a failure too
            failed += 1
            print("FAIL %s: %s" % (name, traceback.format_exc().strip().replace("\n", "\n    ")), flush=True)
            continue
        passed += 1
        print("PASS %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
    print("total time %.1fs" % (time.monotonic() - start))
    print("cli_contract: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
