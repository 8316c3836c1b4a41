#!/usr/bin/env bash
# Runs HERE (a Debian 12 machine with the package registry): downloads the Debian packages the
# CUDA variant needs besides what the GPU machine has (CUDA, NCCL, PyTorch), with their library
# dependencies, into third_party/gpu-debs (git-ignored). Carry that folder to the GPU machine
# (the device tool's `carry`) and run scripts/gpu/build.sh there. docs/gpu.md has the steps.
#   scripts/gpu/bundle.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$here/third_party/gpu-debs"
mkdir -p "$out"
# The -dev packages of scripts/setup.sh, less libtorch (PyTorch's comes with the GPU machine).
WANTED=(
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto
  libgoogle-glog-dev libgflags-dev libgtest-dev libgmock-dev libabsl-dev
  nlohmann-json3-dev libpcre2-dev libboost1.74-dev libcli11-dev libyaml-cpp-dev libgloo-dev
  libicu-dev pkgconf
)
# The C library, the compiler's runtime and packaging tools are the GPU machine's own: a second
# copy on LD_LIBRARY_PATH would break every program there.
BASE='^(libc6|libc6-dev|libc-dev-bin|libgcc-s1|libstdc\+\+6|gcc-12-base|libcrypt1|libcrypt-dev|dpkg|debconf|cdebconf|adduser|install-info|perl-base|libselinux1|libpam.*|libaudit.*|libcap-ng0|libacl1|libmd0|libdb5\.3|libsemanage.*|libsepol2|libdebian-installer4|libnewt0\.52|libslang2|libtextwrap1|libtinfo6|libreadline8|linux-libc-dev|libnsl.*|libtirpc.*|libssl3|libssl-dev|libkrb5.*|libk5crypto3|libgssapi-krb5-2|libcom-err2|libkeyutils1|zlib1g|zlib1g-dev|libzstd1|liblzma5|libbz2-1\.0|readline-common|tzdata|sensible-utils|libgmp10|libffi8)$'
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${WANTED[@]}" | grep -E '^[a-z0-9]' | sort -u | grep -Ev "$BASE")
echo "bundle: ${#closure[@]} packages into $out"
(cd "$out" && apt-get download "${closure[@]}" >/dev/null)
du -sh "$out"
