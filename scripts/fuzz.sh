#!/usr/bin/env bash
# Builds the safetensors header fuzzer with clang + libFuzzer + ASan/UBSan and
# runs it for FUZZ_SECONDS (default 300) on a seed corpus of real headers.
#   bash scripts/fuzz.sh            # or: FUZZ_SECONDS=60 bash scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-fuzz
mkdir -p "$out" fuzz/corpus
# shellcheck disable=SC2046
clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
  fuzz/safetensors_header_fuzzer.cc model/safetensors.cc \
  $(pkg-config --cflags --libs absl_status absl_statusor absl_strings) \
  -o "$out/safetensors_header_fuzzer"
# Seeds: headers of real checkpoints written by make-tiny-model (first 64 KiB).
if [ -x build/shardlm ] && [ -z "$(ls -A fuzz/corpus)" ]; then
  tmp=$(mktemp -d)
  build/shardlm make-tiny-model "$tmp/m" --no-tokenizer --vocab-size 64 --hidden-size 8 --num-heads 2 \
    --num-kv-heads 1 --intermediate-size 16 --shards 2 >/dev/null
  for f in "$tmp"/m/*.safetensors; do head -c 65536 "$f" > "fuzz/corpus/$(basename "$f")"; done
  rm -rf "$tmp"
fi
"$out/safetensors_header_fuzzer" -max_total_time="${FUZZ_SECONDS:-300}" -max_len=65536 \
  -print_final_stats=1 fuzz/corpus
