#!/usr/bin/env bash
# Data-parallel gradient buckets (label mpi): each bucket is one asynchronous all-reduce, started
# where grad_buckets.c put it and waited before its first reader, progressed between kernels.
#
#   buckets.sh SHARDC
#
# - dp=2 with the default bucket (25 MiB: the whole backward loop body is one bucket per layer) and
#   with -D bucket=64KiB (several buckets per layer, some in flight across loop iterations), and
#   dp=2 x tp=2 with 64 KiB buckets, give the single-rank loss curve over 20 AdamW steps within the
#   layouts test's tolerance (|rel| <= 1e-5 at every step, justified in layouts.sh);
# - the asynchronous buckets give bit-identical losses and checkpoints to one blocking all-reduce
#   per member (SHARDRT_DP_COMM=member, the code before buckets) and to blocking buckets
#   (SHARDRT_DP_COMM=blocking), and the same run twice is bit-identical;
# - the async runs did start asynchronous collectives (SHARDRT_COLL_STATS), more with 64 KiB buckets.
set -euo pipefail
shardc=$(realpath "$1")
cd "$(dirname "$0")/../.."
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
m=(models/tiny.model -D seq=32)
same() { # same NAME A B: bit-identical losses and checkpoints of runs A and B
  [ "$(losses "$t/$2.jsonl")" = "$(losses "$t/$3.jsonl")" ] || { echo "FAIL: $1: losses differ"; exit 1; }
  same_ckpt "$t/ck_$2/step_00000020" "$t/ck_$3/step_00000020" || { echo "FAIL: $1: checkpoints differ"; exit 1; }
  echo "$1: bit-identical (losses, checkpoints)"
}
# started NAME: the asynchronous all-reduces rank 0 started (from its stats line)
started() { grep -m1 -o 'async all-reduces [0-9]*' "$t/$1.err" | awk '{ print $3 }'; }

"$shardc" build "${m[@]}" -D micro_batch=8 --world 1 -o "$t/one"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 --world 2 -o "$t/dp2"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=1 -D bucket=64KiB --world 2 -o "$t/dp2b" --emit-c "$t/src"
"$shardc" build "${m[@]}" -D micro_batch=4 -D dp=2 -D tp=2 -D bucket=64KiB --world 4 -o "$t/dp2tp2b"
# the generated code: asynchronous starts with several members, waits, progress between kernels
grep -q 'rt_coll_all_reduce_start(ctx, RT_AX_DP, [0-9]*, ys, xs, ns, [2-9]' "$t/src/tiny.c" || { echo "FAIL: no multi-member bucket"; exit 1; }
grep -q 'rt_coll_wait(ctx, ' "$t/src/tiny.c" && grep -q 'rt_coll_progress(ctx);' "$t/src/tiny.c" || { echo "FAIL: no wait/progress"; exit 1; }

"$t/one" "${run[@]}" --threads 2 --log "$t/one.jsonl" >/dev/null
go() { # go NAME BINARY NP [env...]: a run logging NAME.jsonl, checkpoint ck_NAME, stats NAME.err
  local name=$1 bin=$2 np=$3
  shift 3
  env SHARDRT_COLL_STATS=1 "$@" "${mpi[@]}" -np "$np" "$t/$bin" "${run[@]}" --log "$t/$name.jsonl" \
    --save-to "$t/ck_$name" >/dev/null 2>"$t/$name.err" || { cat "$t/$name.err"; echo "FAIL: $name"; exit 1; }
}
go dp2 dp2 2
go dp2b dp2b 2
go dp2tp2b dp2tp2b 4
compare "dp2 (25 MiB buckets)" "$t/dp2.jsonl" "$t/one.jsonl"
compare "dp2 (64 KiB buckets)" "$t/dp2b.jsonl" "$t/one.jsonl"
compare "dp2 x tp2 (64 KiB)" "$t/dp2tp2b.jsonl" "$t/one.jsonl"
a=$(started dp2) b=$(started dp2b)
echo "asynchronous all-reduces started by rank 0: $a (25 MiB buckets), $b (64 KiB)"
[ "${a:-0}" -gt 0 ] && [ "${b:-0}" -gt "${a:-0}" ] || { echo "FAIL: async starts $a / $b"; exit 1; }

go dp2b_member dp2b 2 SHARDRT_DP_COMM=member
go dp2b_blocking dp2b 2 SHARDRT_DP_COMM=blocking
go dp2b_again dp2b 2
same "dp2 64 KiB: async vs one blocking all-reduce per member" dp2b dp2b_member
same "dp2 64 KiB: async vs blocking buckets" dp2b dp2b_blocking
same "dp2 64 KiB: run to run" dp2b dp2b_again
echo "buckets: ok"
