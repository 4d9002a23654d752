#!/usr/bin/env bash
# bench/pp_bubble_packtest.sh — checks the pack of bench/pp_bubble_pack.sh here, as the machine it is
# for would run it: copies the tree's tracked files and .ppb/ to another place (DIR, default
# /tmp/ppbtest), then, in a private mount namespace (unshare -m: nothing outside this command sees
# it), hides what that machine lacks — /usr/lib/x86_64-linux-gnu becomes a tmpfs holding only glibc,
# libstdc++, libgcc_s, zlib and the libraries of the shell tools and python3 the scripts use;
# LLVM, OpenMPI's and PMIx's files, orterun, ompi_info and ssh are covered — and runs there, with a bare
# environment (env -i), bench/pp_bubble_packed.sh STEPS ROUNDS (PP, TRAINERS, BUDGET passed on).
#   bench/pp_bubble_packtest.sh [STEPS=3] [ROUNDS=1] [DIR=/tmp/ppbtest]     (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3}
rounds=${2:-1}
dir=${3:-/tmp/ppbtest}
[ -f .ppb/ppb.tar.xz ] || { echo "pp_bubble_packtest.sh: run bench/pp_bubble_pack.sh first" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/tree"
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - | tar -C "$dir/tree" -xf -
cp -r .ppb "$dir/tree/"
# the libraries the other machine has: glibc's, the compiler's, zlib, and those of the tools the scripts run
lib=/usr/lib/x86_64-linux-gnu
mkdir -p "$dir/lib"
tools=(bash python3 awk mawk sed grep sort tar xz find cp mv rm ln mkdir mktemp cat head tail tr cut comm seq date nproc
  dirname basename sleep ls wc env readlink uname id ldd)
{
  for x in "${tools[@]}"; do p=$(PATH=/usr/bin:/bin command -v "$x") && ldd "$(readlink -f "$p")" 2>/dev/null || true; done
  ldd "$(/usr/bin/python3 -c 'import _lzma; print(_lzma.__file__)')"
} | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u >"$dir/keep"
ls $lib/lib{c,m,dl,rt,pthread,util,resolv,stdc++,gcc_s,z}.so* $lib/ld-linux-x86-64.so.2 2>/dev/null >>"$dir/keep"
while read -r f; do cp -L "$f" "$dir/lib/$(basename "$f")"; done <"$dir/keep"
ls -d $lib/gconv >/dev/null 2>&1 && cp -r $lib/gconv "$dir/lib/"
# shellcheck disable=SC2016 # expanded inside the namespace
unshare -m --propagation private bash -c '
  set -e
  dir=$1 lib=$2 steps=$3 rounds=$4 pp=$5 trainers=$6 budget=$7
  mkdir -p "$dir/fake"
  mount -t tmpfs tmpfs "$dir/fake"
  cp -a "$dir/lib"/. "$dir/fake"/
  for d in /usr/lib/llvm-19 /usr/share/openmpi /etc/openmpi; do [ -d "$d" ] && mount -t tmpfs tmpfs "$d"; done
  for f in /usr/bin/orterun /usr/bin/ompi_info /usr/bin/ssh /usr/bin/rsh; do [ -e "$f" ] && mount --bind /dev/null "$f"; done
  mount --bind "$dir/fake" "$lib"   # last: ld.so and the tools load from here now
  echo "hidden: $(ls "$lib" | wc -l) files left in $lib (MPI, libfabric, BLAS, LLVM, PMIx among them: $(ls "$lib" | grep -cE "lib(mpi|fabric|openblas|LLVM|pmix)"))"
  cd "$dir/tree"
  exec env -i PATH=/usr/bin:/bin HOME=/root ${pp:+PP="$pp"} ${trainers:+TRAINERS="$trainers"} ${budget:+BUDGET="$budget"} KEEP="$dir/keep.out" \
    bench/pp_bubble_packed.sh "$steps" "$rounds"
' _ "$dir" "$lib" "$steps" "$rounds" "${PP:-}" "${TRAINERS:-}" "${BUDGET:-}"
