#!/usr/bin/env bash
# tests/gpu/pack.sh — on the build machine (which has the toolchain but no GPU): builds what
# tests/gpu/run_gpu.sh runs on a GPU machine and packs it, with its libraries, into .gpu/ (ignored
# by git; carry it to the GPU machine with the tree):
#   test_cudart, cuda_kernels_gpu (from the build), tiny (CPU and CUDA), GPT-2 124M (B 16, T 1024)
#   and the Llama-shaped 509M trainers, and llm.c's train_gpt2cu when LLMC=path/to/train_gpt2cu is set.
# Usage: tests/gpu/pack.sh [build-dir=build]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
cmake --build "$build" --target shardc test_cudart cuda_kernels_gpu >/dev/null
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
s="$build/shardc"
"$s" build models/tiny.model --world 1 -o "$t/tiny_cpu" >/dev/null
"$s" build models/tiny.model --world 1 --target cuda -o "$t/tiny_cuda" >/dev/null
"$s" build models/gpt2-124m.model --world 1 --target cuda -D micro_batch=16 -D batch=16 -D seq=1024 -D zero=0 \
  -o "$t/gpt2_cuda" >/dev/null
"$s" build models/llama3-8b.model --world 1 --target cuda -D vocab=32000 -D layers=8 -D d=2048 -D heads=16 \
  -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0 -D recompute=none -D tp=1 -D sp=off \
  -o "$t/llama509_cuda" >/dev/null
rm -rf .gpu
mkdir -p .gpu/bin
# binaries that need no library beside CUDA's and glibc's are copied here: gpu-pack.sh stops at one
cp "$build/tests/cuda/cuda_kernels_gpu" .gpu/bin/
if [ -n "${LLMC:-}" ]; then cp "$LLMC" .gpu/bin/train_gpt2cu; fi
bash ../shared/tools/gpu-pack.sh "$build/tests/cudart/test_cudart" "$t/tiny_cpu" "$t/tiny_cuda" "$t/gpt2_cuda" \
  "$t/llama509_cuda"
