#!/usr/bin/env bash
# Compile time and memory at cluster scale: `shardc plan` (and the --search / --pick planner) over
# the dimensions a user grows — world (up to 16384 ranks), layers, pp with interleaved and zb
# schedules, cp (ring and all2all), pp x cp with ZeRO-3 (GPT-3 175B, Llama-3-405B on CUDA), micro-batches
# (up to 1024), ZeRO-3, GPT-3 175B — one run per
# configuration. Prints each one's wall seconds, peak resident MiB and its three slowest passes
# (--time-passes; ir_verify: the IR verifier after every pass, together; the reports' and the
# planner's time is what they leave). With BASE (another shardc, e.g. main's) its seconds and MiB
# beside (a BASE from before 2026-11-27 prints no ir_verify line). A run past LIMIT seconds is cut
# and printed as >LIMIT.
#   bench/plan_scale.sh [SHARDC] [BASE] [LIMIT] [FILTER]
# FILTER: a regular expression; only the configurations whose name matches run.
# --search / --pick compile candidates within a CPU budget (--budget, 8 s): their seconds are the
# budget's, and on a loaded machine GPT-3's may confirm no candidate ("no candidate plan fits").
set -uo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
base=${2:-}
limit=${3:-120}
filter=${4:-.}
L=models/llama3-8b.model
G=models/gpt3-175b.model
P=models/topo/p4d-x128.topo
H=models/llama3-405b.model
D=models/topo/dgx-h100-x256.topo
# name | arguments of `shardc plan`
configs=(
  "llama8b-cp16-w128|$L -D cp=16 --world 128"
  "llama8b-cp32-w256|$L -D cp=32 --world 256"
  "gpt3-L24-cp16-a2a-z3|$G -D layers=24 -D tp=2 -D cp=16 -D cp_mode=all2all -D zero=3 --world 128 -D batch=512"
  "llama8b-tp8-w16384|$L --world 16384 -D batch=16384"
  "llama8b-tp8-w16384-z3|$L --world 16384 -D batch=16384 -D zero=3"
  "llama8b-L128-w1024|$L -D layers=128 --world 1024"
  "llama8b-mb1024-w1024|$L -D batch=1024 --world 1024"
  "llama8b-pp4-mb1024|$L -D pp=4 -D batch=1024 --world 32"
  "llama8b-pp16-int2-w1024|$L -D pp=16 -D schedule=interleaved -D interleave=2 --world 1024 -D batch=512"
  "llama8b-pp32-int4-L128|$L -D pp=32 -D layers=128 -D schedule=interleaved -D interleave=4 --world 4096 -D batch=1024"
  "llama8b-pp16-zb-w1024|$L -D pp=16 -D schedule=zb --world 1024 -D batch=512"
  "llama8b-pp4-cp16-w512|$L -D pp=4 -D cp=16 --world 512 -D batch=256"
  "llama8b-pp16-cp8-w16384|$L -D pp=16 -D cp=8 --world 16384 -D batch=1024"
  "gpt3-w1024|$G --world 1024"
  "gpt3-pp16-w16384|$G -D pp=16 --world 16384 -D batch=4096"
  "gpt3-pp16-z3-w8192|$G -D pp=16 -D zero=3 --world 8192 -D batch=1536"
  "gpt3-pp4-cp4-z3-p4d128|$G --topology $P --target cuda -D pp=4 -D dp=8 -D tp=8 -D cp=4 -D sp=on -D zero=3 -D recompute=full"
  "gpt3-pp4-cp2-z3-p4d128|$G --topology $P --target cuda -D pp=4 -D dp=16 -D tp=8 -D cp=2 -D sp=on -D zero=3 -D recompute=full"
  "llama405b-pp4-cp2-z3-h100x256|$H --topology $D --target cuda -D tp=8 -D pp=4 -D cp=2 -D zero=3 -D recompute=selective"
  "llama405b-pp8-cp4-z3-h100x256|$H --topology $D --target cuda -D tp=8 -D pp=8 -D cp=4 -D zero=3 -D recompute=selective"
  "llama405b-pp16-cp2-z3-h100x256|$H --topology $D --target cuda -D tp=8 -D pp=16 -D cp=2 -D zero=3 -D recompute=selective"
  "gpt3-search-p4d128|$G --topology $P --target cuda --search"
  "gpt3-pick-p4d128|$G --topology $P --target cuda --pick"
  "llama8b-search-p4d128|$L --topology $P --target cuda --search"
  "llama8b-pick-p4d128|$L --topology $P --target cuda --pick"
)
run() { # shardc, arguments: prints "seconds MiB top-passes" of one plan
  local bin=$1 f e t0 t1 kb top
  shift
  f=$(mktemp)
  e=$(mktemp)
  t0=$(date +%s.%N)
  timeout "$limit" /usr/bin/time -o "$f" -f '%M' "$bin" plan "$@" --time-passes >/dev/null 2>"$e"
  local rc=$?
  t1=$(date +%s.%N)
  kb=$(tail -1 "$f" 2>/dev/null)
  top=$(grep -E '^shardc: (pass |ir_verify )' "$e" | sed 's/^shardc: pass /shardc: /' |
    awk '{ t[$2] += $3 } END { for (p in t) printf "%.0f %s\n", t[p], p }' |
    sort -rn | head -3 | awk '{ printf "%s%s %.2fs", (NR > 1 ? ", " : ""), $2, $1 / 1000 }')
  if ((rc == 124)); then
    echo ">$limit - -"
  elif ((rc != 0)); then
    echo "fail(rc=$rc) - $(grep -m1 'error' "$e" | cut -c1-60 | tr ' ' '_')"
  else
    awk -v a="$t0" -v b="$t1" -v k="${kb:-0}" -v p="${top:--}" 'BEGIN { printf "%.2f %.0f %s\n", b - a, k / 1024, p }'
  fi
  rm -f "$f" "$e"
}
echo "nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), limit ${limit} s"
printf '%-26s %8s %9s %9s %9s  %s\n' configuration "plan s" "peak MiB" "base s" "base MiB" "top items (--time-passes; --search: the command line's compile only)"
for c in "${configs[@]}"; do
  name=${c%%|*}
  [[ $name =~ $filter ]] || continue
  read -r -a args <<<"${c#*|}"
  read -r s k top < <(run "$shardc" "${args[@]}")
  bs=- bk=-
  [[ -n $base ]] && read -r bs bk _ < <(run "$base" "${args[@]}")
  printf '%-26s %8s %9s %9s %9s  %s\n' "$name" "$s" "$k" "$bs" "$bk" "$top"
done
