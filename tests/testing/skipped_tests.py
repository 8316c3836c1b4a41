#!/usr/bin/env python3
"""Lists the tests a ctest run skipped, with why; under CI=true, fails on a skip the machine does not explain.

    python3 tests/testing/skipped_tests.py build/ctest-junit.xml     (written by ctest --output-junit)

ctest counts a test that exits with its SKIP_RETURN_CODE (77 here) or prints gtest's
"[  SKIPPED ]" as not run, and still passes. Each such test is printed with the reason it gave.
A skip is expected where the test needs what this machine lacks:
  - a GPU (the name or the skip's reason says cuda, nccl or gpu) where `nvidia-smi -L` lists none;
  - AVX-512 (avx512 in the name) on a CPU without avx512f, avx512bw, avx512vl and avx512_bf16;
  - AVX2 (avx2 in the name) on a CPU without avx2, fma and f16c;
  - network namespaces (integration.multihost: no root, no CAP_SYS_ADMIN or no `ip`).
Every skip is printed, explained or not, under a banner naming what did not run. Under CI=true
any other skip fails (exit 1): a path that did not run is a path CI did not check.
Without CI=true the list is only printed.
"""
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ISA_FLAGS, cpu_flags  # noqa: E402


def has_gpu():
    if shutil.which("nvidia-smi") is None:
        return False
    p = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return p.returncode == 0 and "GPU" in p.stdout


def lacking(name, why, flags, gpu):
    """What this machine lacks that the test named `name`, skipped saying `why`, needs, or None."""
    low = name.lower()
    if re.search(r"cuda|nccl|gpu", low + " " + why.lower()) and not gpu:
        return "no GPU here"
    if "avx512" in low and not ISA_FLAGS["avx512"] <= flags:
        return "no AVX-512 here"
    if "avx2" in low and not ISA_FLAGS["avx2"] <= flags:
        return "no AVX2 here"
    if "namespaces cannot be made" in why:
        return "no network namespaces here (the cross-host path did not run)"
    return None


def reason(case):
    """The skip's own words: the line after gtest's "file:line: Skipped", or a script's "SKIP ..."
    line, else ctest's message."""
    lines = (case.findtext("system-out") or "").splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1].strip():
            return lines[i + 1].strip()
        if line.startswith("SKIP"):
            return line.strip()
    skipped = case.find("skipped")
    return (skipped.get("message") if skipped is not None else "") or "no reason given"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tests/testing/skipped_tests.py CTEST_JUNIT_XML")
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
    skipped = [c for c in cases if c.find("skipped") is not None or c.get("status") == "notrun"]
    flags, gpu = cpu_flags(), has_gpu()
    unexplained = []
    for c in skipped:
        name, said = c.get("name"), reason(c)
        why = lacking(name, said, flags, gpu)
        print("SKIPPED %s: %s%s" % (name, said, "" if why else "  <- not explained by this machine"))
        if why is None:
            unexplained.append(name)
    if skipped:
        print("=" * 72)
        print("skipped_tests: these paths did NOT run on this machine:")
        for c in skipped:
            print("  %s" % c.get("name"))
        print("=" * 72)
    print("skipped_tests: %d skipped, %d not explained by this machine (%s, %s)"
          % (len(skipped), len(unexplained), "GPU" if gpu else "no GPU",
             "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"))
    if unexplained and os.environ.get("CI") == "true":
        print("skipped_tests: CI=true, and %d test(s) did not run: %s" % (len(unexplained), ", ".join(unexplained)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
