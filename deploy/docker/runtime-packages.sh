#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages that own the shared libraries a binary loads, one name
# per line, sorted and unique. An image's builder stage runs it on the binary; the final
# stage installs exactly that list, so the runtime dependencies are never kept by hand.
#
#   deploy/docker/runtime-packages.sh build/shardlm > runtime-packages.txt
#   apt-get install --no-install-recommends $(cat runtime-packages.txt)
#
#   --exclude DIR   libraries under DIR are not looked up: the image copies them itself
#                   (the CUDA image's PyTorch and NVIDIA wheel libraries). Repeatable.
#
# Every library is looked up the way ld.so found it (ldd), then mapped to its owner with
# dpkg -S. Debian 12 is merged-/usr, so /lib/x/libfoo.so.1 and /usr/lib/x/libfoo.so.1 are the
# same file while dpkg knows only the path its package shipped: both spellings are tried, for
# the soname link and for the file it points at. Fails (exit 1) when a library is not found,
# has no owning package, or is owned only by a -dev package (that would pull headers into the
# image and means the binary linked a development symlink). The NVIDIA driver's libraries
# (libcuda, libnvidia-*) may be missing: the container runtime mounts them from the host.
set -euo pipefail

usage() {
  echo "usage: $0 [--exclude DIR]... BINARY" >&2
  exit 2
}
excludes=()
while [ "$#" -gt 1 ]; do
  case "$1" in
    --exclude) excludes+=("${2%/}/"); shift 2 ;;
    *) usage ;;
  esac
done
[ "$#" -eq 1 ] && [ -f "$1" ] || usage
binary="$1"

ldd_out="$(ldd "$binary")"
missing="$(grep 'not found' <<<"$ldd_out" | grep -Ev '^\s*lib(cuda|nvidia-[a-z-]+)\.so' || true)"
if [ -n "$missing" ]; then
  echo "runtime-packages: $binary has unresolved libraries:" >&2
  echo "$missing" >&2
  exit 1
fi
# Lines look like "libfoo.so.1 => /lib/x/libfoo.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)";
# linux-vdso has no file.
libs=()
while IFS= read -r lib; do
  for dir in "${excludes[@]}"; do
    case "$lib" in "$dir"*) continue 2 ;; esac
  done
  libs+=("$lib")
done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$ldd_out")

# Both merged-/usr spellings of an absolute path.
spellings() {
  case "$1" in
    /usr/*) printf '%s\n%s\n' "$1" "${1#/usr}" ;;
    *) printf '%s\n%s\n' "$1" "/usr$1" ;;
  esac
}
declare -A candidates  # library -> its candidate paths, most direct first
all=()
for lib in "${libs[@]}"; do
  c="$(spellings "$lib"; spellings "$(readlink -f "$lib")")"
  candidates[$lib]="$c"
  mapfile -t -O "${#all[@]}" all <<<"$c"
done

# One dpkg -S for every candidate (one per library is slow: ~300 libraries). Its lines read
# "libfoo1:amd64, libfoo1:i386: /usr/lib/x/libfoo.so.1"; paths no package ships are reported
# on stderr and make it exit 1, which is expected here.
declare -A owners  # path -> owning packages, without :arch, one per line
while IFS= read -r line; do
  case "$line" in "diversion by"*) continue ;; esac
  path="${line##*: }"
  owners[$path]="$(sed -e 's/: \/.*$//' <<<"$line" | tr ',' '\n' | sed -e 's/^ *//' -e 's/:.*$//')"
done < <(printf '%s\n' "${all[@]}" | sort -u | xargs dpkg -S 2>/dev/null || true)

status=0
packages=()
for lib in "${libs[@]}"; do
  found=""
  while IFS= read -r path; do
    if [ -n "${owners[$path]:-}" ]; then found="${owners[$path]}"; break; fi
  done <<<"${candidates[$lib]}"
  if [ -z "$found" ]; then
    echo "runtime-packages: no Debian package owns $lib" >&2
    status=1
    continue
  fi
  runtime="$(grep -v -- '-dev$' <<<"$found" || true)"
  if [ -z "$runtime" ]; then
    echo "runtime-packages: $lib belongs only to $(tr '\n' ' ' <<<"$found")(a -dev package)" >&2
    status=1
    continue
  fi
  mapfile -t -O "${#packages[@]}" packages <<<"$runtime"
done

[ "$status" -eq 0 ] || exit "$status"
printf '%s\n' "${packages[@]}" | sort -u
