#!/usr/bin/env bash
# Benchmark: GPT-2 124M at B=4, T=64 on CPU threads, side by side in one run: shardc's trainer in
# f32 (-D precision=f32) with the C kernels (--cpu-kernels c) and with LLVM's (--cpu-kernels llvm),
# shardc in `precision bf16` (bf16 GEMMs through oneDNN, f32 elsewhere; LLVM kernels), llm.c's
# train_gpt2, PyTorch eager (bench/peers/gpt2_torch.py --device cpu) in fp32 and with CPU autocast
# to bf16 (--cpu-bf16). They alternate, `reps` rounds of `steps` steps each; a run's figure is its
# median step after the first (warm-up), each one's result its best run. Numbers in
# docs/performance.md ("CPU kernels through LLVM", "bf16 GEMMs on the CPU").
#   bench/cpu_peers.sh LLMC_DIR|- [reps=2] [steps=4] [threads=2]
# LLMC_DIR: a checkout of github.com/karpathy/llm.c (its train_gpt2.c and llmc/), built here with
# gcc -O3 -march=native -fopenmp -DOMP after a sed of its main loop: `steps` steps, no validation,
# no sampling (its train step itself unchanged). Its gpt2_124M.bin is written with random weights
# by bench/peers/llmc_weights.py, tokens by bench/gpt2_tokens.py. PYTHON: a python with torch
# (default python3); a peer that cannot run is reported as such, the others still run. LLMC_DIR
# `-` leaves llm.c out (its step is ~9x shardc's: a short comparison of the others). BASE: another
# shardc binary (e.g. the main branch's build/shardc): its bf16 trainer runs too, in the same rounds
# ("shardc bf16, BASE"), to compare a change side by side. Each run's load average is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
llmc=$1
[ "$llmc" = - ] || llmc=$(realpath "$llmc")
reps=${2:-2}
steps=${3:-4}
threads=${4:-2}
py=${PYTHON:-python3}
shardc=${SHARDC:-build/shardc}
t=$(mktemp -d /tmp/cpu-peers-XXXXXX)
trap 'rm -rf "$t"' EXIT
# shardc builds: name, precision, kernels
builds=("c f32 c" "llvm f32 llvm" "bf16 bf16 llvm")
kinds="c llvm bf16"
[ -n "${BASE:-}" ] && builds+=("bf16base bf16 llvm") && kinds="$kinds bf16base"
for b in "${builds[@]}"; do
  set -- $b
  sc=$shardc
  [ "$1" = bf16base ] && sc=$BASE
  "$sc" build models/gpt2-124m.model -D micro_batch=4 -D batch=4 -D seq=64 -D zero=0 -D precision="$2" --world 1 \
    --cpu-kernels "$3" -o "$t/train_$1" 2>/dev/null
done
python3 bench/gpt2_tokens.py "$t/tok.bin"
llmc_ok=0
if [ "$llmc" != - ]; then
  llmc_ok=1
  mkdir -p "$t/llmc/dev/data/tinyshakespeare"
  cp "$t/tok.bin" "$t/llmc/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
  cp "$t/tok.bin" "$t/llmc/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
  sed -e "s/step <= 40/step <= $steps - 1/" -e 's/if (step % 10 == 0)/if (0)/' -e 's/if (step > 0 \&\& step % 20 == 0)/if (0)/' \
    "$llmc/train_gpt2.c" >"$t/llmc/train_gpt2.c"
  cp -r "$llmc/llmc" "$t/llmc/"
  gcc -O3 -march=native -fopenmp -DOMP "$t/llmc/train_gpt2.c" -lm -o "$t/llmc/train_gpt2"
  python3 bench/peers/llmc_weights.py "$t/llmc/gpt2_124M.bin"
fi
torch_ok=1
"$py" -c "import torch" 2>/dev/null || { torch_ok=0; echo "pytorch: not importable by $py; left out"; }
for r in $(seq "$reps"); do
  for k in $kinds; do
    echo "round $r $k: load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$t/train_$k" --data "$t/tok.bin" --val "$t/tok.bin" --val-batches 1 --eval-every 0 --steps "$steps" \
      --threads "$threads" --log "$t/$k.$r.jsonl" >/dev/null
  done
  [ "$llmc_ok" = 1 ] && (cd "$t/llmc" && OMP_NUM_THREADS=$threads ./train_gpt2 >"$t/llmc.$r.txt")
  if [ "$torch_ok" = 1 ]; then
    echo "round $r pytorch: load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$py" bench/peers/gpt2_torch.py --device cpu --threads "$threads" --mode eager \
      --steps "$steps" -B 4 -T 64 --times >"$t/torch.$r.txt"
    "$py" bench/peers/gpt2_torch.py --device cpu --cpu-bf16 --threads "$threads" --mode eager \
      --steps "$steps" -B 4 -T 64 --times >"$t/torchbf16.$r.txt"
  fi
done
python3 - "$t" "$reps" "$torch_ok" "$llmc_ok" "$kinds" <<'PY'
import json, re, statistics, sys
d, reps, torch_ok, llmc_ok = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
names = {"c": "shardc f32 --cpu-kernels c", "llvm": "shardc f32 --cpu-kernels llvm", "bf16": "shardc bf16 (oneDNN GEMMs)",
         "bf16base": "shardc bf16, BASE"}
kinds = sys.argv[5].split()
names = {k: names[k] for k in kinds}
def med(xs):
    xs = xs[1:] if len(xs) > 1 else xs
    return statistics.median(xs)
runs = {}
for r in range(1, reps + 1):
    for k in kinds:
        rows = [json.loads(l) for l in open(f"{d}/{k}.{r}.jsonl") if '"tokens_per_s"' in l]
        runs.setdefault(names[k], []).append(med([x["ms"] for x in rows]))
    if llmc_ok:
        ms = [float(m) for m in re.findall(r"took ([0-9.]+) ms", open(f"{d}/llmc.{r}.txt").read())]
        runs.setdefault("llm.c train_gpt2", []).append(med(ms))
    if torch_ok:
        for f, name in (("torch", "pytorch eager (fp32)"), ("torchbf16", "pytorch eager (bf16 autocast)")):
            ms = [float(m) for m in re.findall(r"step_ms ([0-9.]+)", open(f"{d}/{f}.{r}.txt").read())]
            runs.setdefault(name, []).append(med(ms))
best = {k: min(v) for k, v in runs.items()}
for k in kinds:  # the losses, to see that two builds of one precision compute the same
    print(f"  losses, {names[k]}, round 1: " + " ".join(
        repr(json.loads(l)["loss"]) for l in open(f"{d}/{k}.1.jsonl") if '"tokens_per_s"' in l))
print("GPT-2 124M, B=4, T=64: best run's median ms/step (each run's in brackets)")
for k, v in runs.items():
    print(f"  {k:30s} {best[k]:9.0f}  ({', '.join(f'{m:.0f}' for m in v)})")
for k in names.values():
    rel = ", ".join(f"{best[p] / best[k]:.2f}x vs {p}" for p in best if p != k)
    print(f"  {k}: {rel}")
PY
