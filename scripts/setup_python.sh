#!/usr/bin/env bash
# Makes the project's virtual environment .venv from scripts/requirements.txt (every
# package pinned, installed with --no-deps). Re-run when the requirements change; a stamp
# holding their hash makes a re-run with nothing new a no-op.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$here/.venv"
req="$here/scripts/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
python="${SHARDLM_PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$req"
echo "$want" > "$stamp"
echo "setup: python environment ok ($venv)"
