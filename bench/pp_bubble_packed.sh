#!/usr/bin/env bash
# bench/pp_bubble_packed.sh — bench/pp_bubble.sh on a machine that cannot build it, from the pack
# that bench/pp_bubble_pack.sh made on the build machine (.ppb/, carried with the tree): unpacks it,
# takes OpenMPI from it (checked: ompi_info's prefix is the pack's), picks the trainers this CPU runs
# (the build machine's -march=native ones, or the x86-64-v3 set with the C kernels when this CPU
# lacks one of the build machine's instruction sets), then pp_bubble.sh with them: it calibrates
# this machine (bench_calibrate, p2p_link), plans each configuration with that profile (the
# prediction) and runs pp PP (default "4 2": pp 4 first) for GPipe, 1F1B, interleaved and zb, tiny
# and the Llama shape, one thread per rank, STEPS steps (the first skipped), up to ROUNDS rounds but
# no run started after BUDGET seconds (default 110: about 150 s in all on 16 cores), with DETAIL=1
# (DETAIL= turns it off: the per-stage predicted and measured times after the table); each run's
# result on stderr as it ends, then the table (measured vs predicted). With OUT set (the lent
# machine's output folder) or KEEP=DIR, everything the run kept — this script's output (stdout and
# stderr, pp_bubble_packed.log), the calibration and link logs, the profile, each configuration's
# plan, prediction, measurements and traces — lands in ONE archive, DIR/ppb.tar.gz (KEEP's DIR, else
# $OUT): the device tool returns at most 8 files from $OUT, so loose files were lost. Made even when
# the run fails; over 15 MiB (the tool's limit is 16 a file) only the first round's traces stay in it.
# TRAINERS=v3 takes the x86-64-v3 set whatever the CPU.
#   bench/pp_bubble_packed.sh [STEPS=8] [ROUNDS=4]
set -euo pipefail
export LC_ALL=C # the instruction-set lists compared in C order (the pack's is), numbers printed with a point
cd "$(dirname "$0")/.."
dest=${KEEP:-${OUT:-}}
if [ -n "$dest" ] && [ -z "${PPB_STAGE:-}" ]; then # this script again, its output logged into a staging folder, then packed
  stage=$(mktemp -d)
  set +e
  PPB_STAGE=$stage bash "$0" "$@" 2>&1 | tee "$stage/pp_bubble_packed.log"
  rc=${PIPESTATUS[0]}
  set -e
  mkdir -p "$dest"
  tar -C "$stage" -czf "$dest/ppb.tar.gz" .
  if [ "$(stat -c %s "$dest/ppb.tar.gz")" -gt $((15 << 20)) ]; then
    (cd "$stage" && tar -czf "$dest/ppb.tar.gz" --exclude='*.[2-9].json' --exclude='*.[1-9][0-9].json' .)
    echo "pp_bubble_packed.sh: the archive was over 15 MiB: only the first round's traces kept" | tee -a "$stage/pp_bubble_packed.log"
  fi
  echo "pp_bubble_packed.sh: kept in $dest/ppb.tar.gz ($(stat -c %s "$dest/ppb.tar.gz") bytes, $(tar -tzf "$dest/ppb.tar.gz" | grep -vc '/$') files; tar -xzf to read)"
  rm -rf "$stage"
  exit "$rc"
fi
steps=${1:-8}
rounds=${2:-4}
[ -f .ppb/ppb.tar.xz ] || { echo "pp_bubble_packed.sh: no .ppb/ppb.tar.xz: run bench/pp_bubble_pack.sh where shardc builds and carry .ppb" >&2; exit 1; }
# shellcheck source=/dev/null
source .ppb/env.sh
p=$(cd .ppb/ppb && pwd)
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, $(ldd --version | head -1 | awk '{ print "glibc " $NF }')" \
  "(the pack needs $(cat "$p/glibc")); pack unpacked after $SECONDS s"
[ "$(nproc)" -ge 4 ] || echo "pp_bubble_packed.sh: $(nproc) CPUs: pp 4 is oversubscribed here" >&2
prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
[ "$prefix" = "$p" ] || { echo "pp_bubble_packed.sh: OpenMPI's prefix is $prefix, not the pack's $p" >&2; exit 1; }
echo "mpirun: $(command -v mpirun) (OpenMPI $(ompi_info --parsable | sed -n 's/^ompi:version:full://p'), prefix $prefix)"
# the instruction sets the build machine's trainers may use that this CPU lacks
lack=$(comm -23 "$p/cpuflags" <(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | tr ' ' '\n' | sort) | xargs)
bin=$p/bin
[ "${TRAINERS:-}" != v3 ] || lack=${lack:-"(none: TRAINERS=v3)"}
if [ -n "$lack" ]; then
  v3=$(comm -23 <(printf '%s\n' avx avx2 bmi1 bmi2 f16c fma movbe | sort) <(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | tr ' ' '\n' | sort) | xargs)
  [ -d "$p/v3/bin" ] && [ -z "$v3" ] ||
    { echo "pp_bubble_packed.sh: this CPU lacks ${v3:-$lack}: no packed trainers run here" >&2; exit 1; }
  bin=$p/v3/bin
  echo "this CPU lacks $lack of the build machine's: the x86-64-v3 trainers (C kernels)"
else
  echo "trainers: the build machine's (-march=native, LLVM kernels)"
fi
shm=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print int($4 / 1024) }')
echo "/dev/shm: ${shm:-?} MiB free (4 ranks map about 260 MiB of segments)"
# the link first, alone (2 ranks, 30 s at most): where libfabric's shm provider cannot run with its
# defaults (a container without process_vm_readv), without CMA, else the tcp provider in the node;
# pp_bubble.sh's runs and its link measurement take the same setting
pre=$(mktemp)
link() { : >"$pre"; timeout 30 mpirun --mca pml ob1 -np 2 "$bin/p2p_link" "$pre" >"$pre.log" 2>&1; }
if ! link; then
  echo "p2p_link failed with libfabric's defaults:"; tail -n 5 "$pre.log"
  export FI_SHM_DISABLE_CMA=1
  if ! link; then
    echo "... and with FI_SHM_DISABLE_CMA=1:"; tail -n 5 "$pre.log"
    unset FI_SHM_DISABLE_CMA
    export SHARDRT_FABRIC_INTRA=tcp
    link || { echo "... and with SHARDRT_FABRIC_INTRA=tcp:"; cat "$pre.log"; exit 1; }
  fi
fi
echo "link: $(cat "$pre.log")${FI_SHM_DISABLE_CMA:+ (FI_SHM_DISABLE_CMA=1)}${SHARDRT_FABRIC_INTRA:+ (SHARDRT_FABRIC_INTRA=tcp)}"
rm -f "$pre" "$pre.log"
keep=${PPB_STAGE:-} # the staging folder that the first invocation packs (above)
PP=${PP:-4 2} BIN=$bin BUDGET=${BUDGET:-110} KEEP=$keep DETAIL=${DETAIL-1} bench/pp_bubble.sh "$p/bin/shardc" "$steps" "$rounds"
echo "pp_bubble_packed.sh: $SECONDS s in all"
