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

ldd_out="$(ldd "$build/shardlm")"
! grep -q "not found" <<<"$ldd_out" || fail "$(grep "not found" <<<"$ldd_out")"
for lib in libcudart.so libcublas.so libnccl.so libtorch_cuda.so libtorch_cpu.so; do
  sources="$(awk -v l="$lib" 'index($1, l) == 1 {print $3}' <<<"$ldd_out" | xargs -r -n1 readlink -f | sort -u)"
  [ "$(wc -l <<<"$sources")" = 1 ] && [ -n "$sources" ] || fail "$lib from several files or none: $sources"
  case "$sources" in */site-packages/*) ;; *) fail "$lib from $sources, not the wheels" ;; esac
done

needed="$(readelf -d "$build/shardlm" | awk '/NEEDED/ {gsub(/[][]/, "", $5); print $5}')"
line() { grep -n -m1 "^$1" <<<"$needed" | cut -d: -f1; }
[ "$(line libstdc++)" -lt "$(line libtorch)" ] || fail "libstdc++ is needed after libtorch"
[ "$(line libgloo)" -lt "$(line libtorch)" ] || fail "Debian's Gloo is needed after libtorch"
echo "check_build: ok ($build: one c10, one cudart/cuBLAS/NCCL/libtorch from the wheels, libstdc++ and Gloo first)"
