#!/usr/bin/env bash
# Runs ON the GPU machine, from the repository root, with third_party/gpu-debs carried there
# (scripts/gpu/bundle.sh makes it): unpacks the Debian packages into a prefix (not into /),
# configures the CUDA variant against PyTorch's libtorch, NCCL and cuDNN from the machine's
# python3, and builds it. Prints the environment to use the binaries with (LD_LIBRARY_PATH).
#   scripts/gpu/build.sh [BUILD_DIR]          (default: build-cuda)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build-cuda}"
prefix="${SHARDLM_GPU_PREFIX:-/tmp/shardlm-gpu-deps}"
debs="$here/third_party/gpu-debs"
[ -d "$debs" ] || { echo "build.sh: $debs missing: run scripts/gpu/bundle.sh where apt works, carry it" >&2; exit 2; }

if [ ! -f "$prefix/.unpacked" ]; then
  mkdir -p "$prefix"
  for d in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$d" "$prefix"
    else  # ar + tar where dpkg is not installed
      data=$(ar t "$d" | grep '^data\.tar')
      ar p "$d" "$data" | tar -x -C "$prefix" $([ "${data##*.}" = xz ] && echo -J) $([ "${data##*.}" = zst ] && echo --zstd)
    fi
  done
  # Debian's CMake package files name absolute /usr paths: point them into the prefix.
  grep -rlZ '"/usr/' "$prefix/usr/lib/x86_64-linux-gnu/cmake" "$prefix/usr/share/cmake" 2>/dev/null |
    xargs -0 -r sed -i "s#\"/usr/#\"$prefix/usr/#g"
  touch "$prefix/.unpacked"
fi
lib="$prefix/usr/lib/x86_64-linux-gnu"
export PATH="$prefix/usr/bin:$PATH"
export LD_LIBRARY_PATH="$lib:$prefix/usr/lib:${LD_LIBRARY_PATH:-}"
export PKG_CONFIG_SYSROOT_DIR="$prefix"
export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$prefix/usr/share/pkgconfig"

py() { python3 -c "$1" 2>/dev/null || true; }
torch_cmake=$(py 'import torch; print(torch.utils.cmake_prefix_path)')
[ -n "$torch_cmake" ] || { echo "build.sh: python3 cannot import torch" >&2; exit 2; }
echo "torch $(py 'import torch; print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI)')"
nccl=$(py 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')
cudnn=$(py 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])')
extra=()
if [ -n "$nccl" ]; then  # the NCCL PyTorch itself loads
  extra+=(-DNCCL_INCLUDE_DIR="$nccl/include" -DNCCL_LIBRARY="$(ls "$nccl"/lib/libnccl.so* | head -1)")
  export LD_LIBRARY_PATH="$nccl/lib:$LD_LIBRARY_PATH"
fi
if [ -n "$cudnn" ]; then
  extra+=(-DCUDNN_LIBRARY_PATH="$(ls "$cudnn"/lib/libcudnn.so* | head -1)" -DCUDNN_INCLUDE_PATH="$cudnn/include")
fi
torch_lib="$(dirname "$torch_cmake")/../lib"
export LD_LIBRARY_PATH="$torch_lib:$LD_LIBRARY_PATH"

generator=(-G Ninja)
command -v ninja >/dev/null || generator=()  # Makefiles
cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSHARDLM_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$lib/cmake;$torch_cmake" -DGloo_DIR="$prefix/usr/share/cmake/Gloo" \
  -DPKG_CONFIG_EXECUTABLE="$(command -v pkg-config || echo "$prefix/usr/bin/pkgconf")" \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DTORCH_CUDA_ARCH_LIST="${TORCH_ARCH:-9.0}" "${extra[@]}"
cmake --build "$build" -j"$(nproc)"
echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$build/env.sh"
echo "build.sh: built $build; source $build/env.sh before running its binaries"
