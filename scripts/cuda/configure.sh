#!/usr/bin/env bash
# Configures the CUDA variant (SHARDLM_CUDA=ON) on any x86-64 machine, GPU or not, from the
# project's .venv alone: PyTorch 2.11.0 (CUDA 13) for libtorch, and NVIDIA's PyPI wheels for nvcc,
# the CUDA headers and runtime, NCCL and cuDNN (scripts/requirements.txt pins them all to the
# versions that torch release was built with). No CUDA toolkit needs to be installed.
#
# The wheels lay the toolkit out flat (nvidia/cu13/{bin,include,lib,nvvm}) with only versioned
# libraries (libcudart.so.13); CMake's FindCUDAToolkit wants a toolkit root with unversioned
# ones. So this makes BUILD/cuda-root: nvcc's folder, links to the wheels' other folders, and lib64/ with a libX.so
# link for each library, pointing at the very files libtorch loads (one copy of each CUDA library
# in the process: docs/gpu.md).
#   scripts/cuda/configure.sh [BUILD_DIR [CMAKE_ARGS...]]     (default: build-cuda)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build-cuda}"
[ $# -gt 0 ] && shift
case "$build" in /*) ;; *) build="$here/$build" ;; esac
py="${SHARDLM_VENV_PYTHON:-$here/.venv/bin/python}"
site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
torch_cmake="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
nv="$site/nvidia"
# Searched before the system's folders: Debian's libtorch 1.13 (the CPU variant's) is installed
# too, and TorchConfig's find_library would otherwise take it.
torch_lib="$site/torch/lib"
[ -x "$nv/cu13/bin/nvcc" ] || { echo "configure.sh: $nv/cu13/bin/nvcc missing: run scripts/setup_python.sh" >&2; exit 2; }

root="$build/cuda-root"
rm -rf "$root"
mkdir -p "$root/lib64"
# nvcc finds its tools, headers and libraries from its own real path (bin/..): bin is copied so
# that path is cuda-root; the rest are links.
cp -r "$nv/cu13/bin" "$root/bin"
for d in include nvvm; do ln -s "$nv/cu13/$d" "$root/$d"; done
for dir in "$nv/cu13/lib" "$nv/nccl/lib" "$nv/cudnn/lib"; do
  for f in "$dir"/lib*.so.*; do
    base="$(basename "$f")"
    ln -sf "$f" "$root/lib64/$base"
    ln -sf "$f" "$root/lib64/${base%%.so.*}.so"
  done
done
for f in "$nv/cu13/lib"/*.a; do ln -sf "$f" "$root/lib64/"; done

generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
# -rpath-link: libtorch_cuda's own needs (cuDNN, cuSPARSELt, NVSHMEM, cuFile...) are resolved at
# link time from the wheels, never loaded from anywhere else.
rpath_link="$root/lib64:$nv/cusparselt/lib:$nv/nvshmem/lib:$torch_lib"
cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSHARDLM_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$torch_cmake" -DCMAKE_LIBRARY_PATH="$torch_lib" \
  -DCUDAToolkit_ROOT="$root" -DCUDA_TOOLKIT_ROOT_DIR="$root" -DCMAKE_CUDA_COMPILER="$root/bin/nvcc" \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DTORCH_CUDA_ARCH_LIST="${TORCH_ARCH:-9.0}" \
  -DNCCL_INCLUDE_DIR="$nv/nccl/include" -DNCCL_LIBRARY="$root/lib64/libnccl.so" \
  -DCUDNN_LIBRARY_PATH="$root/lib64/libcudnn.so" -DCUDNN_INCLUDE_PATH="$nv/cudnn/include" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$rpath_link" "$@"
