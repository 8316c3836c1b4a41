#!/usr/bin/python3
"""A small Python client for shardlm's public gRPC API (shardlm.v1.Inference).

Stubs are generated on first use from ../../proto into a cache folder under the
system temp dir (grpc_tools.protoc, or protoc + grpc_python_plugin when the
grpc_tools bundled protoc is too old for proto3 `optional`).

Demo (streams one generation to stdout):
  /usr/bin/python3 examples/python/shardlm_client.py --server 127.0.0.1:50051 "Once upon a time"

Library use:
  from shardlm_client import Client
  c = Client("127.0.0.1:50051")
  [few_shot] = c.prefill(["Cows have 4 legs. Fish have 0 legs."], top_k=4)   # keeps a handle
  out = c.generate(prefix_handle=few_shot["handle"], n=4, max_new_tokens=8, temperature=0.7, seed=1)
  for s in out["samples"]:
      print(s["text"], s["finish_reason"])
  c.release([few_shot["handle"]])

Prompts are str (text, tokenized by the server) or a list of ints (token ids).
Errors are grpc.RpcError (e.code(), e.details()); every call has a deadline.
"""

import argparse
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
INFERENCE_PROTO = "shardlm/v1/inference.proto"


def generate_stubs(include_dir, proto):
    """Generates <proto>_pb2(_grpc).py into a cached folder, puts it on sys.path, returns it."""
    with open(os.path.join(include_dir, proto), "rb") as f:
        key = hashlib.sha256(include_dir.encode() + b"\0" + proto.encode() + b"\0" + f.read())
    out = os.path.join(tempfile.gettempdir(), "shardlm_pystubs_" + key.hexdigest()[:16])
    if not os.path.isdir(out):
        tmp = tempfile.mkdtemp(prefix="shardlm_pystubs_tmp_")
        args = ["-I", include_dir, "--python_out=" + tmp, proto]
        attempts = [  # grpc_tools' bundled protoc first, then the system protoc + plugin
            [sys.executable, "-m", "grpc_tools.protoc", "--grpc_python_out=" + tmp] + args,
            [sys.executable, "-m", "grpc_tools.protoc", "--experimental_allow_proto3_optional",
             "--grpc_python_out=" + tmp] + args,
        ]
        plugin = shutil.which("grpc_python_plugin")
        if shutil.which("protoc") and plugin:
            attempts.append(["protoc", "--grpc_out=" + tmp, "--plugin=protoc-gen-grpc=" + plugin] + args)
        errors = []
        for cmd in attempts:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if p.returncode == 0:
                break
            errors.append("$ %s\n%s" % (" ".join(cmd), p.stdout.decode(errors="replace").strip()))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError("could not generate stubs for %s:\n%s" % (proto, "\n".join(errors)))
        for root, _dirs, _files in os.walk(tmp):  # regular packages, so nothing shadows them
            if root != tmp:
                open(os.path.join(root, "__init__.py"), "a").close()
        try:
            os.rename(tmp, out)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    if out not in sys.path:
        sys.path.insert(0, out)
    return out


generate_stubs(PROTO_DIR, INFERENCE_PROTO)
pb = importlib.import_module("shardlm.v1.inference_pb2")
pb_grpc = importlib.import_module("shardlm.v1.inference_pb2_grpc")

SAMPLING_FIELDS = ("top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "logit_bias")


def to_prompt(p):
    """str -> text prompt, list of ints -> token ids, None -> empty."""
    if p is None:
        return pb.Prompt()
    if isinstance(p, str):
        return pb.Prompt(text=p)
    return pb.Prompt(token_ids=pb.TokenIds(ids=[int(t) for t in p]))


def _top(t):
    return [(a.id, a.logprob) for a in t.alternatives]


def _flat(msg):
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields}


def chunk_dict(c):
    """A ChunkResult as plain Python (scores[i] may be NaN for a sequence's first token)."""
    return {"handle": c.handle, "token_ids": list(c.token_ids), "scores": list(c.scores),
            "top": [_top(t) for t in c.top], "next_token_top": _top(c.next_token_top),
            "prefix_tokens": c.prefix_tokens, "expires_at_unix_ms": c.expires_at_unix_ms}


class Client:
    def __init__(self, address, timeout=60.0):
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.InferenceStub(self.channel)
        self.timeout = timeout

    def close(self):
        self.channel.close()

    def prefill(self, chunks, prefix_handles=(), top_k=0, keep=True):
        """Runs a batch of chunks (after none, one shared, or one prefix handle each) -> [chunk dict]."""
        req = pb.PrefillRequest(chunks=[to_prompt(c) for c in chunks],
                                prefix_handles=list(prefix_handles), top_k=top_k, keep=keep)
        return [chunk_dict(c) for c in self.stub.Prefill(req, timeout=self.timeout).results]

    def generate_request(self, prompt=None, prefix_handle="", n=1, max_new_tokens=16,
                         temperature=None, seed=None, top_logprobs=0, stop=(),
                         return_chunk_result=False, ignore_eos=False, stop_token_ids=(),
                         **sampling):
        bad = set(sampling) - set(SAMPLING_FIELDS)
        if bad:
            raise TypeError("unknown sampling parameter(s): %s" % ", ".join(sorted(bad)))
        sp = pb.SamplingParams(**sampling)
        if temperature is not None:
            sp.temperature = temperature
        if seed is not None:
            sp.seed = seed
        return pb.GenerateRequest(prompt=to_prompt(prompt), sampling=sp, max_new_tokens=max_new_tokens,
                                  stop_token_ids=list(stop_token_ids), ignore_eos=ignore_eos,
                                  top_logprobs=top_logprobs, prefix_handle=prefix_handle, n=n,
                                  stop=list(stop), return_chunk_result=return_chunk_result)

    def generate_stream(self, *args, **kwargs):
        """The raw response stream (iterate it; .cancel() stops the generation)."""
        return self.stub.Generate(self.generate_request(*args, **kwargs), timeout=self.timeout)

    def generate(self, *args, on_text=None, **kwargs):
        """Generates and consumes the stream. Returns {"prompt_token_ids", "usage", "samples"},
        samples[i] = {tokens, logprobs, top_logprobs, text, finish_reason, chunk_result}.
        on_text(sample, text) is called as text arrives. Arguments: see generate_request."""
        n = max(1, kwargs.get("n", 1))
        samples = [{"tokens": [], "logprobs": [], "top_logprobs": [], "text": "",
                    "finish_reason": "", "chunk_result": None} for _ in range(n)]
        out = {"prompt_token_ids": [], "usage": None, "samples": samples}
        for msg in self.generate_stream(*args, **kwargs):
            if msg.prompt_token_ids:
                out["prompt_token_ids"] = list(msg.prompt_token_ids)
            s = samples[msg.sample]
            s["tokens"] += list(msg.token_ids)
            s["logprobs"] += list(msg.logprobs)
            s["top_logprobs"] += [_top(t) for t in msg.top_logprobs]
            if msg.text:
                s["text"] += msg.text
                if on_text:
                    on_text(msg.sample, msg.text)
            for r in msg.results:
                samples[r.sample]["finish_reason"] = r.finish_reason
                if r.HasField("chunk_result"):
                    samples[r.sample]["chunk_result"] = chunk_dict(r.chunk_result)
            if msg.HasField("usage"):
                out["usage"] = _flat(msg.usage)
        return out

    def score(self, prompt):
        """-> {"token_ids", "scores"}; scores[0] is NaN."""
        r = self.stub.Score(pb.ScoreRequest(prompt=to_prompt(prompt)), timeout=self.timeout)
        return {"token_ids": list(r.token_ids), "scores": list(r.scores)}

    def release(self, handles):
        self.stub.ReleaseChunks(pb.ReleaseChunksRequest(handles=list(handles)), timeout=self.timeout)

    def tokenize(self, text, add_special_tokens=False):
        req = pb.TokenizeRequest(text=text, add_special_tokens=add_special_tokens)
        return list(self.stub.Tokenize(req, timeout=self.timeout).ids)

    def detokenize(self, ids, skip_special_tokens=False):
        req = pb.DetokenizeRequest(ids=list(ids), skip_special_tokens=skip_special_tokens)
        return self.stub.Detokenize(req, timeout=self.timeout).text

    def model_info(self):
        return _flat(self.stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=self.timeout))

    def stats(self):
        return _flat(self.stub.GetStats(pb.GetStatsRequest(), timeout=self.timeout))


def main():
    ap = argparse.ArgumentParser(description="Stream a generation from a shardlm server.")
    ap.add_argument("--server", default="127.0.0.1:50051", help="HOST:PORT of `shardlm serve`")
    ap.add_argument("prompt", help="prompt text")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    client = Client(args.server)
    try:
        out = client.generate(args.prompt, max_new_tokens=args.max_new_tokens,
                              temperature=args.temperature, seed=args.seed,
                              on_text=lambda _s, t: (sys.stdout.write(t), sys.stdout.flush()))
    except grpc.RpcError as e:
        print("error: %s: %s" % (e.code().name, e.details()), file=sys.stderr)
        return 1
    print()
    print("[finish_reason %s, usage %s]" % (out["samples"][0]["finish_reason"], out["usage"]),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
