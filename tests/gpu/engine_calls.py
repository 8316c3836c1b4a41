"""The engine's CLI as the GPU checks call it (check_graphs.py, check_ranks.py, check_speculative.py,
check_quantized.py)."""
import json
import subprocess
import sys


def run(cmd, timeout=300, input_text=None):
    """Runs the command (with `input_text` on its stdin); exits naming it and its stderr's end if
    it fails."""
    proc = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, text=True, input=input_text)
    if proc.returncode != 0:
        sys.exit("command failed (%d): %s\n%s" % (proc.returncode, " ".join(map(str, cmd)),
                                                   proc.stderr[-2000:]))
    return proc


def run_json(cmd, timeout=300):
    return json.loads(run(cmd, timeout).stdout)


def last_logprob(shardlm, model, device, dtype, ids):
    """The eager, one-rank log-prob of ids' last token after the rest."""
    return run_json([shardlm, "score", "--model", model, "--device", device, "--dtype", dtype,
                     "--prompt-ids", ",".join(map(str, ids)), "--json"])["scores"][-1]


def tie_gap(shardlm, model, device, dtype, context, a, b):
    """Where two greedy runs part after `context` (token a in one, b in the other): the gap
    between the two tokens' log-probs there. A near tie (a small gap) may flip on any rounding."""
    return abs(last_logprob(shardlm, model, device, dtype, list(context) + [a]) -
               last_logprob(shardlm, model, device, dtype, list(context) + [b]))


def tiny_qwen3(shardlm, path, seed=0):
    """The checks' tiny qwen3 checkpoint (vocabulary 512, no tokenizer: prompts as ids)."""
    run([shardlm, "make-tiny-model", path, "--arch", "qwen3", "--no-tokenizer", "--vocab-size", "512",
         "--hidden-size", "256", "--num-heads", "4", "--num-kv-heads", "2", "--num-layers", "3",
         "--seed", seed])


def judge_parting(shardlm, model, device, dtype, prompt, a, b, tol, what, names):
    """Two greedy runs' tokens a and b after `prompt`: "same", "tie" where they first part at a
    near tie (tie_gap within tol) or "fail", printing where and why they part (`what` labels the
    line, `names` the two runs). Different lengths with equal tokens are a failure."""
    if a == b:
        return "same"
    k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), None)
    if k is None:
        print("%s: %d tokens %s, %d %s: FAIL" % (what, len(a), names[0], len(b), names[1]))
        return "fail"
    gap = tie_gap(shardlm, model, device, dtype, list(prompt) + a[:k], a[k], b[k])
    tie = gap <= tol
    print("%s: tokens part at %d (%d %s, %d %s), log-prob gap %.3g (tolerance %g): %s"
          % (what, k, a[k], names[0], b[k], names[1], gap, tol, "near tie" if tie else "FAIL"))
    return "tie" if tie else "fail"
