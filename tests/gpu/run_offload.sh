#!/usr/bin/env bash
# tests/gpu/run_offload.sh — on a GPU machine, from binaries tests/gpu/pack.sh packed into .gpu/bin:
# GPT-2 124M (B 16, T 1024, bf16, one GPU) with `zero 1 offload` (the AdamW moments and the update on
# the host), its copies overlapped with the compute (passes/offload_sched.c) against the same binary
# with SHARDRT_OFFLOAD_SYNC=1 (every copy synchronous where it starts: no overlap), the older
# shardc's build when packed (gpt2_off_base) and the plan without offload (gpt2_cuda), in
# interleaved rounds. Prints each one's median ms/step (after its first step) per round and over
# the rounds, and the first losses: the overlapped and the synchronous runs compute the same values.
# Usage: source .gpu/env.sh && tests/gpu/run_offload.sh [bin=.gpu/bin] [steps=12] [rounds=2]
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$(cd "${1:-.gpu/bin}" && pwd) || exit 1
steps=${2:-12}
rounds=${3:-2}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc
export SHARDRT_CUBIN_CACHE=${SHARDRT_CUBIN_CACHE:-/tmp/shardc-cubin}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
python3 bench/gpt2_tokens.py "$t/tok.bin" 800000 --vocab 50257 --repeat 4096 || exit 1
runs=("overlap:gpt2_off" "sync:gpt2_off:SHARDRT_OFFLOAD_SYNC=1")
[ -x "$bin/gpt2_off_base" ] && runs+=("base:gpt2_off_base")
[ -x "$bin/gpt2_cuda" ] && runs+=("no-offload:gpt2_cuda")
fails=0
for r in $(seq 1 "$rounds"); do
  for spec in "${runs[@]}"; do
    IFS=: read -r name exe envs <<<"$spec"
    log="$t/$name.$r.jsonl"
    if ! env ${envs:+"$envs"} "$bin/$exe" --data "$t/tok.bin" --steps "$steps" --eval-every 0 --val-batches 1 \
        --log "$log" >"$t/$name.$r.out" 2>&1; then
      tail -5 "$t/$name.$r.out"; echo "FAILED: $name (round $r)"; fails=$((fails + 1)); continue
    fi
    python3 - "$log" "$name" "$r" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
steady = rows[1:] if len(rows) > 1 else rows
print("round %s %-10s median %7.1f ms/step (min %7.1f), loss %.4f -> %.4f" % (sys.argv[3], sys.argv[2],
      statistics.median(r["ms"] for r in steady), min(r["ms"] for r in steady), rows[0]["loss"], rows[-1]["loss"]))
PY
  done
done
python3 - "$t" "$rounds" "${runs[@]}" <<'PY'
import glob, json, statistics, sys
t, rounds, runs = sys.argv[1], int(sys.argv[2]), [s.split(":")[0] for s in sys.argv[3:]]
med, loss = {}, {}
for name in runs:
    ms = []
    for r in range(1, rounds + 1):
        try:
            rows = [json.loads(l) for l in open("%s/%s.%d.jsonl" % (t, name, r)) if '"tokens_per_s"' in l]
        except OSError:
            continue
        ms += [x["ms"] for x in rows[1:]]
        loss.setdefault(name, [x["loss"] for x in rows[:5]])
    if ms: med[name] = statistics.median(ms)
for name in runs:
    if name in med:
        print("%-10s median %7.1f ms/step over %d rounds%s" % (name, med[name], rounds,
              "" if name == "overlap" or "overlap" not in med else ", overlap/%s = %.3f" % (name, med["overlap"] / med[name])))
for name in runs:
    if name in loss: print("%-10s first losses %s" % (name, " ".join("%.6f" % x for x in loss[name])))
if "overlap" in loss and "sync" in loss and loss["overlap"] != loss["sync"]:
    print("note: the overlapped and synchronous runs' losses differ (the GPU's kernels may not be deterministic run to run)")
PY
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
