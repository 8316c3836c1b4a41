#!/usr/bin/env bash
# Fetches o200k_base.tiktoken, which SGLang's model gateway (sglang-router) loads at start-up for
# its Harmony (gpt-oss) encoder even when no gpt-oss model is served, and otherwise downloads from
# a host the test machines cannot reach. It comes from the tiktoken-rs crate on crates.io, which
# ships it; the crate and the file are checked against pinned SHA-256 sums (the file's is also the
# one the gateway's Harmony library checks). The gateway is pointed at the folder with
# TIKTOKEN_ENCODINGS_BASE (tests/integration/gateway_test.py, docs/routers.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$here/third_party/tiktoken"
file="$dir/o200k_base.tiktoken"
crate_url="https://static.crates.io/crates/tiktoken-rs/tiktoken-rs-0.7.0.crate"
crate_sha256="25563eeba904d770acf527e8b370fe9a5547bacd20ff84a0b6c3bc41288e5625"
file_sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

check() {  # FILE SHA256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}
if check "$file" "$file_sha256"; then exit 0; fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL --retry 3 -o "$tmp/crate.tar.gz" "$crate_url"
if ! check "$tmp/crate.tar.gz" "$crate_sha256"; then
  echo "setup: $crate_url does not have the pinned SHA-256 $crate_sha256" >&2
  exit 1
fi
tar -xzf "$tmp/crate.tar.gz" -C "$tmp" tiktoken-rs-0.7.0/assets/o200k_base.tiktoken
if ! check "$tmp/tiktoken-rs-0.7.0/assets/o200k_base.tiktoken" "$file_sha256"; then
  echo "setup: o200k_base.tiktoken in the crate does not have the pinned SHA-256 $file_sha256" >&2
  exit 1
fi
mv "$tmp/tiktoken-rs-0.7.0/assets/o200k_base.tiktoken" "$file"
echo "setup: tiktoken encoding ok ($file)"
