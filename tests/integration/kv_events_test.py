#!/usr/bin/python3
"""KV events (serve --kv-events-endpoint): the prefix cache's changes over ZeroMQ in vLLM's
format, read by a Python subscriber (Debian's pyzmq and msgpack), checked against the engine's
own state.

Cases (one `serve --tp 2` of a tiny f32 Llama with a 64-block cache, shared):
  stored_removed  a greedy generation publishes BlockStored for exactly its written full blocks
                  (token ids, chained parent hashes, block size 16, medium CPU, topic, rank 0);
                  prompts that overfill the cache evict blocks: BlockRemoved only of hashes
                  stored and not yet removed; then the blocks the events say are cached equal
                  the engine's shardlm_kv_cache_blocks{state="cached"}, and asking again for a
                  prompt reuses exactly the blocks of its chain the events say are left
  replay          the ROUTER replay socket returns every batch from a sequence number on, the
                  same bytes the subscriber got, then -1; sequence numbers run 0, 1, 2, ...
  cleared         a worker killed: the group is formed again on a new pool, and
                  AllBlocksCleared is published
  flag_errors     --kv-events-topic without --kv-events-endpoint, an endpoint with
                  --no-prefix-caching, and an endpoint that cannot be bound each fail at start,
                  naming the flag

Usage:
  /usr/bin/python3 tests/integration/kv_events_test.py --shardlm build/shardlm --workdir DIR [--only a,b]
"""

import os
import random
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import operations_test as ops  # noqa: E402  (the tiny model, `serve`, stubs)
import msgpack  # noqa: E402
import zmq  # noqa: E402

grpc, pb, sc = ops.grpc, ops.pb, ops.sc
BLOCK = 16
TOPIC = "kv@pod-0@tiny"
EVENTS_PORT = r"KV events on tcp://127\.0\.0\.1:(\d+)"
REPLAY_PORT = r"replay on tcp://127\.0\.0\.1:(\d+)"


class Subscriber:
    """A SUB socket on the topic: every message kept as (seq, payload bytes, decoded batch)."""

    def __init__(self, zctx, port):
        self.sock = zctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt_string(zmq.SUBSCRIBE, TOPIC)
        self.sock.connect("tcp://127.0.0.1:%d" % port)
        self.topics = set()
        self.got = []

    def drain(self, quiet_s=0.5, timeout_s=10):
        """Receives until nothing came for quiet_s."""
        until = time.monotonic() + timeout_s
        while time.monotonic() < until:
            if not self.sock.poll(int(quiet_s * 1000)):
                return
            topic, seq, payload = self.sock.recv_multipart()
            self.topics.add(topic.decode())
            self.got.append((int.from_bytes(seq, "big", signed=True), payload, msgpack.unpackb(payload)))

    def events(self):
        return [e for _, _, batch in self.got for e in batch[1]]


class KvCtx(ops.Ops):
    def __init__(self, workdir, args, binary):
        super().__init__(workdir, args, binary)
        self._srv = None
        self.zctx = zmq.Context()

    def server(self):
        if self._srv is None:
            self._srv = self.serve("kv-events", 2, "--kv-cache-mb", "1", "--metrics-port", 0,
                                   "--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-topic", TOPIC,
                                   "--kv-events-replay-endpoint", "tcp://127.0.0.1:*",
                                   "--collective-timeout-ms", "3000")
            self.events_port = self._srv.announced_port(EVENTS_PORT)
            self.replay_port = self._srv.announced_port(REPLAY_PORT)
            self.metrics_port = self._srv.announced_port(ops.METRICS_PORT)
            self.ch, self.st, _ = ops.stub(self._srv.port)
            # Subscribed before any request; a first batch lost to ZeroMQ's slow joiner is
            # checked against the replay socket's copy below.
            self.sub = Subscriber(self.zctx, self.events_port)
            time.sleep(0.5)
        return self._srv

    def close(self):
        if self._srv is not None:
            self.sub.sock.close()
            self.ch.close()
            self._srv.stop()
        self.zctx.term()


def generate(ctx, ids, n):
    """Greedy tokens and the final response's cached prompt tokens."""
    req = pb.GenerateRequest(prompt=pb.Prompt(token_ids=pb.TokenIds(ids=ids)), max_new_tokens=n,
                             sampling=pb.SamplingParams(temperature=0), ignore_eos=True)
    toks, cached = [], None
    for r in ctx.st.Generate(req, timeout=60):
        toks.extend(r.token_ids)
        if r.HasField("usage"):
            cached = r.usage.cached_tokens
    return toks, cached


def chain_of(events, tokens):
    """The hashes of `tokens`' full blocks as stored: BlockStored events linked by parent hash
    from a first block (parent nil) whose token ids are `tokens`' leading blocks."""
    by_parent = {}
    for e in events:
        if e[0] == "BlockStored":
            by_parent.setdefault(e[2], []).append(e)
    chain, parent, at = [], None, 0
    while True:
        nxt = [e for e in by_parent.get(parent, []) if e[3] == tokens[at:at + len(e[3])]]
        if not nxt:
            return chain
        e = nxt[0]
        chain.extend(e[1])
        parent, at = e[1][-1], at + len(e[3])


def live_hashes(chk, events):
    """Replays the events into the set of cached hashes, checking each removal."""
    live = set()
    for e in events:
        if e[0] == "BlockStored":
            if set(e[1]) & live:
                chk.check(False, "BlockStored of %d hash(es) already cached" % len(set(e[1]) & live))
            live.update(e[1])
        elif e[0] == "BlockRemoved":
            gone = set(e[1]) - live
            if gone:
                chk.check(False, "BlockRemoved of %d hash(es) never stored or removed twice" % len(gone))
            live -= set(e[1])
        elif e[0] == "AllBlocksCleared":
            live.clear()
    return live


def stored_removed(ctx, chk):
    ctx.server()
    rng = random.Random(5)
    prompt = [rng.randrange(1000, 30000) for _ in range(40)]
    n = 30
    toks, _ = generate(ctx, prompt, n)
    ctx.sub.drain()
    events = ctx.sub.events()
    written = prompt + toks[:-1]  # the last token's KV is written by the step that would follow it
    full = len(written) // BLOCK
    chain = chain_of(events, written)
    chk.check(len(chain) == full, "BlockStored chain of the generation: %d hashes for its %d full blocks"
              % (len(chain), full))
    stored = [e for e in events if e[0] == "BlockStored"]
    chk.check(stored and all(e[4] == BLOCK and e[5] is None and e[6] == "CPU" and len(e) == 7 for e in stored),
              "BlockStored [tag, hashes, parent, tokens, block size 16, LoRA nil, medium CPU]: %s"
              % (stored[:1],))
    chk.check(all(len(e[3]) == BLOCK * len(e[1]) for e in stored), "token ids: block size per hash")
    batch = ctx.sub.got[0][2] if ctx.sub.got else None
    chk.check(batch is not None and len(batch) == 3 and isinstance(batch[0], float) and batch[2] == 0,
              "batch [timestamp, events, data-parallel rank 0]: %s" % (batch[:1] if batch else None,))
    chk.check(ctx.sub.topics == {TOPIC}, "topic frame %s" % ctx.sub.topics)

    # Overfill the 64-block cache with other prompts: the oldest cached blocks are evicted.
    others = []
    for i in range(8):
        p = [rng.randrange(1000, 30000) for _ in range(150)]
        generate(ctx, p, 10)
        others.append(p)
    ctx.sub.drain()
    events = ctx.sub.events()
    removed = [h for e in events if e[0] == "BlockRemoved" for h in e[1]]
    chk.check(len(removed) > 0, "BlockRemoved once the cache overflowed (%d hashes)" % len(removed))
    chk.check(all(e[2] == "CPU" and len(e) == 3 for e in events if e[0] == "BlockRemoved"),
              "BlockRemoved [tag, hashes, medium]")
    live = live_hashes(chk, events)
    cached = ops.metric(ctx.metrics_port, 'shardlm_kv_cache_blocks{state="cached"}')
    chk.check(cached == len(live), "cached blocks by the events (%d) = shardlm_kv_cache_blocks{state=\"cached\"} "
              "(%d)" % (len(live), cached))

    # The engine reuses what the events say is cached, no more, no less.
    for name, p in (("the first prompt", prompt), ("the last prompt", others[-1])):
        chain = chain_of(events, p)
        present = 0
        for h in chain:
            if h not in live:
                break
            present += 1
        usable = min(present, (len(p) - 1) // BLOCK)
        _, got = generate(ctx, p, 1)
        chk.check(got == usable * BLOCK, "%s again: %d cached tokens, the events say %d" %
                  (name, got, usable * BLOCK))


def replay(ctx, chk):
    ctx.server()
    generate(ctx, [7, 8, 9] * 20, 5)
    ctx.sub.drain()
    dealer = ctx.zctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect("tcp://127.0.0.1:%d" % ctx.replay_port)
    try:
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        replayed = []
        while dealer.poll(5000):
            empty, seq, payload = dealer.recv_multipart()
            seq = int.from_bytes(seq, "big", signed=True)
            if seq == -1:
                chk.check(payload == b"", "the replay ends with -1 and an empty payload")
                break
            replayed.append((seq, payload))
        else:
            chk.check(False, "the replay ended")
        seqs = [s for s, _ in replayed]
        chk.check(seqs == list(range(len(seqs))) and seqs, "replay from 0: batches 0..%d in order"
                  % (len(seqs) - 1))
        mine = {s: p for s, p, _ in ctx.sub.got}
        chk.check(mine and all(mine[s] == p for s, p in replayed if s in mine),
                  "the same bytes as the subscriber got (%d of %d batches seen live)" % (len(mine), len(seqs)))
        chk.check(sorted(mine) == seqs[-len(mine):], "the subscriber saw every batch after its first")
        start = seqs[-1]
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        tail = []
        while dealer.poll(5000):
            _, seq, _ = dealer.recv_multipart()
            tail.append(int.from_bytes(seq, "big", signed=True))
            if tail[-1] == -1:
                break
        chk.check(tail == [start, -1], "replay from the last number: that batch, then -1 (%s)" % tail)
    finally:
        dealer.close()


def cleared(ctx, chk):
    srv = ctx.server()
    generate(ctx, [11, 12, 13] * 20, 5)
    ctx.sub.drain()
    before = len(ctx.sub.got)
    workers = ops.workers_of(srv.proc.pid)
    os.kill(workers[1], signal.SIGKILL)
    until = time.monotonic() + ops.RECOVER_TIMEOUT_S
    ok = False
    while time.monotonic() < until and not ok:
        try:
            generate(ctx, [1, 2, 3], 1)
            ok = True
        except grpc.RpcError:
            time.sleep(0.5)
    chk.check(ok, "serving again after the group was formed anew")
    ctx.sub.drain()
    later = [e for _, _, b in ctx.sub.got[before:] for e in b[1]]
    chk.check(["AllBlocksCleared"] in later, "AllBlocksCleared published: %s" % [e[0] for e in later][:5])
    live = live_hashes(chk, ctx.sub.events())
    cached = ops.metric(ctx.metrics_port, 'shardlm_kv_cache_blocks{state="cached"}')
    chk.check(cached == len(live), "after it, the events' cached blocks (%d) = the engine's (%d)"
              % (len(live), cached))


def flag_errors(ctx, chk):
    base = [ctx.binary, "serve", "--model", ctx.model, "--port", "0"]
    for extra, want in (
            (["--kv-events-topic", "t"], "--kv-events-replay-endpoint and --kv-events-topic need "
                                         "--kv-events-endpoint"),
            (["--kv-events-endpoint", "tcp://127.0.0.1:*", "--no-prefix-caching"], "--no-prefix-caching"),
            (["--kv-events-endpoint", "tcp://256.0.0.1:*"], "--kv-events-endpoint: cannot bind"),
            (["--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-replay-endpoint", "bogus"],
             "--kv-events-replay-endpoint: cannot bind")):
        p = subprocess.run(base + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode(errors="replace")
        chk.check(p.returncode != 0 and want in out, "%s: exit %d, says %r" % (" ".join(extra), p.returncode,
                                                                            out.strip()[-200:]))


CASES = [("stored_removed", stored_removed), ("replay", replay), ("cleared", cleared),
         ("flag_errors", flag_errors)]

if __name__ == "__main__":
    sys.exit(ops.run_main(__doc__, CASES, "kv_events", KvCtx))
