#!/usr/bin/python3
"""The models users have (README "Models"), served as users serve them: the official `openai`
client against `serve --tp 2` of each Qwen2.5-Coder file, its Q4_K_M blocks kept on the CPU.

  coder_writes_python: Qwen2.5-Coder-0.5B-Instruct asked, through the chat API at temperature 0,
      for three small Python functions; each answer's ```python block must parse and pass its
      tests, run in a separate, isolated Python (`python3 -I`, a time limit).
  coder_1_5b: Qwen2.5-Coder-1.5B-Instruct (Q4_K and Q6_K only; an untied head; 12 heads over 2
      KV heads; its FFN's 35 super-blocks split 18/17): the first of those functions, written
      and tested the same way, and its kept blocks scored against the file dequantized to f32
      (`score --tp 2`) within --k-max-diff / --k-mean-diff.

Usage:
  python3 tests/integration/models_test.py --shardlm build/shardlm --workdir DIR
Prints one line per check; exit 0 iff every case passes.
"""
import ast
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))

import harness  # noqa: E402
from harness import Ctx, Failure, LoggedProcess  # noqa: E402
import openai  # noqa: E402

MODELS = os.path.join(ROOT, "third_party", "models")
QWEN_05 = os.path.join(MODELS, "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf")
QWEN_15 = os.path.join(MODELS, "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf")
START_TIMEOUT_S = 180

# (request, the function's name, tests run after the answer's code)
TASKS = [
    ("Write a Python function is_palindrome(s) that returns True when the string s reads the same "
     "forwards and backwards, ignoring case and every character that is not a letter or a digit.",
     "is_palindrome",
     "assert is_palindrome('A man, a plan, a canal: Panama')\n"
     "assert not is_palindrome('hello')\nassert is_palindrome('')\nassert is_palindrome('No lemon, no melon')\n"),
    ("Write a Python function merge_sorted(a, b) that merges two sorted lists of numbers into one "
     "sorted list, without calling sort or sorted.",
     "merge_sorted",
     "assert merge_sorted([1, 3, 5], [2, 4, 6]) == [1, 2, 3, 4, 5, 6]\n"
     "assert merge_sorted([], [1]) == [1]\nassert merge_sorted([1, 1], [1]) == [1, 1, 1]\n"),
    ("Write a Python function word_counts(text) that returns a dict mapping each lowercase word of "
     "text (words are separated by whitespace) to the number of times it occurs.",
     "word_counts",
     "assert word_counts('a b a') == {'a': 2, 'b': 1}\nassert word_counts('') == {}\n"
     "assert word_counts('The the THE') == {'the': 3}\n"),
]


def python_block(text):
    """The answer's first ```python block (or its first ``` block)."""
    m = re.search(r"```(?:python|py)?\s*\n(.*?)```", text, re.S)
    return m.group(1) if m else text


def run_isolated(code, timeout=20):
    """Runs `code` in a fresh, isolated interpreter; (ok, output)."""
    try:
        p = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "ran past %d s" % timeout
    return p.returncode == 0, (p.stdout + p.stderr)[-600:]


class ModelsCtx(Ctx):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args)
        self.binary = binary

    def serve(self, name, model):
        p = LoggedProcess([self.binary, "serve", "--model", model, "--tp", 2, "--port", 0, "--http-port", 0,
                           "--served-model-name", name], self.dir(name + ".log"))
        if not p.wait_for("shardlm serving", START_TIMEOUT_S):
            p.stop()
            raise Failure("serve not ready (rc %s): %s" % (p.proc.poll(), p.text()[-1500:]))
        p.client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % p.announced_port(harness.HTTP_PORT),
                                 api_key="unused", max_retries=0, timeout=300)
        return p


def write_and_test(c, client, name, task):
    request, fn, tests = task
    r = client.chat.completions.create(model=name, temperature=0, max_tokens=400,
                                       messages=[{"role": "user", "content": request}])
    code = python_block(r.choices[0].message.content)
    try:
        ast.parse(code)
    except SyntaxError as e:
        c.check(False, "%s: the answer's code does not parse (%s): %r" % (fn, e, code[:300]))
        return
    ok, out = run_isolated(code + "\n" + tests)
    c.check(ok, "%s: parses and passes its tests (%d lines, finish %s)%s" % (
        fn, code.count("\n") + 1, r.choices[0].finish_reason, "" if ok else ": " + out))


def case_coder_writes_python(ctx, c):
    srv = ctx.serve("qwen-coder-0.5b", QWEN_05)
    try:
        for task in TASKS:
            write_and_test(c, srv.client, "qwen-coder-0.5b", task)
    finally:
        c.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


def scores(ctx, model, *extra):
    p = subprocess.run([ctx.binary, "score", "--model", model, "--tp", "2", "--json", "--prompt",
                        "def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n    pivot = xs[0]\n"]
                       + list(extra), capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise Failure("score %s exited %d: %s" % (" ".join(extra), p.returncode, p.stderr[-600:]))
    return json.loads(p.stdout)["scores"][1:]


def case_coder_1_5b(ctx, c):
    dense, kept = scores(ctx, QWEN_15, "--weights", "dense"), scores(ctx, QWEN_15)
    d = [abs(a - b) for a, b in zip(dense, kept)]
    c.check(len(dense) == len(kept) and 0 < max(d) <= ctx.args.k_max_diff and
            sum(d) / len(d) <= ctx.args.k_mean_diff,
            "kept Q4_K/Q6_K against dequantized f32 at --tp 2, %d tokens: max |diff| %.3f, mean %.3f "
            "(bounds %.2f, %.3f)" % (len(d), max(d), sum(d) / len(d), ctx.args.k_max_diff, ctx.args.k_mean_diff))
    srv = ctx.serve("qwen-coder-1.5b", QWEN_15)
    try:
        write_and_test(c, srv.client, "qwen-coder-1.5b", TASKS[0])
    finally:
        c.check(srv.stop() == 0, "serve exits 0 on SIGTERM")


CASES = [("coder_writes_python", case_coder_writes_python), ("coder_1_5b", case_coder_1_5b)]


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--k-max-diff", type=float, default=0.3)
    ap.add_argument("--k-mean-diff", type=float, default=0.08)
    args = ap.parse_args()
    parsed = harness.parse_case_args(args, [n for n, _ in CASES])
    if parsed is None:
        return 2
    binary, workdir, only = parsed
    return harness.run_cases(CASES, only, ModelsCtx(workdir, args, binary), "models")


if __name__ == "__main__":
    sys.exit(main())
