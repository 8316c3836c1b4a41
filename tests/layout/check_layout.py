#!/usr/bin/env python3
"""Checks that the tree keeps the shape docs/design.md draws ("Layout").

Two checks, over the product code (everything but tests/, bench/, fuzz/,
examples/ and third_party/):

1. Layering, read from the `#include "..."` lines. A unit is a top-level folder,
   or a folder under coordinator/ (coordinator/engine, coordinator/grpc, ...).
   Arrows point down only: the RULES table says which units a unit must not
   include, a few units must stay free of gRPC, generated protobuf messages or
   torch, and there is no cycle between units.
2. Size, measured as a reviewer would, with universal-ctags' end lines: no
   function over 80 lines, no file over 500 lines (the Jinja engine excepted,
   a parser and evaluator whose files each hold one job).

    python3 tests/layout/check_layout.py --root .

Prints each violation with its file and line and exits 1 when there is one.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

PRODUCT_EXTENSIONS = (".cc", ".h", ".cu", ".cuh")
NOT_PRODUCT = ("tests/", "bench/", "fuzz/", "examples/", "third_party/", "build")

FRONT_ENDS = ["coordinator/grpc", "coordinator/openai", "coordinator/router", "coordinator/stateful",
              "coordinator/ollama"]
# Below the front ends, beside serving/: what the two OpenAI front ends share, and the state store.
SHARED = ["coordinator/openai_wire", "state"]
# unit -> units it must not include (as prefixes: "model" covers model/...).
RULES = {
    # The coordinator and the worker process share step/ and proto/, never each other.
    "coordinator": ["worker"],
    "worker": ["coordinator"],
    # Text and shard rules read checkpoints through formats/, not the forward pass.
    "tokenizer": ["model", "coordinator", "worker"],
    "chat": ["model", "coordinator", "worker"],
    "jinja": ["model", "tokenizer", "chat", "coordinator", "worker"],
    "partitioning": ["model", "coordinator", "worker"],
    "formats": ["model", "kernels", "partitioning", "tokenizer", "chat", "step", "coordinator", "worker"],
    "step": ["model", "kernels", "formats", "coordinator", "worker", "proto"],
    "common": ["model", "kernels", "formats", "step", "coordinator", "worker", "tokenizer", "state"],
    # The state store holds rows and SQL: no model, no serving, no OpenAI shapes.
    "state": ["coordinator", "worker", "model", "kernels", "partitioning", "tokenizer", "chat", "jinja",
              "constraints", "step", "proto", "formats"],
    # Inside the coordinator: engine < group < serving < front ends; front ends are siblings.
    "coordinator/engine": ["coordinator/group", "coordinator/serving", "coordinator/http"] + FRONT_ENDS + SHARED,
    "coordinator/events": ["coordinator/engine", "coordinator/group", "coordinator/serving",
                           "coordinator/http"] + FRONT_ENDS + SHARED,
    "coordinator/group": ["coordinator/serving", "coordinator/http"] + FRONT_ENDS + SHARED,
    "coordinator/serving": ["coordinator/http"] + FRONT_ENDS + SHARED,
    "coordinator/http": ["coordinator/serving"] + FRONT_ENDS + SHARED,
    "coordinator/openai_wire": FRONT_ENDS + ["state"],
    "coordinator/grpc": ["coordinator/openai", "coordinator/router", "coordinator/http", "coordinator/stateful",
                         "coordinator/ollama"] + SHARED,
    "coordinator/openai": ["coordinator/grpc", "coordinator/router", "coordinator/stateful", "coordinator/ollama",
                           "state"],
    # vLLM's engine protocol reuses grpc/'s call plumbing (FORBIDDEN keeps shardlm.v1 out).
    "coordinator/router": ["coordinator/openai", "coordinator/http", "coordinator/stateful",
                           "coordinator/ollama"] + SHARED,
    # The stateful APIs: a sibling of openai/ over openai_wire/, storing through state/.
    "coordinator/stateful": ["coordinator/grpc", "coordinator/openai", "coordinator/router", "coordinator/ollama"],
    # Ollama's API: a sibling of openai/ over openai_wire/'s generic pieces; no state store.
    "coordinator/ollama": ["coordinator/grpc", "coordinator/openai", "coordinator/router", "coordinator/stateful",
                           "state"],
}
# unit -> include patterns it must not use, with why.
NO_GRPC = [(r"^shardlm/v1/", "shardlm.v1 messages"), (r"^grpcpp?/", "gRPC"),
           (r"^common/grpc_", "gRPC status helpers")]
FORBIDDEN = {
    "coordinator/openai_wire": NO_GRPC,
    "coordinator/stateful": NO_GRPC,
    "coordinator/ollama": NO_GRPC,
    "state": [(r"^(torch|ATen|c10)/", "torch"), (r"^shardlm/", "protobuf messages"), (r"^grpcpp?/", "gRPC")],
    "coordinator/openai": [(r"^shardlm/v1/", "shardlm.v1 messages"), (r"^grpcpp?/", "gRPC"),
                           (r"^common/grpc_", "gRPC status helpers")],
    "coordinator/router": [(r"^shardlm/v1/", "shardlm.v1 messages"),
                           (r"^coordinator/grpc/(inference_service|proto_convert)\.h$", "shardlm.v1's service")],
    "coordinator/serving": [(r"^shardlm/", "protobuf messages"), (r"^grpcpp?/", "gRPC"),
                            (r"^common/grpc_", "gRPC status helpers")],
    "coordinator/http": [(r"^shardlm/", "protobuf messages"), (r"^grpcpp?/", "gRPC")],
    "coordinator/events": [(r"^(torch|ATen|c10)/", "torch"), (r"^shardlm/", "protobuf messages"),
                           (r"^grpcpp?/", "gRPC")],
    "coordinator/engine": [(r"^(torch|ATen|c10)/", "torch"), (r"^shardlm/", "protobuf messages"),
                           (r"^grpcpp?/", "gRPC")],
    "formats": [(r"^(torch|ATen|c10)/", "torch")],
    "step": [(r"^(torch|ATen|c10)/", "torch"), (r"^shardlm/", "protobuf messages")],
}
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 500
FILE_SIZE_EXCEPTIONS = ("jinja/",)

INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')


def product_files(root):
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                             check=True, capture_output=True, text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
    return sorted(f for f in out if f.endswith(PRODUCT_EXTENSIONS) and not f.startswith(NOT_PRODUCT)
                  and os.path.isfile(os.path.join(root, f)))


def unit_of(path):
    parts = path.split("/")
    if parts[0] == "coordinator" and len(parts) > 2:
        return "coordinator/" + parts[1]
    return parts[0] if len(parts) > 1 else ""


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1), m.group(2)


def covers(prefix, unit):
    return unit == prefix or unit.startswith(prefix + "/")


def check_layering(root, files):
    problems = []
    graph = {}
    for path in files:
        unit = unit_of(path)
        rules = [(k, v) for k, v in RULES.items() if covers(k, unit)]
        for number, quote, target in includes(root, path):
            where = f"{path}:{number}"
            for pattern, what in FORBIDDEN.get(unit, []):
                if re.match(pattern, target):
                    problems.append(f"{where}: {unit} must not include {what} ({target})")
            if quote != '"' or "/" not in target:
                continue
            target_unit = unit_of(target)
            if not os.path.exists(os.path.join(root, target)) or target_unit in ("", unit):
                continue
            graph.setdefault(unit, set()).add(target_unit)
            for owner, banned in rules:
                for b in banned:
                    if covers(b, target_unit):
                        problems.append(f"{where}: {unit} must not include {target_unit} ({target}; rule for {owner})")
    problems += [f"cycle between folders: {' -> '.join(c)}" for c in cycles(graph)]
    return problems


def cycles(graph):
    """Each strongly connected component of more than one unit, as a path around it."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component) + [sorted(component)[0]])

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def check_sizes(root, files):
    ctags = shutil.which("ctags")
    if ctags is None:
        return ["universal-ctags is not installed (scripts/setup.sh installs it): function sizes unchecked"]
    run = subprocess.run([ctags, "--output-format=json", "--fields=+ne", "--kinds-c++=f", "--language-force=C++",
                          "-f", "-"] + files, cwd=root, capture_output=True, text=True)
    if run.returncode != 0:
        return [f"ctags failed: {run.stderr.strip()}"]
    problems = []
    for line in run.stdout.splitlines():
        tag = json.loads(line)
        if "end" not in tag:
            continue
        length = tag["end"] - tag["line"] + 1
        if length > MAX_FUNCTION_LINES:
            problems.append(f"{tag['path']}:{tag['line']}: {tag['name']} is {length} lines "
                            f"(at most {MAX_FUNCTION_LINES})")
    for path in files:
        if path.startswith(FILE_SIZE_EXCEPTIONS):
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_FILE_LINES:
            problems.append(f"{path}: {lines} lines (at most {MAX_FILE_LINES})")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=".")
    args = parser.parse_args()
    files = product_files(args.root)
    if not files:
        print("check_layout: no product files found under", args.root)
        return 1
    problems = check_layering(args.root, files) + check_sizes(args.root, files)
    for p in problems:
        print(p)
    print(f"check_layout: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
