#!/usr/bin/env bash
# The CUDA target's C of a frontier-scale plan is emitted without an internal compiler error (label codegen):
# Llama-3-405B on dgx-h100-x256 under ZeRO-2 transposes a stacked gradient of 2,097,152 rows, 65,536 tiles of 32,
# one more than CUDA's grid y allows; the transposes now loop over their row tiles (codegen/cuda_kernels.c, the
# kernels in runtime/cuda/kernels; tests/cuda/kcases.c runs that loop at small sizes). Before: `cuda_kernels:
# transpose of 2097152 rows` and exit 134.
# usage: emit_large.sh SHARDC
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
out=$("$shardc" plan models/llama3-405b.model --topology models/topo/dgx-h100-x256.topo --target cuda -D zero=2 \
  --emit-c "$t/c" 2>&1 >/dev/null) || fail "405B zero 2: --emit-c failed: $(grep -m2 -i 'error' <<<"$out")"
c=$(ls "$t"/c/*.c)
grep -q "sk::transpose" "$c" || fail "405B zero 2: no transpose in the emitted C (the case this test is for)"
echo "Llama-3-405B zero 2 on dgx-h100-x256: $(wc -c <"$c") bytes of C emitted"
