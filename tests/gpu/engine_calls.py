"""The engine's CLI as the GPU checks call it (check_graphs.py, check_ranks.py, check_quantized.py)."""
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
