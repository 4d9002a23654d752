#!/usr/bin/env bash
# tests/report/no_fuse.sh — `shardc --no-fuse LIST` (passes/fuse_off.c): each of the CUDA target's fusions
# turned off alone makes the program launch more kernels and the predicted step no shorter; the cost
# model's kernel calls stay the launches of the C codegen writes for the unfused program
# (tests/report/cuda_launches.py), as for the fused one (tests/report/gpu_cost.sh); a name that is no
# fusion, or the option on the CPU target, is refused with the valid names and a non-zero exit.
# The Llama shape of gpu_cost.sh (8 layers, d 2048, SwiGLU, no biases) and, for the bias / GELU
# epilogues Llama has none of, GPT-2 124M.
# Usage: tests/report/no_fuse.sh SHARDC
set -uo pipefail
shardc=${1:?usage: no_fuse.sh SHARDC}
source "$(dirname "$0")/lib.sh"

llama=(models/llama3-8b.model --topology models/topo/p5.topo --world 1 --target cuda -D vocab=32000 -D layers=8
  -D d=2048 -D heads=16 -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0
  -D recompute=none -D tp=1 -D sp=off)
gpt2=(models/gpt2-124m.model --topology models/topo/p5.topo --world 1 --target cuda -D micro_batch=16 -D batch=16
  -D seq=1024 -D zero=0)

# MODEL LIST: "CALLS STEP_S LAUNCHES" of the plan with --no-fuse LIST ("-": none), or nothing when it failed
measure() {
  local -n args=$1
  local flag=() out=$tmp/$1-$2
  [ "$2" != - ] && flag=(--no-fuse "$2")
  "$shardc" plan "${args[@]}" "${flag[@]}" --cost >"$out.txt" 2>&1 || return
  "$shardc" plan "${args[@]}" "${flag[@]}" --emit-c "$out.c.d" >/dev/null 2>&1 || return
  local calls step launches
  calls=$(sed -n 's/^#   compute .*, \([0-9]*\) kernel calls .*/\1/p' "$out.txt")
  step=$(sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p' "$out.txt" | secs)
  launches=$(python3 tests/report/cuda_launches.py "$out.c.d"/*.c) || return
  echo "$calls $step $launches"
}

check() { # MODEL LIST BASE_CALLS BASE_STEP: calls above the base's, the step not below, calls == launches
  local r
  r=$(measure "$1" "$2")
  if [ -z "$r" ]; then
    bad "$1 --no-fuse $2: plan or --emit-c failed ($(tail -n 1 "$tmp/$1-$2.txt" 2>/dev/null))"
    return
  fi
  set -- "$1" "$2" "$3" "$4" $r
  printf '  %-6s --no-fuse %-24s kernel calls %4s (all on %s), step %.4g s (%.4g), the program launches %s\n' \
    "$1" "$2" "$5" "$3" "$6" "$4" "$7"
  [ "$5" -gt "$3" ] || bad "$1 --no-fuse $2: $5 kernel calls, not above the fused program's $3"
  awk -v s="$6" -v b="$4" 'BEGIN { exit !(s >= b) }' || bad "$1 --no-fuse $2: step $6 s below the fused $4 s"
  [ "$5" = "$7" ] || bad "$1 --no-fuse $2: the model counts $5 kernel calls, the program launches $7"
  grep -q "this plan has no .* to turn off" "$tmp/$1-$2.txt" && bad "$1 --no-fuse $2: said to change nothing: $(grep -m1 'to turn off' "$tmp/$1-$2.txt")"
  eval "calls_${1}_${2//,/_}=$5"
}

for m in llama gpt2; do
  base=$(measure $m -)
  if [ -z "$base" ]; then
    bad "$m: the fused plan failed"
    continue
  fi
  set -- $base
  [ "$1" = "$3" ] || bad "$m: the model counts $1 kernel calls, the program launches $3"
  if [ $m = llama ]; then
    for l in residual swiglu normres epilogue groups ce sumsq hfuse residual,swiglu,normres all; do check $m $l "$1" "$2"; done
  else
    for l in epilogue normres ce sumsq; do check $m $l "$1" "$2"; done
  fi
done
# the three together cost more calls than each alone; `all` at least as many as any
for l in residual swiglu normres; do
  v=calls_llama_$l
  [ "${calls_llama_residual_swiglu_normres:-0}" -gt "${!v:-0}" ] ||
    bad "llama: residual,swiglu,normres off ${calls_llama_residual_swiglu_normres:-?} calls, not above $l off alone (${!v:-?})"
done
for l in residual swiglu normres epilogue groups ce sumsq hfuse; do
  v=calls_llama_$l
  [ "${calls_llama_all:-0}" -ge "${!v:-1}" ] || bad "llama: all off ${calls_llama_all:-?} calls, below $l off alone (${!v:-?})"
done

# refused: an unknown name (with the valid ones), the CPU target, no list
out=$("$shardc" plan "${llama[@]}" --no-fuse residual,bogus 2>&1) && bad "--no-fuse residual,bogus accepted"
grep -q "no fusion named 'bogus' (valid: residual, swiglu, normres, epilogue, groups, ce, sumsq, hfuse, all)" <<<"$out" ||
  bad "--no-fuse residual,bogus: '$out'"
out=$("$shardc" plan models/gpt2-124m.model --no-fuse ce 2>&1) && bad "--no-fuse on the CPU target accepted"
grep -q "use it with --target cuda" <<<"$out" || bad "--no-fuse on the CPU target: '$out'"
out=$("$shardc" plan "${llama[@]}" --no-fuse 2>&1) && bad "--no-fuse without a list accepted"
grep -q -- "--no-fuse needs a value" <<<"$out" || bad "--no-fuse without a list: '$out'"
out=$("$shardc" plan "${llama[@]}" --no-fuse residual, 2>&1) && bad "--no-fuse 'residual,' accepted"
exit $fail
# a fusion the plan has none of (GPT-2: biases, so no bias-less residual epilogue; no SwiGLU; no sibling
# GEMMs) is said to change nothing (replan.c: the program compiled with it on is the same), each by name
out=$("$shardc" plan "${gpt2[@]}" --no-fuse residual,swiglu,ce,hfuse 2>&1 >/dev/null) || bad "gpt2 --no-fuse residual,swiglu,ce,hfuse failed: '$out'"
for l in residual swiglu hfuse; do
  grep -q "^shardc: note: --no-fuse $l: this plan has no $l fusion to turn off" <<<"$out" || bad "gpt2 --no-fuse $l: no note that it changes nothing: '$out'"
done
grep -q -- "--no-fuse ce: this plan has no" <<<"$out" && bad "gpt2 --no-fuse ce: said to change nothing, though the cross-entropy fuses: '$out'"
