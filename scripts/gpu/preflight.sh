#!/usr/bin/env bash
# Runs ON the GPU machine, first: unpacks the carried bundle (scripts/gpu/pack.sh), points the
# loader at this machine's own PyTorch and CUDA libraries (its python3's torch and the nvidia-*
# wheels beside it), and checks in about 20 s that the bundle can run here:
#   - the GPU, the driver, python3's torch (it must be the torch the bundle was linked against),
#   - ldd of every binary: no library "not found", and each of CUDA's runtime, cuBLAS, NCCL and
#     libtorch comes from one file, the machine's own,
#   - the binary starts and sees the GPU.
# Writes DEST/env.sh (LD_LIBRARY_PATH) that scripts/gpu/test.sh and bench.sh source.
#   scripts/gpu/preflight.sh [BUNDLE_TAR [DEST]]
#     (defaults: third_party/gpu-bundle/shardlm-cuda.tar.xz, /tmp/shardlm-cuda)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tarball="${1:-$here/third_party/gpu-bundle/shardlm-cuda.tar.xz}"
dest="${2:-/tmp/shardlm-cuda}"
start=$SECONDS
fail() { echo "preflight: FAIL: $*" >&2; exit 1; }

rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d)"
xz -dc "$tarball" | tar -x -C "$tmp"
mv "$tmp/shardlm-cuda" "$dest"
rmdir "$tmp"
echo "bundle: $(tr '\n' ' ' < "$dest/VERSIONS")"

gpu=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || fail "nvidia-smi"
  gpu=1
else  # CI runs the preflight on a CPU machine: everything but the GPU's own checks
  echo "no GPU here (no nvidia-smi): the loader checks only"
fi
echo "g++: $(g++ --version 2>/dev/null | head -1)"
echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
py="${SHARDLM_PYTHON:-python3}"
read -r torch_version torch_cuda torch_abi site < <("$py" -c '
import os, torch
print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI,
      os.path.dirname(os.path.dirname(torch.__file__)))') || fail "$py cannot import torch"
echo "$py torch: $torch_version cuda $torch_cuda cxx11_abi $torch_abi ($site)"
want="$(awk '$1 == "torch" {print $2}' "$dest/VERSIONS")"
[ "$torch_version" = "$want" ] || fail "the bundle was linked against torch $want, this machine has $torch_version"

libs="$site/torch/lib"
for d in cu13 nccl cudnn cusparselt nvshmem; do
  [ -d "$site/nvidia/$d/lib" ] && libs="$libs:$site/nvidia/$d/lib"
done
{
  echo "export LD_LIBRARY_PATH=$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  # gguf-py for transformers' GGUF reader (pack.sh): after what the machine has, never before it.
  echo "export PYTHONPATH=\${PYTHONPATH:+\$PYTHONPATH:}$dest/python"
} > "$dest/env.sh"
# shellcheck disable=SC1091
source "$dest/env.sh"

# shellcheck disable=SC1091
source "$here/scripts/gpu/ldd_checks.sh"
ldd_checks "$(for f in "$dest"/shardlm* "$dest"/tests/*; do ldd "$f"; done)" "$site/*"
"$dest/shardlm" --help >/dev/null || fail "shardlm does not start"
(source "$dest/env.sh" && "$py" -c 'import gguf') || fail "the bundle's gguf-py does not import"
if [ "$gpu" = 1 ]; then
  "$py" -c 'import torch; assert torch.cuda.is_available(); print("cuda devices:", torch.cuda.device_count())'
fi
echo "preflight: ok in $((SECONDS - start)) s; source $dest/env.sh"
