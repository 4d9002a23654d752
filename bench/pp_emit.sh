#!/usr/bin/env bash
# The size of a pipeline-parallel trainer's C and the time to compile it, against the micro-batches
# per step: `shardc plan --emit-c DIR` of tiny (4 layers, pp 4, 1F1B, micro-batches of 1) at 8, 64
# and 256 micro-batches, the same on the CUDA target at 64 (its host C), and Llama-3-8B at tp 8 x
# pp 4 (models/llama3-8b.model with pp 4) at 128 and 512, each by SHARDC and, with BASE (another
# shardc, e.g. main's), by that one beside it. Per case and shardc: the emitted C's bytes, the bytes
# of its code (without the outlined runs' tables, codegen/outline.c), the instructions' functions,
# the emit (wall s) and the trainer's compile, `cc -O2 -std=gnu11 -c` as shardc runs it (CPU s:
# user + sys, wall s, peak resident MiB). A compile past TIMEOUT seconds (default 1800) is written
# ">TIMEOUT"; one is given at most MEM_GIB of address space (default 8: the machine is shared) and
# one that fails for it is written "oom".
#   bench/pp_emit.sh [SHARDC] [BASE] [CASES]      CASES: a regex on the case names (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
shardc=$(realpath "${1:-build/shardc}")
base=${2:+$(realpath "$2")}
only=${3:-.}
limit=${TIMEOUT:-1800}
mem_gib=${MEM_GIB:-8}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
inc=(-Iruntime -Iruntime/ops -Iruntime/cuda)
for d in $(mpicc --showme:incdirs 2>/dev/null); do inc+=("-I$d"); done
tiny=(models/tiny.model -D layers=4 -D seq=64 -D micro_batch=1 -D dp=1 -D pp=4 --world 4)
llama=(models/llama3-8b.model -D pp=4 --world 32)
cases=("tiny-8|8" "tiny-64|64" "tiny-256|256" "tiny-cuda-64|64|cuda" "llama-128|128" "llama-512|512")
# one NAME SHARDC ARGS...: prints "bytes code_bytes bodies emit_s cc_cpu_s cc_wall_s cc_MiB"
one() {
  local name=$1 sc=$2 d="$t/$1" t0 t1 c cpu wall mib rc=0
  shift 2
  rm -rf "$d"
  t0=$(date +%s.%N)
  "$sc" plan "$@" --emit-c "$d" >/dev/null 2>&1
  t1=$(date +%s.%N)
  c=$(ls "$d"/*.c)
  (ulimit -v $((mem_gib << 20)) && exec timeout "$limit" /usr/bin/time -o "$d/time" -f '%U %S %e %M' \
    cc -O2 -std=gnu11 -w -c "$c" "${inc[@]}" -o "$d/x.o") 2>/dev/null || rc=$?
  if [[ $rc == 0 ]]; then
    read -r u s wall mib <"$d/time"
    cpu=$(awk -v a="$u" -v b="$s" 'BEGIN { printf "%.1f", a + b }')
    mib=$((mib / 1024))
  elif [[ $rc == 124 ]]; then
    cpu=">$limit" wall=">$limit" mib=-
  else
    cpu=oom wall=oom mib=">$((mem_gib * 1024))"
  fi
  printf '%s %s %s %s %s %s %s\n' "$(wc -c <"$c")" \
    "$(awk '/^static const (int64_t ol_args|int32_t ol_rows)/ { skip = 1 } !skip { n += length($0) + 1 } skip && /^};/ { skip = 0 } END { print n + 0 }' "$c")" \
    "$(grep -c '^static void ol_body_' "$c" || true)" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" "$cpu" "$wall" "$mib"
  rm -rf "$d"
}
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
printf '%-14s %-6s %12s %12s %7s %8s %10s %10s %8s\n' case shardc "C bytes" "code bytes" bodies "emit s" "cc CPU s" "cc wall s" "cc MiB"
for c in "${cases[@]}"; do
  IFS='|' read -r name m target <<<"$c"
  [[ $name =~ $only ]] || continue
  if [[ $name == llama* ]]; then args=("${llama[@]}" -D batch="$m"); else args=("${tiny[@]}" -D batch="$m"); fi
  [[ -n $target ]] && args+=(--target "$target")
  for who in base this; do
    sc=$shardc
    if [[ $who == base ]]; then [[ -n $base ]] || continue; sc=$base; fi
    read -r bytes code bodies es cpu wall mib < <(one "$name" "$sc" "${args[@]}")
    printf '%-14s %-6s %12s %12s %7s %8s %10s %10s %8s\n' "$name" "$who" "$bytes" "$code" "$bodies" "$es" "$cpu" "$wall" "$mib"
  done
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
