#!/usr/bin/env bash
# Activation recompute in the compiled CPU trainer (label mpi; passes/recompute.c):
#
#   recompute.sh SHARDC
#
# For the tiny GPT on 1 rank, dp 2 and tp 2 (mpirun), and a Llama-shaped model on tp 2 + sp, a
# trainer built with `recompute selective` and one with `recompute full` give bit-identical losses
# over 10 AdamW steps and bit-identical checkpoints (parameters and Adam moments, so every gradient
# was identical too) to the trainer built with `recompute none`; and the planned memory drops
# (full < selective < none, from the trainer's "memory at start" line).
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
run10=(--data "$t/data.txt" --steps 10 --eval-every 0 --val-batches 1)
planned() { grep -m1 -o 'memory at start: planned [0-9.]* MiB' "$1" | awk '{ print $5 }'; }

layout() { # layout NAME NP SHARDC-ARGS...: none/selective/full trainers of one layout, compared
  local name=$1 np=$2
  shift 2
  for r in none selective full; do
    "$shardc" build "$@" -D recompute="$r" -o "$t/${name}_$r" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
    local launch=("${mpi[@]}" -np "$np")
    [ "$np" = 1 ] && launch=()
    "${launch[@]}" "$t/${name}_$r" "${run10[@]}" --threads 1 --log "$t/${name}_$r.jsonl" \
      --save-to "$t/ck_${name}_$r" >"$t/${name}_$r.out" 2>&1 || { cat "$t/${name}_$r.out"; echo "FAIL: $name $r"; exit 1; }
  done
  local n
  n=$(losses "$t/${name}_none.jsonl" | wc -l)
  [ "$n" = 10 ] || { echo "FAIL: $name: $n steps logged, want 10"; exit 1; }
  for r in selective full; do
    [ "$(losses "$t/${name}_none.jsonl")" = "$(losses "$t/${name}_$r.jsonl")" ] || {
      paste <(losses "$t/${name}_none.jsonl") <(losses "$t/${name}_$r.jsonl"); echo "FAIL: $name $r: losses differ"; exit 1; }
    same_ckpt "$t/ck_${name}_none/step_00000010" "$t/ck_${name}_$r/step_00000010" ||
      { echo "FAIL: $name $r: checkpoints differ"; exit 1; }
  done
  local a b c
  a=$(planned "$t/${name}_none.out") b=$(planned "$t/${name}_selective.out") c=$(planned "$t/${name}_full.out")
  echo "$name: selective and full bit-identical to none over 10 steps (losses, checkpoints); planned MiB none $a, selective $b, full $c"
  awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { exit !(c < b && b < a) }' || { echo "FAIL: $name: planned memory does not drop"; exit 1; }
}

tiny=(models/tiny.model -D seq=32)
layout tiny1 1 "${tiny[@]}" -D micro_batch=8 --world 1
layout tiny_dp2 2 "${tiny[@]}" -D micro_batch=4 -D dp=2 -D tp=1 --world 2
layout tiny_tp2 2 "${tiny[@]}" -D micro_batch=8 -D dp=1 -D tp=2 --world 2
llama=(models/llama3-8b.model -D vocab=256 -D seq=32 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96
       -D batch=4 -D micro_batch=4 -D dp=1 -D zero=0 -D precision=f32)
layout llama_tp2sp 2 "${llama[@]}" -D tp=2 -D sp=on --world 2
echo "recompute: ok"
