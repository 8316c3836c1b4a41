#!/usr/bin/python3
"""tp 2 across real network interfaces: coordinator and workers each in their own network namespace.

Three namespaces stand for three hosts, each with one veth interface on a bridge (in a fourth
namespace, the switch) and a private address the test assigns: coordinator 10.213.0.1, worker
rank 0 10.213.0.2, worker rank 1 10.213.0.3. Nothing of the machine's own network is touched.

Checks:
  - the group forms over the bridge (workers registered from their own addresses) and greedy
    output through it equals `generate --tp 2` on loopback;
  - the workers' collectives cross the wire: rank 1 holds a TCP connection to rank 0's address
    and its interface counted the traffic;
  - taking rank 1's link down fails the next call UNAVAILABLE naming rank 1 and turns the
    coordinator NOT_SERVING (the recovery path of docs/recovery.md);
  - bringing it back up re-forms the group (epoch 2) without restarting any process, and the
    output is the same again.

Where network namespaces cannot be made (no root, no CAP_SYS_ADMIN, no `ip`), it prints why and
exits 77, which ctest reports as skipped.

Usage:
  /usr/bin/python3 tests/integration/multihost_test.py --shardlm build/shardlm --workdir DIR
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
from harness import Checker, LoggedProcess  # noqa: E402

SKIP = 77
SUBNET = "10.213.0"
HOSTS = {"c": 1, "w0": 2, "w1": 3}
MODEL_FLAGS = ["--arch", "llama", "--hidden-size", "128", "--num-heads", "4", "--num-kv-heads", "2",
               "--intermediate-size", "256", "--num-layers", "4", "--seed", "91", "--dtype", "f32", "--no-tokenizer"]
PROMPT_IDS = "5,17,230,41,77,8,19,300,12,9"


def sh(*args, check=True):
    p = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(map(str, args)), p.returncode, p.stdout.decode()))
    return p.stdout.decode()


class Net:
    """The namespaces and links; removed again by close()."""

    def __init__(self):
        tag = "slm%d" % os.getpid()
        self.ns = {h: "%s-%s" % (tag, h) for h in list(HOSTS) + ["sw"]}
        self.made = []

    def up(self):
        for name in self.ns.values():
            sh("ip", "netns", "add", name)
            self.made.append(name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        sw = self.ns["sw"]
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for host, last in HOSTS.items():
            ns, port = self.ns[host], "p-" + host
            sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", sw)
            sh("ip", "-n", sw, "link", "set", port, "master", "br0")
            sh("ip", "-n", sw, "link", "set", port, "up")
            sh("ip", "-n", ns, "addr", "add", "%s.%d/24" % (SUBNET, last), "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def addr(self, host):
        return "%s.%d" % (SUBNET, HOSTS[host])

    def exec_args(self, host, args):
        return ["ip", "netns", "exec", self.ns[host]] + [str(a) for a in args]

    def link(self, host, state):
        sh("ip", "-n", self.ns[host], "link", "set", "eth0", state)

    def bytes(self, host):
        out = json.loads(sh("ip", "-n", self.ns[host], "-j", "-s", "link", "show", "eth0"))
        stats = out[0]["stats64"]
        return stats["rx"]["bytes"] + stats["tx"]["bytes"]

    def close(self):
        for name in reversed(self.made):
            sh("ip", "netns", "del", name, check=False)


def can_make_namespaces():
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    name = "slmprobe%d" % os.getpid()
    p = subprocess.run(["ip", "netns", "add", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        return "`ip netns add` failed: %s" % p.stdout.decode().strip()
    subprocess.run(["ip", "netns", "del", name])
    return None


def generate(args, timeout=120):
    p = subprocess.run(args + ["--prompt-ids", PROMPT_IDS, "--max-new-tokens", "12", "--temperature", "0",
                               "--ignore-eos", "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    out = p.stdout.decode()
    lines = [l for l in out.splitlines() if l.startswith("{")]
    tokens = json.loads(lines[-1])["token_ids"] if p.returncode == 0 and lines else None
    return p.returncode, tokens, p.stderr.decode()


def run(binary, workdir):
    chk = Checker()
    os.makedirs(workdir, exist_ok=True)
    model = os.path.join(workdir, "model")
    if not os.path.isdir(model):
        sh(binary, "make-tiny-model", model, *MODEL_FLAGS)
    token = os.path.join(workdir, "token")
    with open(token, "w") as f:
        f.write("multihost-token-0123456789abcdef0123\n")
    rc, expected, err = generate([binary, "generate", "--model", model, "--tp", "2"])
    if expected is None:
        raise RuntimeError("loopback reference failed: %s" % err[-800:])

    net = Net()
    procs = []
    try:
        net.up()
        caddr = net.addr("c")
        coord = LoggedProcess(net.exec_args("c", [
            binary, "coordinator", "--model", model, "--tp", 2, "--host", caddr, "--port", 50051,
            "--worker-listen", "%s:50052" % caddr, "--internal-token-file", token,
            "--collective-timeout-ms", 3000]), os.path.join(workdir, "coordinator.log"))
        procs.append(coord)
        workers = []
        for rank, host in enumerate(("w0", "w1")):
            # Each "host" also gets its own /dev/shm (a private tmpfs in a
            # mount namespace), as separate machines have: the workers must
            # find that shared memory is not shared and use Gloo over TCP.
            w = LoggedProcess(net.exec_args(host, [
                "unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" "$@"',
                binary, "worker", "--coordinator", "%s:50052" % caddr, "--model", model, "--rank", rank,
                "--listen", "%s:50053" % net.addr(host), "--advertise-host", net.addr(host),
                "--internal-token-file", token, "--coordinator-lost-ms", 120000]),
                              os.path.join(workdir, "worker%d.log" % rank))
            procs.append(w)
            workers.append(w)
        formed = coord.wait_for(r"shardlm serving", 90)
        chk.check(formed, "the group forms across the bridge")
        for rank, w in enumerate(workers):
            chk.check(w.wait_for(r"collectives over Gloo", 10),
                      "worker %d on its own host chose Gloo, not shared memory" % rank)
        if not formed:
            print(coord.text()[-1500:])
            return chk
        for rank, host in enumerate(("w0", "w1")):
            chk.check(re.search(r"worker %s:50053 registered for rank %d" % (re.escape(net.addr(host)), rank),
                                coord.text()) is not None,
                      "rank %d registered from its own address %s" % (rank, net.addr(host)))
        client = net.exec_args("c", [binary, "generate", "--server", "%s:50051" % caddr])
        before = net.bytes("w1")
        rc, tokens, err = generate(client)
        chk.check(tokens == expected, "greedy output over the bridge equals loopback tp 2: %s vs %s %s" %
                  (tokens, expected, err[-300:]))
        moved = net.bytes("w1") - before
        chk.check(moved > 20000, "rank 1's interface carried the step's traffic (%d bytes)" % moved)
        conns = sh(*net.exec_args("w1", ["ss", "-tnH", "state", "established"]))
        chk.check(re.search(r"\s%s:\d+\s+%s:\d+" % (re.escape(net.addr("w1")), re.escape(net.addr("w0"))),
                            conns) is not None or
                  re.search(r"%s:\d+\s*$" % re.escape(net.addr("w0")), conns, re.M) is not None,
                  "rank 1 holds a TCP connection to rank 0 (the collectives' mesh): %s" % conns.strip()[:400])

        # Rank 1's link goes down: the next call fails naming it and the group is marked broken.
        net.link("w1", "down")
        t0 = time.monotonic()
        rc, tokens, err = generate(client, timeout=90)
        took = time.monotonic() - t0
        chk.check(rc != 0 and "rank 1 at %s" % net.addr("w1") in err,
                  "with rank 1 unreachable the call fails naming rank 1 (%.1f s): %s" % (took, err.strip()[-300:]))
        chk.check(coord.wait_for(r"Generate status=UNAVAILABLE .*rank 1 at %s" % re.escape(net.addr("w1")), 20),
                  "the coordinator's request log has it UNAVAILABLE naming rank 1")
        chk.check(coord.wait_for(r"group failed: rank 1 at %s:50053 (is unreachable|did not answer)" %
                                 re.escape(net.addr("w1")), 20),
                  "the coordinator marks the group failed because of rank 1, not its healthy peer")
        # Give the coordinator time to begin epoch 2 while rank 1 is away, then bring it back.
        time.sleep(3)
        net.link("w1", "up")
        reformed = coord.wait_for(r"group formed again \(epoch 2", 90)
        chk.check(reformed, "with the link back the group is formed again in epoch 2")
        if not reformed:
            # What each process said while the group stayed down (ctest keeps only this output).
            for name, p in (("coordinator", coord), ("worker 0", workers[0]), ("worker 1", workers[1])):
                print("--- %s log, last lines:\n%s" % (name, "\n".join(p.text().splitlines()[-12:])))
        chk.check(all(p.proc.poll() is None for p in procs), "no process exited or was restarted")
        rc, tokens, err = generate(client)
        chk.check(tokens == expected, "the same greedy output after recovery: %s %s" % (tokens, err[-300:]))
    finally:
        for p in reversed(procs):
            p.stop()
        net.close()
    return chk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardlm", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    why = can_make_namespaces()
    if why:
        print("SKIP multihost: network namespaces cannot be made here: %s" % why)
        return SKIP
    t0 = time.monotonic()
    chk = run(os.path.abspath(args.shardlm), os.path.abspath(args.workdir))
    print("multihost: %s (%.1f s)" % ("PASS" if not chk.failures else "FAIL %d check(s)" % len(chk.failures),
                                      time.monotonic() - t0))
    return 1 if chk.failures else 0


if __name__ == "__main__":
    sys.exit(main())
