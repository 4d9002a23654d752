#!/usr/bin/env bash
# A user error under mpirun is printed once (runtime/train/util.c rt_user_error / rt_rank_error;
# label mpi): at 4 ranks a bad flag, a bad value and a missing corpus, which every rank reaches
# with the same text, print their "error: ..." line once (rank 0's) and the job exits non-zero
# promptly (the other ranks wait for mpirun to end them, not 4 copies); an error only one rank
# reaches (rank 1's own file of a sharded checkpoint, truncated, at tp=2) is printed by that rank
# at once, naming it; and one every rank should reach but rank 1 alone does is printed by it after its wait.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
corpus 20000
m=(models/tiny.model -D seq=32 -D micro_batch=4)
"$shardc" build "${m[@]}" -D dp=4 -D tp=1 --world 4 -o "$t/dp4" >/dev/null
"$shardc" build "${m[@]}" -D dp=1 -D tp=2 --world 2 -o "$t/tp2" >/dev/null
run=(--data "$t/data.txt" --steps 2 --eval-every 0 --val-batches 1 --threads 1)
# once NAME NEEDLE NP BIN ARGS...: the run fails, and its output holds exactly one "error:" line,
# which holds NEEDLE (a fixed string), within 8 s (a rank that printed nothing waits up to 10 s)
once() {
  local name=$1 needle=$2 np=$3 rc=0 t0 dt n
  shift 3
  t0=$(date +%s.%N)
  "${mpi[@]}" -np "$np" "$@" >"$t/$name.out" 2>&1 || rc=$?
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  [ "$rc" != 0 ] || { cat "$t/$name.out"; fail "$name: exited 0"; }
  n=$(grep -c "error: " "$t/$name.out" || true)
  [ "$n" = 1 ] || { cat "$t/$name.out"; fail "$name: $n 'error:' lines, want 1"; }
  grep -qF -- "$needle" "$t/$name.out" || { cat "$t/$name.out"; fail "$name: no '$needle'"; }
  [ "$(echo "$dt < 8" | bc)" = 1 ] || { cat "$t/$name.out"; fail "$name: took $dt s"; }
  printf '%-10s exit %d in %.1f s, once: %s\n' "$name" "$rc" "$dt" "$(grep "error: " "$t/$name.out")"
}
once flag "error: unknown flag '--bogus'" 4 "$t/dp4" "${run[@]}" --bogus
once value "error: --on-nonfinite" 4 "$t/dp4" "${run[@]}" --on-nonfinite maybe
once corpus "error: --data: cannot open '$t/nope.txt'" 4 "$t/dp4" "${run[@]}" --data "$t/nope.txt"
# a rank's own file: the sharded checkpoint of a tp=2 run, rank 1's file cut short
"${mpi[@]}" -np 2 "$t/tp2" "${run[@]}" --save-to "$t/ck" >/dev/null 2>&1 || fail "the tp=2 run failed"
truncate -s 2000 "$t/ck/step_00000002/rank_00001.safetensors"
once rankfile "error: rank 1: '$t/ck/step_00000002/rank_00001.safetensors' is not a safetensors file" 2 \
  "$t/tp2" "${run[@]}" --steps 3 --resume "$t/ck"
# an error that every rank is supposed to reach, but rank 1 alone does (SHARDRT_FAULT_KILL malformed in
# rank 1's environment only, an MPMD launch): rank 0 never prints it, so rank 1 does itself after its wait
# (SHARDRT_ERROR_WAIT=1 instead of 10 s), naming itself: never lost
rc=0
t0=$(date +%s.%N)
SHARDRT_ERROR_WAIT=1 "${mpi[@]}" -np 1 "$t/tp2" "${run[@]}" : -np 1 -x SHARDRT_FAULT_KILL=bad "$t/tp2" "${run[@]}" \
  >"$t/alone.out" 2>&1 || rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
[ "$rc" != 0 ] || { cat "$t/alone.out"; fail "alone: exited 0"; }
if [ "$(grep -c "error: " "$t/alone.out")" != 1 ] ||
  ! grep -qx "error: rank 1: SHARDRT_FAULT_KILL='bad': expected STEP\[:RANK\]" "$t/alone.out"; then
  cat "$t/alone.out"
  fail "alone: rank 1's error not printed once, naming it"
fi
printf '%-10s exit %d in %.1f s, once: %s\n' alone "$rc" "$dt" "$(grep "error: " "$t/alone.out")"
