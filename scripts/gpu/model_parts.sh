#!/usr/bin/env bash
# Carries a model file larger than one call's carry (64 MiB with the bundle) to the GPU machine in
# parts over several calls of a warm machine, which keeps ignored files between calls, and joins
# them there with their checksum checked.
#
# HERE:   scripts/gpu/model_parts.sh split FILE FIRST_MB
#           parts of FILE under third_party/gpu-bundle/parts/ (git-ignored): the first FIRST_MB MiB
#           (what the first call's carry has room for beside the bundle), the rest 60 MiB each, and
#           NAME.sha256. Carry third_party/gpu-bundle/parts/NAME.sha256 and part 0 with the bundle,
#           each later part in a call of its own.
# THERE:  scripts/gpu/model_parts.sh join NAME OUT
#           joins third_party/gpu-bundle/parts/NAME.part* into OUT and checks it against
#           NAME.sha256; exits 1 (OUT removed) when a part is missing or the sum differs.
#
# SmolLM2's Q4_1 file (94 MiB) beside the 50 MiB bundle: split FILE 12 gives 3 parts, 3 calls;
# then SHARDLM_GGUF=OUT scripts/gpu/test.sh checks it (step quantized_weights).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
parts="$here/third_party/gpu-bundle/parts"
case "${1:-}" in
  split)
    file=$2 first_mb=$3
    name=$(basename "$file")
    mkdir -p "$parts"
    rm -f "$parts/$name".part*
    (cd "$(dirname "$file")" && sha256sum "$name") >"$parts/$name.sha256"
    head -c "$((first_mb << 20))" "$file" >"$parts/$name.part00"
    tail -c "+$(((first_mb << 20) + 1))" "$file" | split -b 60M -d -a 2 --numeric-suffixes=1 - "$parts/$name.part"
    ls -l "$parts/$name".*
    ;;
  join)
    name=$2 out=$3
    [ -f "$parts/$name.sha256" ] || { echo "no $parts/$name.sha256: carry it with part 00" >&2; exit 1; }
    cat "$parts/$name".part* >"$out"
    if [ "$(sha256sum <"$out" | cut -d' ' -f1)" != "$(cut -d' ' -f1 "$parts/$name.sha256")" ]; then
      echo "$out: the joined parts do not match $name.sha256 (a part missing or cut short)" >&2
      ls -l "$parts/$name".part* >&2
      rm -f "$out"
      exit 1
    fi
    echo "$out: $(stat -c %s "$out") bytes, sha256 as recorded"
    ;;
  *)
    echo "usage: $0 split FILE FIRST_MB | join NAME OUT" >&2
    exit 2
    ;;
esac
