#!/usr/bin/env bash
# The fit check (passes/fit.c): `shardc plan` prints the plan, then refuses one that does not fit
# the topology's device memory (exit 1) with an error naming the rank's total, the device's memory,
# the largest class and the knobs that bring it down, each planned again; `shardc build` refuses it
# too. Exact stderr against tests/report/fit/*.err (refresh: fit.sh SHARDC update, after reading).
#   usage: fit.sh SHARDC [update]
set -uo pipefail
shardc=$(realpath "$1")
mode=${2:-check}
cd "$(dirname "$0")/../.."
dir=tests/report/fit
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # name, expected status, shardc arguments...
  local name=$1 want=$2
  shift 2
  "$shardc" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL $name: exit $rc, want $want"; cat "$tmp/$name.err"; fail=1
  fi
  if [ "$want" = 1 ]; then
    if [ "$mode" = update ]; then cp "$tmp/$name.err" "$dir/$name.err"
    elif ! diff -u "$dir/$name.err" "$tmp/$name.err"; then echo "FAIL $name: stderr differs"; fail=1; fi
  fi
}
# GPT-3 175B at tp 8 x dp 32 on 80 GiB H100s (CUDA target): 343,590 MiB per rank
check gpt3-175b-cuda 1 plan models/gpt3-175b.model --target cuda
grep -q '^#   capacity .*h100_80g memory: does not fit' "$tmp/gpt3-175b-cuda.out" || { echo "FAIL gpt3-175b-cuda: no plan or capacity line on stdout"; fail=1; }
grep -q '^#   optimizer state' "$tmp/gpt3-175b-cuda.out" || { echo "FAIL gpt3-175b-cuda: no memory by class"; fail=1; }
# ... and on the CPU target, whose ranks share the node's host memory (2048 GiB / 8): it fits there
# since the micro-step's layer gradients are summed inside the backward loop (passes/sums.c)
check gpt3-175b 0 plan models/gpt3-175b.model
grep -q '^#   capacity .*host memory per rank (dgx_h100_superpod node / 8; the CPU target runs on the host): fits' \
  "$tmp/gpt3-175b.out" || { echo "FAIL gpt3-175b: not the host memory per rank, or not fitting"; fail=1; }
# activations under recompute, GPT-3 175B at tp 8 + sp (micro-batch 1 x 2048 tokens, bf16), per layer:
# the slope between 96 and 48 layers (what does not grow with the layers cancels). none keeps
# 32 B x s x h / tp per layer (Korthikanti et al.'s 34 without the two dropout masks), selective 22,
# full the block's input, 2 (docs/memory.md; full's slope is asserted at most 6: at the peak it
# holds up to 4 more per layer, see there); and at 96 layers none > selective > full, with neither
# the micro-step's whole gradient (passes/sums.c) nor the bf16 weight stacks (passes/wcast.c) among
# them: full's activations stay under 2 GiB
# (the bf16 weights cast per layer at both depths: with ZeRO 1's split f32 masters the persistent copies
# fit at 48 layers but not at 96, and weight_copy auto would compare two kinds of plan)
acts() { # recompute mode, layers -> activation bytes at the peak
  "$shardc" plan models/gpt3-175b.model --target cuda -D recompute="$1" -D layers="$2" -D weight_copy=per_layer --bytes 2>/dev/null |
    awk '/^#   activations / { print $3 }'
}
sbh=$((2048 * 12288 / 8))
for rmode in none:32 selective:22 full:6; do
  r=${rmode%%:*} want=${rmode##*:}
  a96=$(acts "$r" 96)
  a48=$(acts "$r" 48)
  eval "a_$r=\${a96:-0}"
  per=$(((${a96:-0} - ${a48:-0}) / 48))
  echo "gpt3-175b recompute $r: activations $a96 B at 96 layers, $per B per layer = $(awk -v p="$per" -v u="$sbh" 'BEGIN { printf "%.2f", p / u }') x s h / tp"
  if [ "$r" = full ]; then
    [ "$per" -gt 0 ] && [ "$per" -le $((want * sbh)) ] || { echo "FAIL gpt3-175b full recompute: $per B per layer, want at most $want x s h / tp"; fail=1; }
  elif [ $(((per > want * sbh ? per - want * sbh : want * sbh - per) * 100)) -gt $((want * sbh)) ]; then
    echo "FAIL gpt3-175b recompute $r: $per B per layer, want $want x s h / tp within 1%"; fail=1
  fi
done
if [ "$a_full" -le 0 ] || [ "$a_full" -ge "$a_selective" ] || [ "$a_selective" -ge "$a_none" ] || [ "$a_full" -ge $((2 << 30)) ]; then
  echo "FAIL gpt3-175b activations at 96 layers: not none > selective > full, or full over 2 GiB"; fail=1
fi
# tiny on 6 MiB devices: the tp 2 knob fits
check tiny-small 1 plan models/tiny.model --topology tests/report/fit/small.topo
check tiny-small-build 1 build models/tiny.model --topology tests/report/fit/small.topo -o "$tmp/never"
[ ! -e "$tmp/never" ] || { echo "FAIL tiny-small-build: wrote a trainer for a plan that does not fit"; fail=1; }
# pp is a knob under ZeRO-3 too (GPT-2 124M on 2 GiB GPUs, zero 3, dp 8: pp 2 at dp 4 fits)
check gpt2-z3-pp 1 plan models/gpt2-124m.model --target cuda --topology tests/report/fit/p4d-2g.topo -D zero=3 -D dp=8 \
  -D micro_batch=4 -D batch=64
grep -q '^      = note:   -D pp=2 (dp 4, 4 accumulation steps): .* MiB per rank, fits' "$tmp/gpt2-z3-pp.err" ||
  { echo "FAIL gpt2-z3-pp: pp 2 is not offered under zero 3"; fail=1; }
# ... and the knob it names fits indeed
check tiny-small-tp2 0 plan models/tiny.model --topology tests/report/fit/small.topo -D tp=2
grep -q '^#   capacity .*cpu memory: fits' "$tmp/tiny-small-tp2.out" || { echo "FAIL tiny-small-tp2: not fitting"; fail=1; }
# plans that fit: no error
check tiny 0 plan models/tiny.model
grep -q '^#   capacity .*cpu memory: fits' "$tmp/tiny.out" || { echo "FAIL tiny: no device line"; fail=1; }
check llama3-8b 0 plan models/llama3-8b.model --target cuda
grep -q '^#   capacity .*h100_80g memory: fits' "$tmp/llama3-8b.out" || { echo "FAIL llama3-8b: no device line"; fail=1; }
# offload on the CUDA target: the host allocation of every rank on a node against the node's host memory
check tiny-offload-host 1 plan models/tiny.model --world 1 --target cuda -D zero=1 -D offload=on \
  --topology tests/report/fit/smallhost.topo
check tiny-offload 0 plan models/tiny.model --world 1 --target cuda -D zero=1 -D offload=on
grep -q '^#   host total ' "$tmp/tiny-offload.out" || { echo "FAIL tiny-offload: no host memory in the plan"; fail=1; }
# the trainer checks the plan against the host's available memory before allocating it
check huge-build 0 build models/tiny.model --world 1 --topology tests/report/fit/huge.topo -D micro_batch=10000000 \
  -o "$tmp/t_huge"
"$tmp/t_huge" --steps 1 --data /dev/null >"$tmp/huge.out" 2>&1
rc=$?
if [ "$rc" != 1 ] || ! grep -q '^error: the plan does not fit this host: .* MiB per rank ([0-9]* planned' "$tmp/huge.out"; then
  echo "FAIL trainer memory check: exit $rc"; cat "$tmp/huge.out"; fail=1
fi
# ... and a CUDA trainer against the device's free memory (cudaMemGetInfo; the emulated device reports
# SHARDRT_EMU_MEMORY): refused one byte short of the plan with the rank, the bytes and the knobs, run
# with exactly the plan's bytes, and a malformed value is an error
check cu-build 0 build models/tiny.model --world 1 --target cuda -D seq=32 -D batch=8 -D d=32 -D layers=1 -o "$tmp/t_cu"
bash scripts/gen_corpus.sh "$tmp/data.txt" 20000 3 >/dev/null
emu() { (cd "$tmp" && SHARDRT_DEVICE=emu SHARDRT_EMU_MEMORY=$1 ./t_cu --steps 1 --data data.txt --eval-every 0 \
  --val-batches 1 --save-to "$tmp/ck" >"$tmp/emu.out" 2>&1); }
emu 0
rc=$?
need=$(sed -n 's/^error: rank 0: the plan does not fit the device: .* = \([0-9]*\) bytes), but the emulated device has 0.0 MiB free (0 bytes).*knobs.*zero stage, recompute.*/\1/p' "$tmp/emu.out")
if [ "$rc" != 1 ] || [ -z "$need" ]; then echo "FAIL device memory check: exit $rc"; cat "$tmp/emu.out"; fail=1; need=1; fi
emu $((need - 1))
rc=$?
if [ "$rc" != 1 ] || ! grep -q "free ($((need - 1)) bytes)" "$tmp/emu.out"; then
  echo "FAIL device memory check, one byte short: exit $rc"; cat "$tmp/emu.out"; fail=1
fi
emu "$need" || { echo "FAIL device memory check: the plan's own bytes refused"; cat "$tmp/emu.out"; fail=1; }
emu 6x
rc=$?
if [ "$rc" != 1 ] || ! grep -q "^error: SHARDRT_EMU_MEMORY='6x': expected" "$tmp/emu.out"; then
  echo "FAIL SHARDRT_EMU_MEMORY=6x: exit $rc"; cat "$tmp/emu.out"; fail=1
fi
[ "$fail" = 0 ] && echo "fit check: ok"
exit $fail
