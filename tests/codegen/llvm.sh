#!/usr/bin/env bash
# The CPU trainer with LLVM-built kernels (--cpu-kernels llvm) against the one with the hand-written
# C kernels (label mpi):
#
#   llvm.sh SHARDC
#
# Over 20 AdamW steps, every step's loss of the LLVM build is within 1e-5 relative of the C-kernel
# build's, on 1 rank for the tiny GPT, a GPT-2-shaped model (gpt2-124m.model at d 64, 2 layers) and a
# Llama-shaped one (RMSNorm, SwiGLU, RoPE, GQA), and under mpirun: the tiny GPT at dp 2 x tp 2 and the
# Llama at tp 2 + sp, against the C-kernel single rank. Each LLVM trainer must contain LLVM kernels
# (their symbols are in the binary).
#
# Tolerance (lib.sh's compare): the LLVM kernels compute e^x, tanh and sigmoid by the runtime's
# polynomial where some C kernels call libm, and contract multiply-adds differently: a few f32 ulps
# per element (tests/codegen/test_llvm_kernels.c: <= 1e-6 relative), which 20 steps at lr 1e-3 keep
# far below 1e-5 on the loss; a wrong kernel (an op, a broadcast, an AdamW term) moves it by > 1e-3.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh

ref() { # ref NAME SHARDC-ARGS...: the C-kernel trainer on 1 rank, its losses in $t/NAME_c.jsonl
  local name=$1
  shift
  "$shardc" build "$@" --world 1 --cpu-kernels c -o "$t/${name}_c" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
  "$t/${name}_c" "${run[@]}" --threads 2 --log "$t/${name}_c.jsonl" >/dev/null
}

llvm() { # llvm NAME REF NP SHARDC-ARGS...: the LLVM-kernel trainer on NP ranks against ref REF's losses
  local name=$1 reference=$2 np=$3 k
  shift 3
  "$shardc" build "$@" --world "$np" --cpu-kernels llvm -o "$t/${name}_llvm" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
  k=$(nm "$t/${name}_llvm" | grep -c ' T shardc_llk' || true)
  [ "$k" -gt 0 ] || { echo "FAIL: $name: no LLVM kernel in the trainer"; exit 1; }
  local launch=("${mpi[@]}" -np "$np") threads=1
  [ "$np" = 1 ] && launch=() threads=2
  "${launch[@]}" "$t/${name}_llvm" "${run[@]}" --threads "$threads" --log "$t/${name}_llvm.jsonl" >/dev/null
  compare "$name ($k llvm kernels)" "$t/${name}_llvm.jsonl" "$t/${reference}_c.jsonl"
}

# the flag is applied or refused: an unknown provider, and LLVM kernels for the CUDA target, are errors
refused() { # refused MESSAGE SHARDC-ARGS...
  local want=$1
  shift
  if "$shardc" build models/tiny.model "$@" -o "$t/refused" >"$t/refused.out" 2>&1; then echo "FAIL: $* was accepted"; exit 1; fi
  grep -q -- "$want" "$t/refused.out" || { cat "$t/refused.out"; echo "FAIL: $*: no '$want'"; exit 1; }
}
refused "expected c or llvm" --cpu-kernels fast
refused "--cpu-kernels llvm: the CPU target's kernels" --cpu-kernels llvm --target cuda

tiny=(models/tiny.model -D seq=32 -D micro_batch=8 -D dp=1 -D tp=1)
gpt2=(models/gpt2-124m.model -D vocab_size=256 -D seq=32 -D d=64 -D heads=4 -D layers=2 -D batch=8 -D micro_batch=8
      -D zero=0)
llama=(models/llama3-8b.model -D vocab=256 -D seq=32 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96
       -D batch=4 -D micro_batch=4 -D zero=0 -D precision=f32 -D dp=1 -D tp=1)
ref tiny "${tiny[@]}"
llvm tiny tiny 1 "${tiny[@]}"
llvm tiny_dp2tp2 tiny 4 "${tiny[@]}" -D micro_batch=4 -D dp=2 -D tp=2
ref gpt2 "${gpt2[@]}"
llvm gpt2 gpt2 1 "${gpt2[@]}"
ref llama "${llama[@]}"
llvm llama llama 1 "${llama[@]}"
llvm llama_tp2sp llama 2 "${llama[@]}" -D tp=2 -D sp=true
echo "llvm: ok"
