#!/usr/bin/env python3
"""shardlm's dequantization of every GGUF block format it reads (formats/quant_blocks.h) against
gguf-py's (the code transformers loads GGUF files with), bit for bit.

A GGUF file is written with gguf-py holding, for each of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
Q4_K, Q5_K and Q6_K, a tensor of random blocks (every quant bit pattern random, the f16 scales
random finite values, some negative and some subnormal); `dequantize_gguf` dequantizes each and
the f32 bits must equal gguf.quants.dequantize's. With --gguf FILE the real file's block tensors
are compared too (each of its types, the first tensors of each up to --per-type).

Usage: check_dequantize.py --tool build/tests/dequantize_gguf --workdir DIR [--gguf FILE]
"""
import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

TYPES = [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
# Where each block's f16 fields are (byte offsets), so that they can be made finite.
HALF_OFFSETS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q2_K: [80, 82],
                T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}


def random_blocks(qtype, n_blocks, rng):
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    halves = rng.normal(0, 0.05, size=(n_blocks, len(HALF_OFFSETS[qtype]))).astype(np.float16)
    halves[::7] = np.float16(3e-6)  # subnormal scales too
    for k, off in enumerate(HALF_OFFSETS[qtype]):
        raw[:, off:off + 2] = halves[:, k:k + 1].view(np.uint8).reshape(n_blocks, 2)
    return raw, block_size


def compare(tool, workdir, path, expect):
    """Runs the tool on `path` and compares every tensor named in `expect` (name -> f32 array)."""
    out = os.path.join(workdir, "out")
    os.makedirs(out, exist_ok=True)
    import subprocess
    p = subprocess.run([tool, path, out] + list(expect), capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print("FAIL dequantize_gguf: %s" % p.stderr)
        return False
    ok = True
    for name, want in expect.items():
        got = np.fromfile(os.path.join(out, name + ".f32"), dtype=np.float32)
        same = got.size == want.size and np.array_equal(got.view(np.uint32), want.reshape(-1).view(np.uint32))
        diff = int(np.count_nonzero(got.view(np.uint32) != want.reshape(-1).view(np.uint32))) if got.size == want.size else -1
        print("%s %s: %d weights%s" % ("ok  " if same else "FAIL", name, want.size,
                                       "" if same else " (%d differ)" % diff))
        ok &= same
    return ok


def random_file(args):
    rng = np.random.default_rng(20261129)
    path = os.path.join(args.workdir, "blocks.gguf")
    w = gguf.GGUFWriter(path, "llama")
    expect = {}
    for qtype in TYPES:
        raw, block_size = random_blocks(qtype, 64, rng)
        rows = 4
        data = raw.reshape(rows, -1)
        name = "t_" + qtype.name
        w.add_tensor(name, data, raw_dtype=qtype)
        expect[name] = gguf.quants.dequantize(data, qtype).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return compare(args.tool, args.workdir, path, expect)


def real_file(args):
    reader = gguf.GGUFReader(args.gguf)
    expect, seen = {}, {}
    for t in reader.tensors:
        if t.tensor_type not in TYPES or seen.get(t.tensor_type, 0) >= args.per_type:
            continue
        seen[t.tensor_type] = seen.get(t.tensor_type, 0) + 1
        expect[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    print("real file %s: %s" % (os.path.basename(args.gguf), {T(k).name: v for k, v in seen.items()}))
    return compare(args.tool, args.workdir, args.gguf, expect)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--gguf", action="append", default=[])
    ap.add_argument("--per-type", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    ok = random_file(args)
    for path in args.gguf:
        args_one = argparse.Namespace(**vars(args))
        args_one.gguf = path
        ok &= real_file(args_one)
    print("dequantize: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
