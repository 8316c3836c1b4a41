# Sourced by scripts/gpu/preflight.sh (the bundle on a GPU machine) and scripts/cuda/check_build.sh
# (the CUDA variant built here); the caller defines fail MESSAGE.
#
# ldd_checks LDD_OUTPUT WHERE: fails when a library is not found, or when CUDA's runtime, cuBLAS,
# NCCL or libtorch (cpu, cuda, c10_cuda) comes from other than one file matching the glob WHERE
# (the wheels'); prints each one's file.
ldd_checks() {
  local ldd_out=$1 where=$2 lib sources
  ! grep -q "not found" <<<"$ldd_out" || fail "libraries not found: $(grep "not found" <<<"$ldd_out" | sort -u)"
  for lib in libcudart.so libcublas.so libnccl.so libtorch_cpu.so libtorch_cuda.so libc10_cuda.so; do
    sources="$(awk -v l="$lib" 'index($1, l) == 1 {print $3}' <<<"$ldd_out" | xargs -r -n1 readlink -f | sort -u)"
    [ "$(wc -l <<<"$sources")" = 1 ] && [ -n "$sources" ] || fail "$lib from several files or none: $sources"
    # shellcheck disable=SC2254  # WHERE is a glob
    case "$sources" in $where) ;; *) fail "$lib from $sources, not from $where" ;; esac
    echo "$lib: $sources"
  done
}
