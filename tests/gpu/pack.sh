#!/usr/bin/env bash
# tests/gpu/pack.sh — on the build machine (which has the toolchain but no GPU): builds what
# tests/gpu/run_gpu.sh runs on a GPU machine and packs it, with its libraries, into .gpu/ (ignored
# by git; carry it to the GPU machine with the tree):
#   test_cudart, cuda_kernels_gpu (from the build), tiny (CPU and CUDA), GPT-2 124M (B 16, T 1024)
#   and the Llama-shaped 509M trainers (Llama also with `--no-fuse residual,swiglu,normres`: llama509_cuda_nofuse,
#   the three fusions' effect side by side, bench/gpu_compare.sh llamanofuse; and with `--no-fuse hfuse`:
#   llama509_cuda_nohfuse, the sibling GEMMs' batched launches, llamanohfuse), GPT-2 124M with `zero 1 offload` (tests/gpu/run_offload.sh; with
#   BASE_SHARDC=path/to/an/older/shardc also that shardc's build of it, gpt2_off_base: e.g. the
#   synchronous copies before the overlap), and llm.c's train_gpt2cu when LLMC=path/to/train_gpt2cu is set;
#   then their kernels compiled for sm_90a by NVRTC here (`--compile-kernels`, cuda_kernels_gpu --compile: about
#   5 minutes on 2 cores; CUBINS=0 skips it), so the GPU machine's runs take them from the cache.
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
# the same two with the weights' bf16 copies cast per layer (docs/performance.md, "The weights' bf16 copies
# kept across steps"): the default builds above keep persistent copies written by the update
"$s" build models/gpt2-124m.model --world 1 --target cuda -D micro_batch=16 -D batch=16 -D seq=1024 -D zero=0 \
  -D weight_copy=per_layer -o "$t/gpt2_cuda_perlayer" >/dev/null
"$s" build models/llama3-8b.model --world 1 --target cuda -D vocab=32000 -D layers=8 -D d=2048 -D heads=16 \
  -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0 -D recompute=none -D tp=1 -D sp=off \
  -D weight_copy=per_layer -o "$t/llama509_cuda_perlayer" >/dev/null
"$s" build models/llama3-8b.model --world 1 --target cuda -D vocab=32000 -D layers=8 -D d=2048 -D heads=16 \
  -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0 -D recompute=none -D tp=1 -D sp=off \
  --no-fuse residual,swiglu,normres -o "$t/llama509_cuda_nofuse" >/dev/null
"$s" build models/llama3-8b.model --world 1 --target cuda -D vocab=32000 -D layers=8 -D d=2048 -D heads=16 \
  -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0 -D recompute=none -D tp=1 -D sp=off \
  --no-fuse hfuse -o "$t/llama509_cuda_nohfuse" >/dev/null
off=(models/gpt2-124m.model --world 1 --target cuda -D micro_batch=16 -D batch=16 -D seq=1024 -D zero=1 -D offload=on)
"$s" build "${off[@]}" -o "$t/gpt2_off" >/dev/null
extra=()
if [ -n "${BASE_SHARDC:-}" ]; then
  (cd "$(dirname "$(dirname "$(realpath "$BASE_SHARDC")")")" && "$(realpath "$BASE_SHARDC")" build "${off[@]}" -o "$t/gpt2_off_base" >/dev/null)
  extra=("$t/gpt2_off_base")
fi
# Packs the binaries into .gpu/bin, every shared library they need that is neither CUDA's (the GPU
# machine has the toolkit) nor glibc's / the compiler's into .gpu/lib (OpenBLAS, OpenMPI, libfabric:
# about 50 MiB), and writes .gpu/env.sh. (Done here rather than by ../shared/tools/gpu-pack.sh, which
# stops at a binary needing none of those libraries and fails in a git worktree, where .git is a file.)
rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib
bins=("$build/tests/cudart/test_cudart" "$build/tests/cuda/cuda_kernels_gpu" "$t/tiny_cpu" "$t/tiny_cuda" "$t/gpt2_cuda"
      "$t/llama509_cuda" "$t/gpt2_cuda_perlayer" "$t/llama509_cuda_perlayer" "$t/llama509_cuda_nofuse" "$t/llama509_cuda_nohfuse"
      "$t/gpt2_off"
      "${extra[@]}")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "pack.sh: $b is not an executable" >&2; exit 1; }
  missing=$(ldd "$b" | awk '/not found/ && $1 !~ /^libcuda\.so/ {print $1}') # (the driver's: on the GPU machine)
  [ -z "$missing" ] || { echo "pack.sh: $b needs $missing, not found here" >&2; exit 1; }
  cp "$b" .gpu/bin/
  ldd "$b" | awk '$3 ~ /^\// {print $3}' | { grep -vE '/usr/local/cuda|/lib(c|m|dl|rt|pthread|stdc\+\+|gcc_s|z)\.so' || true; } |
    while read -r l; do cp -Lu "$l" .gpu/lib/; done
done
if [ -n "${LLMC:-}" ]; then cp "$LLMC" .gpu/bin/train_gpt2cu; fi
# The kernels compiled here for sm_90a (H100, H200), NVRTC's cache files (runtime/cuda/device.c: keyed by
# source, headers, options and NVRTC's version): env.sh copies them into the GPU machine's cache, where a
# run then compiles nothing if that machine's NVRTC is this one's version (else it compiles as before).
# Each trainer with the attention's tile candidates (a GPU run's default), GPT-2 also without them
# (session.sh's tune part), and cuda_kernels_gpu's case program (its 64 parts: 3-4 minutes here).
precompile() { # precompile LABEL CMD...: one program's kernels into .gpu/cubin; a failure leaves it to the GPU
  local label=$1
  shift
  if SHARDRT_CUBIN_CACHE=$cache "$@" >"$t/cc.out" 2>"$t/cc.err"; then
    grep -E "^(kernels:|[0-9]+ kernels for)" "$t/cc.out" | sed "s|^|$label: |"
  else
    echo "pack.sh: $label: kernels not precompiled (the GPU machine compiles them):" >&2
    tail -5 "$t/cc.err" >&2
  fi
}
if [ "${CUBINS:-1}" != 0 ]; then
  mkdir -p .gpu/cubin
  cache=$(cd .gpu/cubin && pwd)
  for b in tiny_cuda gpt2_cuda llama509_cuda gpt2_cuda_perlayer llama509_cuda_perlayer llama509_cuda_nofuse \
    llama509_cuda_nohfuse gpt2_off; do
    precompile "$b" "$t/$b" --compile-kernels sm_90a
  done
  precompile "gpt2_cuda (no candidates)" env SHARDRT_ATTN_AUTOTUNE=0 "$t/gpt2_cuda" --compile-kernels sm_90a
  stub=$(mktemp -d) # the case program's binary links the driver: its stub, on a machine without one
  for l in /usr/local/cuda/lib64/stubs/libcuda.so /usr/local/cuda/targets/*/lib/stubs/libcuda.so; do
    [ -e "$l" ] && { ln -sf "$l" "$stub/libcuda.so.1"; break; }
  done
  precompile cuda_kernels_gpu env LD_LIBRARY_PATH="$stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$build/tests/cuda/cuda_kernels_gpu" --compile sm_90a
  rm -rf "$stub"
fi
# bin/ and lib/ travel as one xz archive (OpenBLAS alone is 35 MiB unpacked: the whole was 62 MiB against
# the device tool's 64 MiB for what it carries), unpacked by env.sh on the GPU machine
unpacked=$(du -sh .gpu | cut -f1)
tar -C .gpu -cf - bin lib $(test -d .gpu/cubin && echo cubin) | xz -T2 -6 >.gpu/gpu.tar.xz
rm -rf .gpu/bin .gpu/lib .gpu/cubin
cat > .gpu/env.sh <<'ENV'
# sourced on the GPU machine: unpacks gpu.tar.xz beside itself once (tar and xz, or python3), then puts
# the carried libraries first, then CUDA's own
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ ! -d "$here/bin" ]; then
  if command -v xz >/dev/null; then tar -C "$here" -xJf "$here/gpu.tar.xz"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$here/gpu.tar.xz" "$here"; fi
fi
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SHARDRT_CUBIN_CACHE=${SHARDRT_CUBIN_CACHE:-/tmp/cubin}
# the kernels compiled on the build machine (tests/gpu/pack.sh), into the cache once
if [ -d "$here/cubin" ] && mkdir -p "$SHARDRT_CUBIN_CACHE"; then cp -n "$here"/cubin/* "$SHARDRT_CUBIN_CACHE"/ 2>/dev/null; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ENV
echo "pack.sh: ${#bins[@]} binaries and their libraries in .gpu/gpu.tar.xz ($(du -sh .gpu | cut -f1), $unpacked unpacked);" \
  "take it along with the tree and run there: source .gpu/env.sh && tests/gpu/run_gpu.sh"
