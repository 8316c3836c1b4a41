#!/usr/bin/env python3
"""The floor of a conversation turn for bench/stateful_bench.py: shardlm.v1 over gRPC (Debian's
python3-grpcio, examples/python/shardlm_client.py), a history of `history` token ids prefilled
and kept as a ChunkResult, then one Generate per turn that sends only that turn's new tokens
after the previous turn's handle (return_chunk_result: each turn's handle holds the whole
conversation). Prints one JSON list: each turn's seconds to its first token.

  python3 bench/stateful_floor.py ADDRESS HISTORY_TOKENS NEW_TOKENS,NEW_TOKENS,... REPLY_TOKENS
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "python"))
import shardlm_client as sc  # noqa: E402


def ids(n, salt):
    return [(i * 37 + salt) % 20000 + 100 for i in range(n)]


def main(argv):
    address, history, news, reply = argv[0], int(argv[1]), [int(x) for x in argv[2].split(",")], int(argv[3])
    c = sc.Client(address, timeout=600)
    handle = c.prefill([ids(history, 0)], keep=True)[0]["handle"]
    firsts = []
    for turn, n in enumerate(news):
        t0 = time.perf_counter()
        first = None
        kept = None
        for msg in c.generate_stream(ids(n, turn + 1), prefix_handle=handle, max_new_tokens=reply, temperature=0,
                                     ignore_eos=True, return_chunk_result=True):
            if first is None and msg.token_ids:
                first = time.perf_counter() - t0
            for r in msg.results:
                if r.HasField("chunk_result"):
                    kept = r.chunk_result.handle
        c.release([handle])
        handle = kept
        firsts.append(first)
    c.release([handle])
    print(json.dumps(firsts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
