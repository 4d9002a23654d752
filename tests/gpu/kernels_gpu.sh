#!/bin/sh
# tests/gpu/kernels_gpu.sh — on a GPU machine: every CUDA kernel family (the cases of
# tests/cuda/kcases.c: f32 and bf16, odd shapes, GQA, determinism) through NVRTC for the device's
# arch and the CUDA driver, against the CPU references; then each family at GPT-2 124M training
# shapes timed against its bytes floor (the measured device copy bandwidth).
# Usage: tests/gpu/kernels_gpu.sh [build-dir] [--no-perf]   (exit status non-zero on a mismatch)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
shift 2>/dev/null || true
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" cuda_kernels_gpu
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
exec "$build/tests/cuda/cuda_kernels_gpu" "$@"
