#!/usr/bin/env bash
# Where the CPU step goes: GPT-2 124M at B=4, T=64 (the cpu_peers.sh configuration), profiled with
# `perf record -e cpu-clock` (a software clock: works in VMs without hardware counters). The trainer
# runs twice, with 0 steps and with `steps` steps; the difference of the two profiles, per symbol,
# divided by the steps, is the CPU time of one step (start-up, initialisation and exit cancel out),
# grouped: OpenBLAS's GEMM (its kernel, packing, the beta pass, its threads' sync), libgomp (threads
# waiting at barriers: the other thread idle or preempted), the LLVM kernels, the C kernels, libc
# copies, the OS. CPU ms over both threads; on a quiet machine the step's wall time is about their
# sum / threads. Numbers in docs/performance.md ("Where the CPU step goes"; "bf16 GEMMs on the CPU").
# precision bf16: oneDNN's GEMMs (its JIT-built kernels have no symbol: perf's [unknown] / anonymous
# memory) and the rounding to bf16 (rt_cvt_f32_bf16: the operands a GEMM rounds, the weights' copies).
#   bench/cpu_profile.sh [steps=6] [threads=2] [kernels=llvm] [precision=f32]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
threads=${2:-2}
kernels=${3:-llvm}
precision=${4:-f32}
shardc=${SHARDC:-build/shardc}
command -v perf >/dev/null || { echo "cpu_profile: perf is not installed"; exit 1; }
t=$(mktemp -d /tmp/cpu-profile-XXXXXX)
trap 'rm -rf "$t"' EXIT
"$shardc" build models/gpt2-124m.model -D micro_batch=4 -D batch=4 -D seq=64 -D zero=0 -D precision="$precision" --world 1 \
  --cpu-kernels "$kernels" -o "$t/train" 2>/dev/null
python3 bench/gpt2_tokens.py "$t/tok.bin"
for n in 0 "$steps"; do
  perf record -q -e cpu-clock -F 1000 -o "$t/perf.$n" "$t/train" --data "$t/tok.bin" --val "$t/tok.bin" --val-batches 1 \
    --eval-every 0 --steps "$n" --threads "$threads" --save-to '' --log "$t/log.$n.jsonl" >/dev/null 2>&1
  perf report -i "$t/perf.$n" --no-children --sort dso,symbol -F sample,dso,symbol 2>/dev/null | grep -v '^#' >"$t/rep.$n"
done
python3 - "$t/rep.0" "$t/rep.$steps" "$steps" "$t/log.$steps.jsonl" "$kernels $precision" <<'PY'
import collections, json, statistics, sys
def load(f):
    d = collections.Counter()
    for l in open(f):
        p = l.split()
        if len(p) >= 4 and p[0].isdigit():
            d[(p[1], p[3])] += int(p[0])
    return d
a, b, steps = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
ms = [json.loads(l)["ms"] for l in open(sys.argv[4]) if '"tokens_per_s"' in l]
def group(dso, sym):
    if "openblas" in dso:
        return "GEMM: OpenBLAS " + ("kernel" if sym.startswith("sgemm_kernel") else "beta (C = 0 / C *= beta)" if "beta" in sym
                                     else "packing" if "copy" in sym else "other")
    if "dnnl" in dso: return "GEMM: oneDNN (library: " + ("reorders" if "reorder" in sym else "brgemm driver" if "brg" in sym else "other") + ")"
    if dso.startswith("[unknown]") or "anon" in dso or dso.startswith("[JIT]") or "perf-" in dso:
        return "GEMM: oneDNN JIT kernels (no symbol)"
    if "cvt_f32_bf16" in sym: return "bf16 rounding (rt_cvt_f32_bf16)"
    if "gomp" in dso: return "libgomp: waiting at barriers"
    if "kallsyms" in dso: return "OS: " + ("sched_yield (OpenBLAS threads' sync)" if "yield" in sym or "schedule" in sym
                                           or "task_switch" in sym else "other")
    if sym.startswith("shardc_llk"): return "LLVM kernels"
    if "libc" in dso: return "libc: memcpy / memset"
    if "attn" in sym: return "C: attention"
    if "xent" in sym: return "C: cross-entropy"
    if "reduce_to" in sym or "chunked_sum" in sym or "sumsq" in sym: return "C: reductions (bias grads, grad norm)"
    return "C: other kernels"
g = collections.Counter()
for k in b:
    g[group(*k)] += (b[k] - a.get(k, 0)) / steps
tot = sum(g.values())
print(f"--cpu-kernels / precision {sys.argv[5]}: {steps} steps, median step {statistics.median(ms[1:] or ms):.0f} ms "
      f"(steps: {', '.join(f'{m:.0f}' for m in ms)}); CPU ms per step, all threads: {tot:.0f}")
for k, v in g.most_common():
    if abs(v) >= 0.5: print(f"  {v:8.1f} ms  {100 * v / tot:5.1f} %  {k}")
gemm = sum(v for k, v in g.items() if k.startswith("GEMM") or "sched_yield" in k)
idle = g["libgomp: waiting at barriers"]
print(f"  GEMM (with its threads' sync) {gemm:.0f} ms, waiting {idle:.0f} ms, everything else {tot - gemm - idle:.0f} ms")
PY
