#!/usr/bin/env bash
# bench/pp_bubble_pack.sh — on this (build) machine: packs everything bench/pp_bubble.sh needs into
# .ppb/ (ignored by git) for a machine with enough cores for pp 4 that has neither OpenMPI,
# libfabric, BLAS nor the tools to build shardc (the lent 16-core GPU machine: python3 only). There:
#   bench/pp_bubble_packed.sh [STEPS=8] [ROUNDS=3]      (it sources .ppb/env.sh itself)
# What goes in (about 25 MiB, xz): the trainers of every configuration of pp_bubble.sh (tiny and the
# Llama shape, pp 2 and 4, GPipe / 1F1B / interleaved / zb) built by BUILD_TO, bench_calibrate and
# p2p_link; shardc for the plans (installed layout: bin/ beside share/shardc/models, docs/trainer.md),
# with a stand-in libLLVM.so.19.1 that only exits (the plan never calls LLVM with --cpu-kernels c:
# checked below, plan for plan, against the real one); OpenMPI 4.1.4 (orterun as mpirun, ompi_info,
# its components, help files and settings, and PMIx's), relocated by the OPAL_* / PMIX_* variables
# that env.sh sets from where it lies; and every shared library these need but glibc, libstdc++,
# libgcc_s and zlib (the other machine's own: tests/gpu/pack.sh carries the same set).
# A second set of trainers, bench_calibrate and p2p_link goes in v3/bin: the runtime built for
# x86-64-v3 (AVX2, FMA) with the C kernels (--cpu-kernels c), for a CPU that lacks an instruction
# set this machine's -march=native and LLVM kernels use (pp_bubble_packed.sh picks it then and says
# so); PORTABLE=0 leaves it out. Its build dir: build-ppb-v3.
#   bench/pp_bubble_pack.sh [BUILD=build]
# Check: bench/pp_bubble_packtest.sh moves the pack and runs it with the system's OpenMPI, libfabric,
# BLAS and LLVM hidden.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target shardc shardrt bench_calibrate p2p_link >/dev/null
if [ "${PORTABLE:-1}" != 0 ]; then
  [ -f build-ppb-v3/build.ninja ] ||
    cmake -S . -B build-ppb-v3 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDC_NATIVE=OFF -DSHARDC_TESTING=OFF \
      -DSHARDC_WITH_CUDA=OFF -DCMAKE_C_FLAGS=-march=x86-64-v3 >/dev/null
  cmake --build build-ppb-v3 --target shardc shardrt bench_calibrate p2p_link >/dev/null
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
r=$stage/ppb
mkdir -p "$r/bin" "$r/lib" "$r/share/shardc" "$r/etc"

# what pp_bubble.sh runs: the trainers (its own configuration list, BUILD_TO), the calibration, the link
BUILD_TO="$r/bin" PP="2 4" bench/pp_bubble.sh "$build/shardc"
cp "$build/bench/bench_calibrate" "$build/bench/p2p_link" "$r/bin/"
if [ "${PORTABLE:-1}" != 0 ]; then
  BUILD_TO="$r/v3/bin" PP="2 4" SHARDC_FLAGS="--cpu-kernels c" bench/pp_bubble.sh build-ppb-v3/shardc
  cp build-ppb-v3/bench/bench_calibrate build-ppb-v3/bench/p2p_link "$r/v3/bin/"
fi
# shardc for the plans, installed layout (its models beside it: main.c's find_home)
cp "$build/shardc" "$r/bin/"
cp -r models "$r/share/shardc/models"

# the stand-in libLLVM: every LLVM function shardc imports, each one exiting with a message
nm -D --undefined-only "$build/shardc" | awk '$2 ~ /^LLVM/ { sub(/@.*/, "", $2); print $2 }' >"$stage/llvm.syms"
{
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  echo 'static void gone(const char *f) { fprintf(stderr, "shardc from bench/pp_bubble_pack.sh: %s: LLVM is not in the pack (plan with --cpu-kernels c)\n", f); exit(70); }'
  while read -r f; do echo "void $f(void) { gone(\"$f\"); }"; done <"$stage/llvm.syms"
} >"$stage/llvm_stub.c"
echo 'LLVM_19.1 { global: *; };' >"$stage/llvm.map"
cc -shared -fPIC -O1 -Wl,-soname,libLLVM.so.19.1 -Wl,--version-script="$stage/llvm.map" -o "$r/lib/libLLVM.so.19.1" "$stage/llvm_stub.c"

# OpenMPI as ompi_info --path all names its parts (Debian's 4.1.4), and PMIx's components and help
ompi_lib=$(ompi_info --path libdir --parsable | sed -n 's/^path:libdir://p')
ompi_pkglib=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
ompi_sysconf=$(ompi_info --path sysconfdir --parsable | sed -n 's/^path:sysconfdir://p')
[ -d "$ompi_pkglib" ] && [ -d "$ompi_pkgdata" ] || { echo "pp_bubble_pack.sh: OpenMPI's components or data not found" >&2; exit 1; }
cp -L "$(command -v orterun)" "$(command -v ompi_info)" "$r/bin/"
ln -s orterun "$r/bin/mpirun"
mkdir -p "$r/lib/openmpi3" "$r/share/openmpi" "$r/etc/openmpi"
cp -L "$ompi_pkglib"/*.so "$r/lib/openmpi3/"
cp -rL "$ompi_pkgdata"/. "$r/share/openmpi/"
cp -L "$ompi_sysconf"/openmpi-mca-params.conf "$ompi_sysconf"/openmpi-default-hostfile "$r/etc/openmpi/"
pmix=$(ldd "$ompi_pkglib/mca_pmix_ext3x.so" | awk '$1 == "libpmix.so.2" { print $3 }')
pmix=$(dirname "$(readlink -f "$pmix")")/.. # .../pmix2
mkdir -p "$r/lib/pmix" "$r/share/pmix"
cp -L "$pmix"/lib/pmix/*.so "$r/lib/pmix/"
cp -rL "$pmix"/share/pmix/. "$r/share/pmix/"
# "$ompi_lib" holds OpenMPI's own libraries (libmpi, libmca_common_*): found below through ldd
: "$ompi_lib"

# every library the executables and components need, but the other machine's own (glibc's, the
# compiler's, zlib) and libLLVM (the stand-in, found first through LD_LIBRARY_PATH)
own='^(linux-vdso|ld-linux-x86-64|lib(c|m|dl|rt|pthread|util|resolv|stdc\+\+|gcc_s|z)\.so)'
elves() { find "$r/bin" "$r/lib" "$r/v3" -type f 2>/dev/null | while read -r f; do
  head -c 4 "$f" | grep -q ELF && echo "$f"; done; }
for pass in 1 2; do # twice: a copied library's own needs
  elves | while read -r f; do
    LD_LIBRARY_PATH="$r/lib" ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
  done | sort -u | while read -r name path; do
    [[ $name =~ $own ]] && continue
    [ -e "$r/lib/$name" ] || cp -L "$path" "$r/lib/$name"
  done
  : "$pass"
done
missing=$(elves | while read -r f; do LD_LIBRARY_PATH="$r/lib" ldd "$f" 2>/dev/null | awk -v f="${f#"$r"/}" '/not found/ { print f ": " $1 }'; done)
[ -z "$missing" ] || { echo "pp_bubble_pack.sh: not found here: $missing" >&2; exit 1; }
# debug sections out (the symbols stay): 5x smaller trainers
elves | while read -r f; do strip --strip-debug "$f" 2>/dev/null || true; done

# the plans of the packed shardc (stand-in LLVM, --cpu-kernels c) are the real one's (its default
# kernels), with a profile of this machine
"$build/bench/bench_calibrate" "$stage/check.profile" 1 >/dev/null
PLAN_TO="$stage/plan.real" PLAN_FLAGS='' PROFILE="$stage/check.profile" PP="2 4" bench/pp_bubble.sh "$build/shardc"
LD_LIBRARY_PATH="$r/lib" PLAN_TO="$stage/plan.packed" PROFILE="$stage/check.profile" PP="2 4" bench/pp_bubble.sh "$r/bin/shardc"
diff -r "$stage/plan.real" "$stage/plan.packed" >/dev/null ||
  { echo "pp_bubble_pack.sh: the packed shardc's plans differ from $build/shardc's" >&2; exit 1; }
nplans=$(ls "$stage/plan.real" | wc -l)

# this machine's instruction sets (pp_bubble_packed.sh compares the other machine's with them)
grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | tr ' ' '\n' |
  grep -E '^(avx|sse|ssse|fma|f16c|bmi|adx|gfni|vaes|vpclmulqdq|sha_ni|movbe|popcnt|abm|amx)' | grep -vx 'sse4a' | LC_ALL=C sort >"$r/cpuflags"
glibc=$(elves | while read -r f; do objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'; done | sort -uV | tail -1)
echo "$glibc" >"$r/glibc"

rm -rf .ppb
mkdir -p .ppb
tar -C "$stage" -cf - ppb | xz -T2 -6 >.ppb/ppb.tar.xz
cat >.ppb/env.sh <<'ENV'
# source .ppb/env.sh: unpacks ppb.tar.xz beside itself once (tar and xz, or python3), then puts the
# pack's OpenMPI, PMIx and libraries first, from wherever it lies
ppb=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ ! -x "$ppb/ppb/bin/orterun" ]; then
  if command -v xz >/dev/null; then tar -C "$ppb" -xJf "$ppb/ppb.tar.xz"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$ppb/ppb.tar.xz" "$ppb"; fi
fi
ppb=$ppb/ppb
export PATH="$ppb/bin:$PATH" LD_LIBRARY_PATH="$ppb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$ppb" OPAL_EXEC_PREFIX="$ppb" OPAL_BINDIR="$ppb/bin" OPAL_SBINDIR="$ppb/bin" OPAL_LIBEXECDIR="$ppb/bin"
export OPAL_LIBDIR="$ppb/lib" OPAL_PKGLIBDIR="$ppb/lib/openmpi3" OPAL_DATAROOTDIR="$ppb/share" OPAL_DATADIR="$ppb/share"
export OPAL_PKGDATADIR="$ppb/share/openmpi" OPAL_SYSCONFDIR="$ppb/etc/openmpi" OPAL_INCLUDEDIR="$ppb/include"
export OPAL_PKGINCLUDEDIR="$ppb/include" OPAL_LOCALSTATEDIR="$ppb/var" OPAL_SHAREDSTATEDIR="$ppb/var"
export OPAL_MANDIR="$ppb/share" OPAL_INFODIR="$ppb/share"
export OMPI_MCA_mca_base_component_path="$ppb/lib/openmpi3"
export PMIX_PREFIX="$ppb" PMIX_EXEC_PREFIX="$ppb" PMIX_LIBDIR="$ppb/lib" PMIX_PKGLIBDIR="$ppb/lib/pmix" PMIX_DATADIR="$ppb/share"
export PMIX_DATAROOTDIR="$ppb/share" PMIX_PKGDATADIR="$ppb/share/pmix" PMIX_SYSCONFDIR="$ppb/etc" PMIX_BINDIR="$ppb/bin"
export PMIX_MCA_mca_base_component_path="$ppb/lib/pmix"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# OpenMPI only starts the ranks and bootstraps (the runtime's messages go over libfabric): no
# single-copy (CMA) in its shared-memory transport, which a container without ptrace rights refuses
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# one node: the ranks started by mpirun itself (the rsh launcher stops where no ssh or rsh is found)
export OMPI_MCA_plm=isolated
unset ppb
ENV
echo "pp_bubble_pack.sh: $(ls "$r/bin" | grep -c -- '-[24]-') trainers$([ -d "$r/v3" ] && echo " (+ $(ls "$r/v3/bin" | grep -c -- '-[24]-') x86-64-v3)")," \
  "$(ls "$r/lib" | grep -c '\.so') libraries, OpenMPI $(ompi_info --parsable | sed -n 's/^ompi:version:full://p');" \
  "$nplans plans checked; needs $glibc; $(du -sh "$r" | cut -f1) unpacked, .ppb/ppb.tar.xz $(du -h .ppb/ppb.tar.xz | cut -f1)"
