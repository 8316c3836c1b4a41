#!/usr/bin/env bash
# Checks a CUDA-variant build (scripts/cuda/configure.sh) for the library clashes that compile and
# link but break at run time on a GPU machine (docs/gpu.md):
#   - no translation unit saw Debian's libtorch headers (/usr/include/{c10,ATen,torch}) beside
#     the wheel's: two c10 configurations (glog's LOG and c10's own) in one binary;
#   - the binary loads one cudart, cuBLAS, NCCL and libtorch, the wheels' (ldd);
#   - libstdc++ and Debian's Gloo come before libtorch in its needed libraries (the wheel exports
#     copies of both, and the first library loaded wins every lookup).
#   scripts/cuda/check_build.sh [BUILD_DIR]        (default: build-cuda)
set -euo pipefail
build="${1:-build-cuda}"
fail() { echo "check_build: FAIL: $*" >&2; exit 1; }

debian_headers="$(ninja -C "$build" -t deps | awk '/^[^ ].*: #deps/ {obj = $1}
  /\/usr\/include\/(c10|ATen|torch)\// {print obj}' | sort -u)"
[ -z "$debian_headers" ] || fail "these saw Debian's libtorch headers: $debian_headers"

# shellcheck disable=SC1091
source "$(dirname "${BASH_SOURCE[0]}")/../gpu/ldd_checks.sh"
ldd_checks "$(ldd "$build/shardlm")" "*/site-packages/*" >/dev/null

needed="$(readelf -d "$build/shardlm" | awk '/NEEDED/ {gsub(/[][]/, "", $5); print $5}')"
line() { grep -n -m1 "^$1" <<<"$needed" | cut -d: -f1; }
[ "$(line libstdc++)" -lt "$(line libtorch)" ] || fail "libstdc++ is needed after libtorch"
[ "$(line libgloo)" -lt "$(line libtorch)" ] || fail "Debian's Gloo is needed after libtorch"
echo "check_build: ok ($build: one c10, one cudart/cuBLAS/NCCL/libtorch from the wheels, libstdc++ and Gloo first)"
