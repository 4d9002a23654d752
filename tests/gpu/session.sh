#!/usr/bin/env bash
# tests/gpu/session.sh — everything one lent GPU call measures for issue 17, in one command, each part
# under its own time limit and all of them under BUDGET seconds, so a session spends its few device
# minutes in a single prepared run (the device tool allows 600 s a command). Build and pack first on
# the build machine:  bash scripts/build.sh && LLMC=/path/to/train_gpt2cu tests/gpu/pack.sh build
# then on the GPU machine (carry .gpu):  source .gpu/env.sh && tests/gpu/session.sh [OUT=$OUT or .gpu/out] [BUDGET=540]
# Parts, in order of what they decide (a part that would start with under its minimum left is skipped
# and says so):
#   check   tests/gpu/run_gpu.sh: the runtime and every kernel against their references, tiny
#           against the CPU, GPT-2's loss falling (correctness before any timing); then a probe:
#           GPT-2's first 2 steps with every attention candidate offered, else without the wgmma
#           tiles (SHARDRT_ATTN_WGMMA=0), else without autotuning, the rest run under what started
#   peers   bench/gpu_compare.sh: shardc, llm.c, PyTorch eager and torch.compile on GPT-2 and the
#           509M Llama shape (shardc's also built with --no-fuse residual,swiglu,normres: llamanofuse, and with
#           --no-fuse hfuse: llamanohfuse)
#   sweep   cuda_kernels_gpu's attention tile sweep (mma.sync tiles in dynamic shared memory, the
#           wgmma forward's and backward's on sm_90a, the warp-specialized forward, the one-kernel
#           backward) and the bytes-bound kernels' variants side by side (one-pass): the new kernels'
#           first timings, so it runs before tune
#   tune    GPT-2 124M B16 T1024: the compiled attention tiles (SHARDRT_ATTN_AUTOTUNE=0), tuned
#           (the candidates checked against the default, then timed, at the first call: the summaries
#           give the check's cost and margin, a refusal its warning), tuned again from the record (a resumed run),
#           the same with the weights' bf16 copies cast per layer (weight_copy per_layer: the persistent copies' gain),
#           and the cuBLASLt choices: SHARDRT_GEMM_AUTOTUNE=0 with and without SHARDRT_GEMM_BGRAD=fused
#   offload tests/gpu/run_offload.sh: zero 1 offload, overlapped against synchronous copies
#   ncu     per-kernel times of GPT-2's third step (ncu, when present), summed by kernel name
#           (tests/gpu/ncu_sum.py; the two CSVs kept in OUT)
#   sdpa    the attention's peers: PyTorch's scaled_dot_product_attention on each backend (FlashAttention-2,
#           cuDNN, memory-efficient; FlashAttention-3 when installed) at the sweep's shapes, fwd / bwd / fwd+bwd
#           TFLOP/s counted as the sweep counts them (bench/peers/sdpa_torch.py): issue 17's 300 beside the field's
#   ncullama the same for the Llama-shaped 509M trainer
# Each part's output (PART.log, ncu's CSVs) goes back in OUT/logs.tar.gz (the device tool returns at most 8 files);
# OUT/summary.txt has the lines that go to docs/performance.md.
# PARTS=sweep,offload,ncu,ncullama,sdpa (a comma list) runs only those (the probe always): the parts a first call's
# budget left out, run by a second call on the same warm machine (its cubin cache is kept there). PARTS=rest runs
# every part no earlier call on this machine started (each part's name is written to $SHARDRT_CUBIN_CACHE/session-started
# as it starts; a part skipped for time is not), so a second call needs no list of what the first one reached.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-.gpu/out}}
budget=${2:-540}
bin=$(cd .gpu/bin && pwd) || { echo "session.sh: no .gpu/bin (tests/gpu/pack.sh)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
export SHARDRT_CUBIN_CACHE=${SHARDRT_CUBIN_CACHE:-/tmp/shardc-cubin}
mkdir -p "$SHARDRT_CUBIN_CACHE"
started=$SHARDRT_CUBIN_CACHE/session-started # the parts started on this machine (PARTS=rest)
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
sum="$out/summary.txt"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nproc; git log --oneline -1 2>/dev/null; } > "$sum"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
python3 bench/gpt2_tokens.py "$t/gpt2.bin" 800000 --vocab 50257 --repeat 4096 >/dev/null
python3 bench/gpt2_tokens.py "$t/llama.bin" 800000 --vocab 32000 --repeat 4096 >/dev/null # the Llama shape's vocabulary

# part NAME MIN MAX CMD...: runs CMD with at most min(MAX, what is left) seconds when MIN are left
part() {
  local name=$1 min=$2 max=$3 l
  shift 3
  if [ "${PARTS:-}" = rest ]; then
    if grep -qx "$name" "$started" 2>/dev/null; then echo "== $name: started by an earlier call" >> "$sum"; return; fi
  else
    case ",${PARTS:-$name}," in *",$name,"*) ;; *) echo "== $name: not in PARTS" >> "$sum"; return ;; esac
  fi
  l=$(left)
  if [ "$l" -lt "$min" ]; then
    echo "== $name: skipped ($l s left, needs $min)" | tee -a "$sum"
    return
  fi
  [ "$l" -lt "$max" ] && max=$l
  local t0=$(date +%s)
  echo "$name" >> "$started"
  echo "== $name (limit $max s)" | tee -a "$sum"
  timeout -k 5 "$max" bash -c '"$@"' _ "$@" > "$out/$name.log" 2>&1 # (bash: the parts below are functions)
  local rc=$?
  echo "-- $name: exit $rc in $(($(date +%s) - t0)) s" | tee -a "$sum"
}

# one GPT-2 run: median ms/step after step 1 and the autotune lines
gpt2() {
  local label=$1 exe=$bin/gpt2_cuda
  shift
  if [ "${1:-}" = --perlayer ]; then exe=$bin/gpt2_cuda_perlayer; shift; fi # weight_copy per_layer's build
  env "$@" "$exe" --data "$t/gpt2.bin" --steps 12 --eval-every 0 --val-batches 1 --log "$t/g.jsonl" > "$t/g.out" 2>&1
  local rc=$?
  grep -E "^(device|attn autotune: [0-9]|gemm autotune: [0-9]|warning: (attn|gemm) autotune)" "$t/g.out"
  python3 - "$t/g.jsonl" "$label" "$rc" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l] if sys.argv[3] == "0" else []
if not rows: print("gpt2 %s: FAILED (exit %s)" % (sys.argv[2], sys.argv[3])); sys.exit(1)
ms = statistics.median(r["ms"] for r in rows[1:] or rows)
print("gpt2 %s: median %.2f ms/step (steps 2..%d), loss %.3f -> %.3f" % (sys.argv[2], ms, len(rows), rows[0]["loss"], rows[-1]["loss"]))
PY
}
tune() { # the records sit beside the cubins: the attention's removed so that its first run tunes
  rm -f "$SHARDRT_CUBIN_CACHE"/attn-tune-*.txt
  gpt2 "attn default, gemm tuned" SHARDRT_ATTN_AUTOTUNE=0
  gpt2 "attn tuned (first run)" SHARDRT_ATTN_AUTOTUNE=1
  gpt2 "attn tuned (from the record)" SHARDRT_ATTN_AUTOTUNE=1
  gpt2 "attn tuned, weight copies cast per layer" --perlayer SHARDRT_ATTN_AUTOTUNE=1
  gpt2 "gemm heuristic, own bias gradient" SHARDRT_GEMM_AUTOTUNE=0
  gpt2 "gemm heuristic, cuBLASLt DGELU_BGRAD" SHARDRT_GEMM_AUTOTUNE=0 SHARDRT_GEMM_BGRAD=fused
}
sweep() {
  SHARDK_ATTN_SWEEP=only "$bin/cuda_kernels_gpu"
  SHARDK_BYTES_SWEEP=only "$bin/cuda_kernels_gpu"
}
ncu_step() { # ncu_step [TRAINER=gpt2_cuda]: the kernels of a 3-step run past the launches of a 2-step run:
  # the third step's (both runs validate at their end: ncu_sum.py leaves that tail out)
  command -v ncu >/dev/null || { echo "no ncu"; return 0; }
  local s exe=${1:-gpt2_cuda} data=$t/gpt2.bin
  [ "$exe" = gpt2_cuda ] || data=$t/llama.bin
  for s in 2 3; do # LC_ALL=C: the numbers as tests/gpu/ncu_sum.py reads them (its CI test: ncu_sum_test.sh)
    LC_ALL=C ncu --clock-control none --metrics gpu__time_duration.sum --csv "$bin/$exe" --data "$data" \
      --steps $s --eval-every 0 --val-batches 1 > "$out/ncu-$exe-$s.csv" 2>/dev/null
  done
  python3 tests/gpu/ncu_sum.py "$out/ncu-$exe-2.csv" "$out/ncu-$exe-3.csv"
}

probe() { # GPT-2's start with every candidate offered: the first settings under which 2 steps run
  local v
  for v in "" "SHARDRT_ATTN_WGMMA=0" "SHARDRT_ATTN_WGMMA=0 SHARDRT_ATTN_AUTOTUNE=0"; do
    # shellcheck disable=SC2086 # v: variable assignments for env
    env $v timeout -k 5 150 "$bin/gpt2_cuda" --data "$t/gpt2.bin" --steps 2 --eval-every 0 --val-batches 1 \
      > "$out/probe${v:+-${v%%=*}}.log" 2>&1 && { echo "settings: ${v:-all candidates}"; return 0; }
  done
  return 1
}

export bin t out
export -f gpt2 tune sweep ncu_step probe
part check 120 200 tests/gpu/run_gpu.sh "$bin" 20
grep -E "^(gpt2-124m|[0-9]+ failure)" "$out/check.log" >> "$sum"
# Should a candidate fault on the GPU (a fault ends the process; the autotuning's output check cannot
# catch it), the parts after this one run without the wgmma tiles, or without autotuning, and say so
settings=$(probe) || settings="settings: GPT-2 does not start even without autotuning (probe*.log)"
echo "$settings" | tee -a "$sum"
case $settings in
  *"SHARDRT_ATTN_AUTOTUNE=0"*) export SHARDRT_ATTN_WGMMA=0 SHARDRT_ATTN_AUTOTUNE=0 ;;
  *"SHARDRT_ATTN_WGMMA=0"*) export SHARDRT_ATTN_WGMMA=0 ;;
esac
part peers 120 300 bench/gpu_compare.sh "$bin" 20 shardc,llama,llamanofuse,llamanohfuse,llmc,torch,torchllama
grep -E "median" "$out/peers.log" >> "$sum"
part sweep 60 200 sweep
part tune 60 200 tune
grep -E "^(gpt2 |attn autotune: [0-9]|gemm autotune: [0-9]|warning: (attn|gemm) autotune)" "$out/tune.log" >> "$sum"
part offload 60 90 tests/gpu/run_offload.sh "$bin" 12 2
grep -E "median|over the rounds" "$out/offload.log" >> "$sum"
part ncu 50 90 ncu_step
head -12 "$out/ncu.log" >> "$sum" 2>/dev/null
part sdpa 30 90 python3 bench/peers/sdpa_torch.py
grep -E "^[a-z0-9]+:|TFLOP|refused|FAILED|not installed" "$out/sdpa.log" >> "$sum" 2>/dev/null
part ncullama 50 120 ncu_step llama509_cuda
head -12 "$out/ncullama.log" >> "$sum" 2>/dev/null
echo "== $(($(date +%s) - start)) s in all" >> "$sum"
# The device tool brings back at most 8 files from OUT (session 26 lost sweep.log, peers.log and tune.log to that):
# every part's log and CSV go back in one archive beside summary.txt
(cd "$out" && find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tar.gz -printf '%P\n' | sort > "$t/logs" &&
  tar -czf logs.tar.gz -T "$t/logs" && xargs rm -f < "$t/logs") && echo "logs: $out/logs.tar.gz" >> "$sum"
cat "$sum"
