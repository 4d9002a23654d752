#!/usr/bin/env bash
# The memory plan's figures, two shardc side by side: for each model in models/ (its own plan,
# the CPU and the CUDA target, and pipelined variants) and the configurations of
# bench/plan_scale.sh (not --search / --pick: their plan depends on a CPU budget), each rank
# class's planned peak and total (`#   peak` and `#   total` of `shardc plan`, bytes) under BASE
# and NEW, and whether NEW's plan output is byte-identical (a plan refused, by both or one: its
# exit codes and NEW's first error). A row where NEW's peak or total is
# above BASE's is marked HIGHER and the script exits 1. The last column: NEW's total over its peak
# (the packing's fragmentation; the largest rank class's figures), then NEW's plan's pp; at the end that
# ratio's count, mean, median and largest over the plans without pp and under pp (the figures
# passes/plan_search.c's ana_frag takes). BASE and NEW the same file: each plan is planned once.
#   bench/plan_peaks.sh BASE NEW [FILTER]
set -uo pipefail
cd "$(dirname "$0")/.."
base=$1
new=$2
filter=${3:-.}
configs=()
for m in models/*.model; do
  n=$(basename "$m" .model)
  configs+=("$n|$m" "$n-cuda|$m --target cuda" "$n-pp2-1f1b|$m -D pp=2 --world 16 -D micro_batch=1 -D batch=64"
    "$n-pp4-int2|$m -D pp=4 -D schedule=interleaved -D interleave=2 --world 32 -D micro_batch=1 -D batch=64"
    "$n-pp4-zb-z1|$m -D pp=4 -D schedule=zb -D zero=1 --world 32 -D micro_batch=1 -D batch=64")
done
# the Llama-3-405B plans of docs/planner.md whose fit the packing's fragmentation decides (pp 2
# interleaved, ZeRO-3, 2048 H100) and Meta's own (tp 8 pp 16)
z3="--target cuda -D sp=on -D pp=2 -D pp_layers=balanced -D schedule=interleaved -D zero=3 -D recompute=selective -D micro_batch=1"
configs+=("405b-tp4-pp2-int2-cp2-z3|models/llama3-405b.model -D dp=128 -D tp=4 -D cp=2 $z3"
  "405b-tp2-pp2-int2-cp4-z3|models/llama3-405b.model -D dp=128 -D tp=2 -D cp=4 $z3"
  "405b-meta-tp8-pp16|models/llama3-405b.model --target cuda -D tp=8 -D pp=16 -D cp=1 -D zero=1 -D recompute=selective -D micro_batch=1 -D schedule=1f1b -D sp=on")
while IFS= read -r line; do configs+=("$line"); done < <(sed -n 's/^  "\([^"]*|[^"]*\)"$/\1/p' bench/plan_scale.sh |
  grep -v -e '--search' -e '--pick' | sed 's/\$L/models\/llama3-8b.model/; s/\$G/models\/gpt3-175b.model/; s/\$P/models\/topo\/p4d-x128.topo/')
figures() { grep -E '^#   (peak|total) +[0-9]+ B' "$1" | awk '{ printf "%s%s", (NR > 1 ? "," : ""), $3 }'; }
rc=0
fr=()
# the memory table's sizes in bytes: --bytes, where a shardc has it (since 2026-11)
new_bytes=() base_bytes=()
"$new" --help 2>&1 | grep -q -- --bytes && new_bytes=(--bytes)
"$base" --help 2>&1 | grep -q -- --bytes && base_bytes=(--bytes)
printf '%-34s %-40s %-40s %-6s %-4s %s\n' configuration "base peak,total (per class)" "new peak,total" "frag" "pp" "output"
for c in "${configs[@]}"; do
  name=${c%%|*}
  [[ $name =~ $filter ]] || continue
  read -r -a args <<<"${c#*|}"
  b=$(mktemp) n=$(mktemp)
  timeout 300 "$new" plan "${args[@]}" "${new_bytes[@]}" >"$n" 2>/dev/null
  rn=$?
  if [ "$base" -ef "$new" ]; then
    cp "$n" "$b"
    rb=$rn
  else
    timeout 300 "$base" plan "${args[@]}" "${base_bytes[@]}" >"$b" 2>/dev/null
    rb=$?
  fi
  fb=$(figures "$b") fn=$(figures "$n")
  same=differs
  cmp -s "$b" "$n" && same=identical
  ((rb != 0 || rn != 0)) && same="$same (exit $rb / $rn: $(grep -m1 -o 'error: .*' <(timeout 300 "$new" plan "${args[@]}" 2>&1 >/dev/null) | cut -c8-50))"
  mark=
  paste <(tr ',' '\n' <<<"$fb") <(tr ',' '\n' <<<"$fn") | awk '$2 > $1 { bad = 1 } END { exit !bad }' && mark=" HIGHER" && rc=1
  frag=$(tr ',' '\n' <<<"$fn" | paste - - | awk '$1 > p { p = $1; t = $2 } END { if (p) printf "%.3f", t / p; else printf "-" }')
  pp=$(sed -n 's/^  plan: .* pp \([0-9]*\) .*/\1/p' "$n" | head -1)
  printf '%-34s %-40s %-40s %-6s %-4s %s%s\n' "$name" "${fb:--}" "${fn:--}" "$frag" "pp ${pp:--}" "$same" "$mark"
  [ "$frag" != - ] && [ -n "$pp" ] && fr+=("$((pp > 1)) $frag")
  rm -f "$b" "$n"
done
# the fragmentation by class: without pp, under pp
for k in 0 1; do
  printf '%s\n' "${fr[@]}" | awk -v k=$k '$1 == k { print $2 }' | sort -n | awk -v k=$k '{ v[++n] = $1; s += $1 } END {
    if (!n) exit; m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    printf "fragmentation (total / peak) %s: %d plans, mean %.4f, median %.4f, largest %.4f\n", k ? "under pp" : "without pp", n, s / n, m, v[n] }'
done
exit $rc
