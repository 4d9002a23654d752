#!/usr/bin/env bash
# The memory plan's links in place (passes/memplan_views.c "Rows in place"; passes/memplan_links.c takes
# or leaves each): for plans that have them (interleaved and uneven pipeline stages over the models in
# models/, ZeRO 0-3, recompute; the Llama-3-405B and GPT-3 rows of docs/planner.md), the rank's
# allocation (`#   total` of `shardc plan`, MiB, the largest rank class's) with every packing forced to
# take every link, the rows alone, the selects alone and none (SHARDC_MEMPLAN_LINKS), the allocation the
# default choice gives, its planned peak, the links in place it takes of all (SHARDC_MEMPLAN_LINKS=report) and
# the default compile's wall seconds. The last columns:
# every link's allocation over no link's (the fully linked packing's cost or gain) and over the peak.
#   bench/memplan_links.sh [SHARDC] [FILTER]
# FILTER: a regular expression; only the plans whose name matches run.
set -uo pipefail
cd "$(dirname "$0")/.."
shardc=${1:-build/shardc}
filter=${2:-.}
T=models/tiny.model
G2=models/gpt2-124m.model
L=models/llama3-8b.model
G=models/gpt3-175b.model
B=models/llama3-405b.model
D=models/topo/dgx-h100-x256.topo
P=models/topo/p4d-x128.topo
tiny="$T -D seq=8 -D d=256 -D layers=8 -D batch=4 -D micro_batch=1 -D dp=2 -D pp=2 -D schedule=interleaved --world 4"
z3="--target cuda -D sp=on -D pp=2 -D pp_layers=balanced -D schedule=interleaved -D recompute=selective -D micro_batch=1"
g3="--target cuda -D tp=8 -D sp=on -D pp=16 -D schedule=interleaved -D recompute=selective -D micro_batch=1"
# name | arguments of `shardc plan`
configs=(
  "tiny-int2-z0|$tiny -D zero=0" "tiny-int2-z1|$tiny -D zero=1" "tiny-int2-z2|$tiny -D zero=2" "tiny-int2-z3|$tiny -D zero=3"
  "tiny-L6-int2-uneven|$T -D layers=6 -D pp_layers=balanced -D batch=8 -D micro_batch=1 -D pp=2 -D schedule=interleaved --world 2"
  "tiny-L10-pp2-int3-rcfull|$T -D layers=10 -D pp_layers=balanced -D batch=8 -D micro_batch=1 -D pp=2 -D schedule=interleaved -D interleave=3 -D recompute=full --world 2"
  "gpt2-int2-z0|$G2 -D pp=2 -D schedule=interleaved -D zero=0" "gpt2-int2-z1|$G2 -D pp=2 -D schedule=interleaved -D zero=1"
  "gpt2-int2-z2|$G2 -D pp=2 -D schedule=interleaved -D zero=2" "gpt2-int2-z3|$G2 -D pp=2 -D schedule=interleaved -D zero=3"
  "gpt2-pp4-int2-bal|$G2 -D pp=4 -D pp_layers=balanced -D schedule=interleaved -D interleave=2 --world 32 -D micro_batch=1 -D batch=64"
  "gpt2-cuda-pp2-int3-z1|$G2 --target cuda -D pp=2 -D schedule=interleaved -D interleave=3 -D zero=1 -D dp=4 --world 8"
  "llama8b-pp4-int2|$L -D pp=4 -D schedule=interleaved -D interleave=2 --world 32 -D micro_batch=1 -D batch=64"
  "llama8b-cuda-pp4-int2-z1-rcsel|$L --target cuda -D pp=4 -D schedule=interleaved -D zero=1 -D recompute=selective --world 32 -D micro_batch=1 -D batch=64"
  "llama8b-pp32x4-L128-b512|$L -D pp=32 -D layers=128 -D schedule=interleaved -D interleave=4 --world 4096 -D batch=512"
  "405b-tp4-pp2-int2-cp2-z0|$B -D dp=128 -D tp=4 -D cp=2 -D zero=0 $z3"
  "405b-tp4-pp2-int2-cp2-z1|$B -D dp=128 -D tp=4 -D cp=2 -D zero=1 $z3"
  "405b-tp4-pp2-int2-cp2-z3|$B -D dp=128 -D tp=4 -D cp=2 -D zero=3 $z3"
  "405b-tp2-pp2-int2-cp4-z3|$B -D dp=128 -D tp=2 -D cp=4 -D zero=3 $z3"
  "405b-dgx-tp8-pp4-int2-z1|$B --topology $D -D dp=64 -D tp=8 -D cp=1 -D pp=4 -D zero=1 --world 2048 ${z3/-D pp=2/}"
  "gpt3-p4d-dp8-pp16-int2-z2|$G --topology $P --world 1024 -D dp=8 -D zero=2 $g3"
  "gpt3-dgx-dp16-pp16-int2-z1|$G --topology $D --world 2048 -D dp=16 -D zero=1 $g3"
)
mib() { grep -E '^#   (peak|total) +[0-9]+ B' | awk '$2 == "peak" { p = $3 } $2 == "total" && p > best { best = p; t = $3 }
  END { if (best) printf "%.2f %.2f", best / 1048576, t / 1048576; else printf "- -" }'; }
printf '%-32s %11s %11s %9s %11s %11s %11s %11s %7s %7s %7s\n' plan peak default links all rows selects none all/none all/peak seconds
for c in "${configs[@]}"; do
  name=${c%%|*}
  [[ $name =~ $filter ]] || continue
  read -r -a args <<<"${c#*|}"
  t0=$(date +%s.%N)
  read -r peak def < <(timeout 600 "$shardc" plan "${args[@]}" --bytes 2>/dev/null | mib)
  secs=$(echo "$(date +%s.%N) - $t0" | bc)
  links=$(SHARDC_MEMPLAN_LINKS=report timeout 600 "$shardc" plan "${args[@]}" 2>&1 >/dev/null |
    awk '/memplan: .* links in place/ { t += $5; a += $7 } END { printf "%d/%d", t, a }')
  row=()
  for k in all rows selects none; do
    read -r _ t < <(SHARDC_MEMPLAN_LINKS=$k timeout 600 "$shardc" plan "${args[@]}" --bytes 2>/dev/null | mib)
    row+=("$t")
  done
  ratio=$(awk -v a="${row[0]}" -v n="${row[3]}" -v p="$peak" 'BEGIN { if (n + 0 && p + 0) printf "%.4f %.4f", a / n, a / p; else printf "- -" }')
  printf '%-32s %11s %11s %9s %11s %11s %11s %11s %7s %7s %7.2f\n' "$name" "$peak" "$def" "$links" "${row[@]}" $ratio "$secs"
done
