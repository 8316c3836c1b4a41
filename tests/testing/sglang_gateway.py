"""SGLang's model gateway (`python -m sglang_router.launch_router`, sglang-router pinned in the
venv) in front of shardlm instances over gRPC, for the tests and the benchmarks.

The gateway cannot be told port 0 and say which port it bound, so it is given ports that were
free a moment ago (harness.free_port). Another process may take one first; the gateway then
exits with "Address already in use" before serving anything, and it is started again on new
ports (a few times at most). Any other exit is a failure.

    proc, port, metrics_port = start(workers, "cache_aware", tokenizer_dir, tiktoken_dir, "gw.log")
"""

import json
import sys
import time
import urllib.request

from harness import Failure, LoggedProcess, free_port, tail

PORT_TRIES = 5


def _wait_listed(proc, port, model, timeout_s):
    """'ready' once /v1/models lists `model`; 'port' if it exited because a port was taken."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            if "Address already in use" in proc.text():
                return "port"
            raise Failure("gateway exited: %s" % tail(proc.text(), 3000))
        try:
            models = json.load(urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=2))
            if any(m["id"] == model for m in models.get("data", [])):
                return "ready"
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    proc.stop()
    raise Failure("gateway did not list the model %s: %s" % (model, tail(proc.text(), 3000)))


def start(worker_urls, policy, tokenizer_dir, tiktoken_dir, log_path, extra=(), timeout_s=120):
    """(LoggedProcess, HTTP port, Prometheus port) of a gateway that lists the model by
    `tokenizer_dir` (the name shardlm's --router-model-path gives it)."""
    for attempt in range(PORT_TRIES):
        port, metrics = free_port(), free_port()
        argv = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls"] + list(worker_urls) + [
            "--policy", policy, "--host", "127.0.0.1", "--port", port, "--prometheus-port", metrics,
            "--tokenizer-path", tokenizer_dir, "--log-level", "warn"] + list(extra)
        # Its Harmony (gpt-oss) encoding is loaded at start whatever the model: offline, from here.
        proc = LoggedProcess(argv, log_path if attempt == 0 else "%s.%d" % (log_path, attempt),
                             env={"TIKTOKEN_ENCODINGS_BASE": tiktoken_dir})
        if _wait_listed(proc, port, tokenizer_dir, timeout_s) == "ready":
            return proc, port, metrics
    raise Failure("gateway: a port was taken on each of %d tries" % PORT_TRIES)
