#!/usr/bin/python3
"""vLLM's engine protocol (vllm.grpc.engine.VllmEngine, what SGLang's model gateway calls) on
serve's public port, through a Python gRPC client built from proto/vllm/grpc/engine/.

Cases (one `serve --tp 2` of a tiny f32 Llama with the Llama-3 tokenizer, shared):
  model_info        GetModelInfo: model_path the model's absolute directory, the context and
                    vocabulary; HealthCheck healthy; GetServerInfo's server type; Embed
                    UNIMPLEMENTED; the SGLang service UNIMPLEMENTED (so the gateway picks vLLM's)
  same_tokens       greedy tokens equal shardlm.v1's for the same ids: streamed chunks are deltas
                    and a complete ends the stream (output_ids, finish_reason, counts); unstreamed
                    only completes; text input equals its Tokenize; truncate_prompt_tokens keeps
                    the last k ids; max_tokens unset runs to the context
  stop_tokens       a stop token id ends the sample with "stop" and is left out of the output
                    (counted in completion_tokens); include_stop_str_in_output keeps it
  samples           n = 2 unstreamed: two completes, seeded samples reproducible
  constraint        a regex through sampling_params.regex: the output matches it
  field_errors      every refused field INVALID_ARGUMENT naming it (message and the
                    shardlm-error-field trailer): min_tokens, logprobs, prompt_logprobs,
                    structural_tag, n > 1 streamed, max_tokens 0 and past the context,
                    input_ids out of the vocabulary, no input, truncate 0, temperature (an engine
                    bound, named in this protocol's terms), a duplicate running request_id
  abort             Abort by request id ends a running stream CANCELLED within 2 s; a client
                    that cancels likewise; nothing left running, every block free

Usage:
  /usr/bin/python3 tests/integration/router_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import operations_test as ops  # noqa: E402  (the tiny model, `serve`, stubs)

grpc, pb, sc = ops.grpc, ops.pb, ops.sc
_vllm_stubs = sc.generate_stubs(os.path.join(ops.ROOT, "proto"), "vllm/grpc/engine/vllm_engine.proto")
import importlib  # noqa: E402
vpb = importlib.import_module("vllm.grpc.engine.vllm_engine_pb2")
vpb_grpc = importlib.import_module("vllm.grpc.engine.vllm_engine_pb2_grpc")

PROMPT = ops.PROMPT


class RouterCtx(ops.Ops):
    """The shared server and its channels."""

    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args, binary)
        self._srv = None

    def server(self):
        if self._srv is None:
            # A small cache, so that the context (the cache's, under the model's 8192) is quick to fill.
            self._srv = self.serve("router", 2, "--kv-cache-mb", "1")
            self.ch = grpc.insecure_channel("127.0.0.1:%d" % self._srv.port)
            self.vllm = vpb_grpc.VllmEngineStub(self.ch)
            self.shardlm = ops.pb_grpc.InferenceStub(self.ch)
            info = self.shardlm.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
            self.context = min(info.max_context_length, info.kv_cache_blocks * info.kv_block_size)
        return self._srv

    def close(self):
        if self._srv is not None:
            self.ch.close()
            self._srv.stop()


def ids_of(ctx, text):
    return list(ctx.shardlm.Tokenize(pb.TokenizeRequest(text=text, add_special_tokens=True), timeout=30).ids)


def shardlm_greedy(ctx, ids, n, stop_ids=()):
    req = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=ids)), max_new_tokens=n,
                             sampling=pb.SamplingParams(temperature=0), ignore_eos=True,
                             stop_token_ids=list(stop_ids))
    return [t for r in ctx.shardlm.Generate(req, timeout=60) for t in r.token_ids]


def vllm_request(ids=None, text=None, request_id="", stream=True, **sampling):
    sp = vpb.SamplingParams(**sampling)
    req = vpb.GenerateRequest(request_id=request_id, sampling_params=sp, stream=stream)
    if text is not None:
        req.text = text
    elif ids is not None:
        req.tokenized.CopyFrom(vpb.TokenizedInput(original_text="", input_ids=ids))
    return req


def run(ctx, req, timeout=60):
    """(chunk token lists, completes) of one Generate."""
    chunks, completes = [], []
    for r in ctx.vllm.Generate(req, timeout=timeout):
        kind = r.WhichOneof("response")
        if kind == "chunk":
            chunks.append(list(r.chunk.token_ids))
        else:
            completes.append(r.complete)
    return chunks, completes


def error_of(fn):
    """(code, details, the shardlm-error-field trailer) of a failing call."""
    try:
        fn()
    except grpc.RpcError as e:
        field = dict(e.trailing_metadata() or ()).get("shardlm-error-field", "")
        return e.code(), e.details() or "", field
    return grpc.StatusCode.OK, "", ""


def idle(ctx):
    s = ctx.shardlm.GetStats(pb.GetStatsRequest(), timeout=10)
    return s.running == 0 and s.waiting == 0 and s.referenced_blocks == 0, s


# --- cases -----------------------------------------------------------------------------------

def model_info(ctx, chk):
    ctx.server()
    info = ctx.vllm.GetModelInfo(vpb.GetModelInfoRequest(), timeout=10)
    chk.check(info.model_path == os.path.abspath(ctx.model) and info.is_generation,
              "model_path is the model's absolute directory: %s" % info.model_path)
    chk.check(os.path.isfile(os.path.join(info.model_path, "tokenizer.json")),
              "... which holds the tokenizer.json the gateway loads")
    chk.check(info.max_context_length == ctx.context and ctx.context < 8192 and info.vocab_size == 128256 and
              not info.supports_vision, "max_context_length %d (the KV cache's), vocab_size %d"
              % (info.max_context_length, info.vocab_size))
    h = ctx.vllm.HealthCheck(vpb.HealthCheckRequest(), timeout=10)
    chk.check(h.healthy, "HealthCheck healthy while serving: %s" % h.message)
    si = ctx.vllm.GetServerInfo(vpb.GetServerInfoRequest(), timeout=10)
    chk.check(si.server_type == "shardlm" and si.uptime_seconds > 0 and not si.is_paused,
              "GetServerInfo: %s, up %.1f s" % (si.server_type, si.uptime_seconds))
    code, _, _ = error_of(lambda: ctx.vllm.Embed(vpb.EmbedRequest(request_id="e"), timeout=10))
    chk.check(code == grpc.StatusCode.UNIMPLEMENTED, "Embed is UNIMPLEMENTED: %s" % code)
    sglang = ctx.ch.unary_unary("/sglang.grpc.scheduler.SglangScheduler/HealthCheck",
                                request_serializer=lambda x: x, response_deserializer=lambda x: x)
    code, _, _ = error_of(lambda: sglang(b"", timeout=10))
    chk.check(code == grpc.StatusCode.UNIMPLEMENTED,
              "SGLang's scheduler service is UNIMPLEMENTED, so the gateway falls back to vLLM's: %s" % code)


def same_tokens(ctx, chk):
    ctx.server()
    ids = ids_of(ctx, PROMPT)
    want = shardlm_greedy(ctx, ids, 12)
    chunks, completes = run(ctx, vllm_request(ids, request_id="same-1", temperature=0, max_tokens=12,
                                              ignore_eos=True))
    got = [t for c in chunks for t in c]
    chk.check(got == want, "streamed chunks are deltas equal to shardlm.v1's greedy tokens (%d chunks)" % len(chunks))
    chk.check(len(completes) == 1 and list(completes[0].output_ids) == want and
              completes[0].finish_reason == "length" and completes[0].prompt_tokens == len(ids) and
              completes[0].completion_tokens == 12,
              "one complete ends the stream: output_ids, length, %d prompt and 12 completion tokens"
              % len(ids))
    chunks, completes = run(ctx, vllm_request(ids, request_id="same-2", stream=False, temperature=0,
                                              max_tokens=12, ignore_eos=True))
    chk.check(not chunks and len(completes) == 1 and list(completes[0].output_ids) == want,
              "unstreamed: only the complete, with the same tokens")
    _, completes = run(ctx, vllm_request(text=PROMPT, stream=False, temperature=0, max_tokens=12,
                                         ignore_eos=True))
    chk.check(list(completes[0].output_ids) == want and completes[0].prompt_tokens == len(ids),
              "text input is tokenized as Tokenize does (special tokens added)")
    _, completes = run(ctx, vllm_request(ids, stream=False, temperature=0, max_tokens=6, ignore_eos=True,
                                         truncate_prompt_tokens=5))
    chk.check(list(completes[0].output_ids) == shardlm_greedy(ctx, ids[-5:], 6) and
              completes[0].prompt_tokens == 5, "truncate_prompt_tokens 5 keeps the last 5 ids")
    _, completes = run(ctx, vllm_request(ids, stream=False, temperature=0, ignore_eos=True), timeout=120)
    chk.check(completes[0].completion_tokens == ctx.context - len(ids) and completes[0].finish_reason == "length",
              "max_tokens unset runs to the context: %d tokens" % completes[0].completion_tokens)


def stop_tokens(ctx, chk):
    ctx.server()
    ids = ids_of(ctx, PROMPT)
    free = shardlm_greedy(ctx, ids, 8)
    stop = free[3]
    if not chk.check(stop not in free[:3], "the 4th greedy token (%d) is not among the first three" % stop):
        return
    _, completes = run(ctx, vllm_request(ids, stream=False, temperature=0, max_tokens=8, ignore_eos=True,
                                         stop_token_ids=[stop]))
    c = completes[0]
    chk.check(c.finish_reason == "stop" and list(c.output_ids) == free[:3] and c.completion_tokens == 4,
              "a stop token id ends the sample (stop), left out of output_ids, counted: %s %s %d"
              % (c.finish_reason, list(c.output_ids), c.completion_tokens))
    chunks, completes = run(ctx, vllm_request(ids, temperature=0, max_tokens=8, ignore_eos=True,
                                              stop_token_ids=[stop]))
    chk.check([t for ch in chunks for t in ch] == free[:3], "... and out of the streamed chunks")
    _, completes = run(ctx, vllm_request(ids, stream=False, temperature=0, max_tokens=8, ignore_eos=True,
                                         stop_token_ids=[stop], include_stop_str_in_output=True))
    chk.check(list(completes[0].output_ids) == free[:4], "include_stop_str_in_output keeps it")


def samples(ctx, chk):
    ctx.server()
    ids = ids_of(ctx, PROMPT)
    req = vllm_request(ids, stream=False, temperature=1.0, max_tokens=8, ignore_eos=True, n=2, seed=11)
    _, a = run(ctx, req)
    _, b = run(ctx, req)
    chk.check(len(a) == 2 and all(len(c.output_ids) == 8 for c in a) and a[0].output_ids != a[1].output_ids,
              "n = 2 unstreamed: two completes of 8 tokens, two different samples")
    chk.check([list(c.output_ids) for c in a] == [list(c.output_ids) for c in b],
              "a seeded request repeats its samples")


def constraint(ctx, chk):
    ctx.server()
    ids = ids_of(ctx, PROMPT)
    _, completes = run(ctx, vllm_request(ids, stream=False, temperature=0.8, seed=3, max_tokens=20,
                                         regex="[0-9]{3}-[0-9]{4}"))
    text = ctx.shardlm.Detokenize(pb.DetokenizeRequest(ids=list(completes[0].output_ids)),
                                  timeout=10).text
    chk.check(re.fullmatch(r"[0-9]{3}-[0-9]{4}", text) is not None and completes[0].finish_reason == "stop",
              "sampling_params.regex: %r matches, finish %s" % (text, completes[0].finish_reason))


def field_errors(ctx, chk):
    ctx.server()
    ids = ids_of(ctx, PROMPT)
    cases = [
        ("sampling_params.min_tokens", vllm_request(ids, min_tokens=2)),
        ("sampling_params.logprobs", vllm_request(ids, logprobs=1)),
        ("sampling_params.prompt_logprobs", vllm_request(ids, prompt_logprobs=1)),
        ("sampling_params.structural_tag", vllm_request(ids, structural_tag="{}")),
        ("sampling_params.n", vllm_request(ids, n=2)),
        ("sampling_params.max_tokens", vllm_request(ids, max_tokens=ctx.context)),
        ("tokenized.input_ids", vllm_request([1, 128256])),
        ("input", vllm_request()),
        ("sampling_params.truncate_prompt_tokens", vllm_request(ids, truncate_prompt_tokens=0)),
        ("sampling_params.temperature", vllm_request(ids, temperature=-1)),
        ("sampling_params.stop_token_ids", vllm_request(ids, stop_token_ids=[1 << 20])),
        ("sampling_params.json_schema", vllm_request(ids, json_schema="{not json")),
    ]
    for field, req in cases:
        code, details, trailer = error_of(lambda: run(ctx, req))
        chk.check(code == grpc.StatusCode.INVALID_ARGUMENT and trailer == field,
                  "%s: %s %s [%s]" % (field, code, details[:120], trailer))
    code, details, trailer = error_of(lambda: run(ctx, vllm_request(ids, max_tokens=0)))
    chk.check(code == grpc.StatusCode.INVALID_ARGUMENT and "max_tokens" in details,
              "max_tokens 0: %s %s" % (code, details))
    # A second running call with the request id of a running one.
    long = ctx.vllm.Generate(vllm_request(ids, request_id="dup", temperature=0, max_tokens=400, ignore_eos=True),
                             timeout=60)
    next(long)
    code, details, trailer = error_of(lambda: run(ctx, vllm_request(ids, request_id="dup", max_tokens=2)))
    chk.check(code == grpc.StatusCode.ALREADY_EXISTS and trailer == "request_id",
              "a running request_id again: %s %s" % (code, details))
    long.cancel()
    ok, stats = wait_idle(ctx)
    chk.check(ok, "nothing left running: %s" % stats)


def wait_idle(ctx, seconds=5):
    deadline = time.monotonic() + seconds
    while True:
        ok, stats = idle(ctx)
        if ok or time.monotonic() > deadline:
            return ok, str(stats).replace("\n", " ")
        time.sleep(0.05)


def abort(ctx, chk):
    ctx.server()
    ids = ids_of(ctx, PROMPT)
    most = ctx.context - len(ids)  # a stream that runs long, so the Abort finds it running
    stream = ctx.vllm.Generate(vllm_request(ids, request_id="chatcmpl-abort-1", temperature=0, max_tokens=most,
                                            ignore_eos=True), timeout=120)
    first = next(stream)
    ended = {}

    def drain():
        try:
            for _ in stream:
                pass
            ended["code"] = grpc.StatusCode.OK
        except grpc.RpcError as e:
            ended["code"], ended["details"] = e.code(), e.details()
        ended["at"] = time.monotonic()

    t = threading.Thread(target=drain)
    t.start()
    t0 = time.monotonic()
    ctx.vllm.Abort(vpb.AbortRequest(request_ids=["unknown-id", "chatcmpl-abort-1"]), timeout=10)
    t.join(10)
    chk.check(first.WhichOneof("response") == "chunk" and ended.get("code") == grpc.StatusCode.CANCELLED and
              ended["at"] - t0 < 2,
              "Abort ends the running stream CANCELLED in %.2f s: %s" % (ended.get("at", t0) - t0,
                                                                       ended.get("details")))
    ok, stats = wait_idle(ctx)
    chk.check(ok, "nothing left running, every block free: %s" % stats)
    stream = ctx.vllm.Generate(vllm_request(ids, request_id="chatcmpl-abort-2", temperature=0, max_tokens=most,
                                            ignore_eos=True), timeout=120)
    next(stream)
    stream.cancel()
    ok, stats = wait_idle(ctx)
    chk.check(ok, "a client that cancels leaves nothing running: %s" % stats)
    _, completes = run(ctx, vllm_request(ids, request_id="chatcmpl-abort-1", stream=False, temperature=0,
                                         max_tokens=3, ignore_eos=True))
    chk.check(len(completes) == 1, "the aborted call's request id can be used again")
    # An id is free once its call's status is sent: the same id at once, ten times.
    for k in range(10):
        _, completes = run(ctx, vllm_request(ids, request_id="chatcmpl-again", stream=False, max_tokens=1))
    chk.check(len(completes) == 1, "one request id used by ten calls in a row, each after the last ended")


CASES = [("model_info", model_info), ("same_tokens", same_tokens), ("stop_tokens", stop_tokens),
         ("samples", samples), ("constraint", constraint), ("field_errors", field_errors), ("abort", abort)]


if __name__ == "__main__":
    sys.exit(ops.run_main(__doc__, CASES, "router", RouterCtx))
