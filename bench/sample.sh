#!/usr/bin/env bash
# Time per sampled token (--sample) of the tiny GPT at GPT-2's vocabulary (50304: the logits are
# micro_batch x seq x 50304 per rank) under dp 2, tp 2 (vocab-parallel logits) and pp 2 (2
# micro-batches), each trainer built by each SHARDC given (its own runtime: an older tree's build
# for a before / after): the run with --sample N less the same run with --sample 0, over N tokens,
# best of ROUNDS; each layout's tokens must be the same under every SHARDC.
#   bench/sample.sh [N] [ROUNDS] SHARDC...     (default: 16 2 build/shardc)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-16} rounds=${2:-2}
shift 2 || true
[ $# -gt 0 ] || set -- build/shardc
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# a token shard (llm.c's format: 256 int32 of header, uint16 tokens): the vocabulary is not bytes
python3 - "$t/tok.bin" <<'PY'
import random, struct, sys
random.seed(1); n = 200000
toks = [random.randrange(50257) if random.random() < 0.3 else (i * 7) % 1000 for i in range(n)]
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, n, *[0] * 253) + struct.pack("<%dH" % n, *toks))
PY
run=(--data "$t/tok.bin" --steps 0 --val-batches 1)
k=0
for sc in "$@"; do
  k=$((k + 1))
  for l in dp=2 tp=2 pp=2; do
    "$sc" build models/tiny.model -D vocab=50304 -D batch=16 -D "$l" -o "$t/$k.$l" >/dev/null 2>&1
    best=
    for _ in $(seq "$rounds"); do
      s0=$(date +%s.%N); mpirun -np 2 "$t/$k.$l" "${run[@]}" --sample 0 >/dev/null
      s1=$(date +%s.%N); mpirun -np 2 "$t/$k.$l" "${run[@]}" --sample "$n" --temperature 0 >"$t/$k.$l.out"
      s2=$(date +%s.%N)
      ms=$(echo "($s2 - $s1 - ($s1 - $s0)) * 1000 / $n" | bc -l)
      best=$(awk -v a="${best:-1e9}" -v b="$ms" 'BEGIN { print (a < b ? a : b) }')
    done
    tail -1 "$t/$k.$l.out" >"$t/$k.$l.tok"
    cmp -s "$t/$k.$l.tok" "$t/1.$l.tok" || { echo "FAIL: $sc $l sampled other tokens than $1's"; exit 1; }
    printf "%-40s %-5s %8.1f ms/token\n" "$sc" "$l" "$best"
  done
done
