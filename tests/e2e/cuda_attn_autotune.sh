#!/usr/bin/env bash
# The attention tile autotuning in a trainer (labels cuda, mpi, e2e; runtime/cuda/attn_tune.c): the tiny GPT
# in bf16 (tensor-core attention at head dim 16: each of its forward, dK/dV and dQ kernels in the distinct
# tiles of codegen/cuda_flash_cfg.c's list, 9, 10 and 9 candidates, read from the generated launches) on the
# emulated device, micro-batch 1, with a kernel cache of
# its own (the record of the choices lives there):
#   - tuned: SHARDRT_ATTN_AUTOTUNE=1, 4 steps, a checkpoint at 2: each of the 3 kernels timed at its
#     first call (a line each, "the fastest", and the summary after step 1), the record holds 3 lines;
#   - resumed: from tuned's step 2 with the record: the 3 kernels take the recorded tiles (nothing
#     timed), so steps 3 and 4 and the final checkpoint are byte-identical to tuned's;
#   - plain: the record edited to name each kernel's compiled default: honoured ("candidate 0 of N");
#     tuned's losses agree with it within 1e-4 relative (other tiles sum in another order; measured:
#     identical, as at S 16 every candidate streams a single key tile);
#   - forced: the record edited to name each kernel's last candidate: honoured ("candidate N-1 of N",
#     as recorded; dK/dV's: K and V in dynamic shared memory), the losses within 1e-4 relative of plain's;
#   - wrong: a forward candidate made wrong (test hook SHARDRT_EMU_WRONG_ATTN=1x8x64: tiles 1x8x64
#     compiled with twice the scale), a fresh record: the check (runtime/cuda/tune_check.c) refuses it
#     with a warning naming the kernel, the candidate and the error, it is never timed nor kept (3 timed
#     runs fewer), the record has its "refused" line, the losses are plain's within 1e-4; tuned
#     again with only that line left: skipped without a run ("1 skipped"), no warning;
#   - S 64 (the candidates' key tiles stream differently, so they sum in other orders): every checked
#     candidate agrees (no false refusal; measured within 0.24 of their tolerance), the backward's pair key
#     "flash_bwd" with the one-kernel form's candidates ("wgf...") and the wgmma two-kernel pairs ("wgq...+kv...")
#     among them; the record edited to name wgf64x2, then wgq64x2+kv64x1: the trainer runs the one-kernel
#     backward, then that pair, each loss within 1e-4 of the tuned run's;
# (the emulated device's default, autotuning off, is cudart_attn's);
#   - SHARDRT_ATTN_AUTOTUNE=yes is refused;
#   - two ranks (dp 2, mpirun): a record line per kernel and rank, taken by a second run (same loss).
#
#   cuda_attn_autotune.sh SHARDC
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
export SHARDRT_CUBIN_CACHE="$t/cache" SHARDRT_DEVICE=emu
corpus 30000
"$shardc" build models/tiny.model -D seq=16 -D micro_batch=1 -D dp=1 -D precision=bf16 --world 1 --target cuda \
  -o "$t/tb" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
run() { # name, SHARDRT_ATTN_AUTOTUNE, extra flags
  local name=$1 tune=$2
  shift 2
  SHARDRT_ATTN_AUTOTUNE="$tune" "$t/tb" --data "$t/data.txt" --steps 4 --eval-every 0 --val-batches 1 \
    --log "$t/$name.jsonl" --save-to "$t/ck_$name" "$@" >"$t/$name.out" 2>&1 || { cat "$t/$name.out"; fail "$name"; }
}
close() { # a b what: the losses within 1e-4 relative
  paste -d' ' <(losses "$t/$1.jsonl") <(losses "$t/$2.jsonl") | awk -v w="$3" '{ d = $1 - $2; if (d < 0) d = -d;
    if (d > 1e-4 * ($1 < 0 ? -$1 : $1)) { print "FAIL: " w ": loss " $2 " against " $1; bad = 1 } } END { exit bad }'
}
# the generated launches: each tuned kernel's key and candidates
"$shardc" plan models/tiny.model -D seq=16 -D micro_batch=1 -D dp=1 -D precision=bf16 --world 1 --target cuda \
  --emit-c "$t/src" >/dev/null 2>&1
launches() { grep -ho 'rt_cu_launch_tuned(ctx, "[^"]*", [0-9]*, (const RtCuTileCand\[\]){[^;]*' "$t"/${1:-src}/*.c; }
count() { launches "$@" | sed -E 's/^rt_cu_launch_tuned\(ctx, "([^"]*)", ([0-9]*),.*$/\1 \2/' | sort -u |
  awk '{ n++; s += $NF } END { if (n == 3) print s }'; }
ncand=$(count)
[ -n "$ncand" ] || { launches; echo "FAIL: the generated launches do not name 3 tuned kernels"; exit 1; }
run tuned 1 --ckpt-every 2
[ "$(losses "$t/tuned.jsonl" | wc -l)" = 4 ] || { echo "FAIL: $(losses "$t/tuned.jsonl" | wc -l) steps logged, want 4"; exit 1; }
[ "$(grep -c '^attn autotune: flash_.*, the fastest$' "$t/tuned.out")" = 3 ] || { cat "$t/tuned.out"; echo "FAIL: tuned: not 3 kernels timed"; exit 1; }
grep -q "^attn autotune: 3 attention kernels tuned in .* s ($((3 * ncand)) timed runs)" "$t/tuned.out" ||
  { cat "$t/tuned.out"; echo "FAIL: tuned: no summary of 3 kernels x their $ncand candidates x 3 runs"; exit 1; }
rec=$(ls "$t"/cache/attn-tune-*.txt)
[ "$(wc -l <"$rec")" = 3 ] || { cat "$rec"; fail "the record does not hold 3 choices"; }
run resumed 1 --resume "$t/ck_tuned/step_00000002"
[ "$(grep -c '^attn autotune: flash_.*, as recorded by an earlier run$' "$t/resumed.out")" = 3 ] &&
  ! grep -q "the fastest" "$t/resumed.out" || { cat "$t/resumed.out"; fail "resumed: the recorded tiles not taken"; }
[ "$(losses "$t/tuned.jsonl" | tail -2)" = "$(losses "$t/resumed.jsonl")" ] || {
  paste <(losses "$t/tuned.jsonl" | tail -2) <(losses "$t/resumed.jsonl"); fail "resumed: losses differ from tuned's"; }
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$t/ck_tuned/step_00000004/$f" "$t/ck_resumed/step_00000004/$f" || fail "resumed: $f differs"
done
# the record edited to every kernel's first candidate (the compiled default), then to its last (the
# generated launches list them)
launches | sed -E 's/^rt_cu_launch_tuned\(ctx, "([^"]*)"[^"]*"([^"]*)".*$/\1\t\2/' | sort -u >"$rec"
[ "$(wc -l <"$rec")" = 3 ] || { cat "$rec"; fail "the generated launches do not name 3 kernels"; }
run plain 1
[ "$(grep -c '^attn autotune: flash_.*(candidate 0 of [0-9]*, .*as recorded by an earlier run$' "$t/plain.out")" = 3 ] ||
  { cat "$rec" "$t/plain.out"; echo "FAIL: plain: the recorded default tiles not honoured"; exit 1; }
close plain tuned "tuned against the compiled default"
launches | sed -E 's/^rt_cu_launch_tuned\(ctx, "([^"]*)".*"([^"]*)", [0-9]*\}\}.*$/\1\t\2/' | sort -u >"$rec"
run forced 1
[ "$(grep '^attn autotune: flash_.*as recorded by an earlier run$' "$t/forced.out" |
  sed -E 's/.*\(candidate ([0-9]*) of ([0-9]*),.*/\1 \2/' | awk '$1 == $2 - 1' | wc -l)" = 3 ] ||
  { cat "$rec" "$t/forced.out"; echo "FAIL: forced: the recorded tiles not honoured"; exit 1; }
close plain forced "the last candidates against the compiled default"
mkdir -p "$t/wcache"
SHARDRT_CUBIN_CACHE="$t/wcache" SHARDRT_EMU_WRONG_ATTN=1x8x64 run wrong 1
wk="flash_fwd S 16 H 4 KV 4 hd 16 causal B 1"
grep -q "^warning: attn autotune: $wk: candidate [1-9] (tiles 1x8x64/0) refused, not what the compiled default ([0-9x/]*) computes: output 0: |diff| " "$t/wrong.out" &&
  grep -q "^attn autotune: 3 attention kernels tuned in .* s ($((3 * ncand - 3)) timed runs), .* $((ncand - 3)) candidates checked against the compiled default in .* s (a run and a compare each), 1 refused, 0 skipped" "$t/wrong.out" &&
  ! grep -q "tiles 1x8x64/0 (candidate" "$t/wrong.out" || { cat "$t/wrong.out"; echo "FAIL: wrong: the wrong candidate was not refused"; exit 1; }
wrec=$(ls "$t"/wcache/attn-tune-*.txt)
grep -q "^$wk refused 1x8x64/0	output 0: |diff| " "$wrec" || { cat "$wrec"; echo "FAIL: wrong: no refused line in the record"; exit 1; }
close plain wrong "with the wrong candidate refused against the compiled default"
grep " refused " "$wrec" >"$t/refused.txt" && cp "$t/refused.txt" "$wrec"
SHARDRT_CUBIN_CACHE="$t/wcache" SHARDRT_EMU_WRONG_ATTN=1x8x64 run wrong2 1
grep -q "candidates checked against the compiled default in .* s (a run and a compare each), 0 refused, 1 skipped as refused by an earlier run" "$t/wrong2.out" &&
  ! grep -q "^warning: attn autotune" "$t/wrong2.out" || { cat "$t/wrong2.out"; echo "FAIL: wrong2: the recorded refusal was not honoured"; exit 1; }
# no false refusal where the candidates sum in other orders: tiny at S 64 and d 256 (head dim 64: key tiles
# of 16 to 128 rows stream differently; at S 16 every candidate computes the same bits; and the wgmma forward,
# dK/dV and dQ candidates, which the emulated device runs): all agree
"$shardc" build models/tiny.model -D seq=64 -D d=256 -D micro_batch=1 -D dp=1 -D precision=bf16 --world 1 --target cuda \
  -o "$t/t64" >"$t/build64.out" 2>&1 || { cat "$t/build64.out"; exit 1; }
mkdir -p "$t/c64"
SHARDRT_CUBIN_CACHE="$t/c64" SHARDRT_ATTN_AUTOTUNE=1 "$t/t64" --data "$t/data.txt" --steps 1 --eval-every 0 --val-batches 1 \
  --log "$t/s64.jsonl" >"$t/s64.out" 2>&1 || { cat "$t/s64.out"; echo "FAIL: S 64"; exit 1; }
"$shardc" plan models/tiny.model -D seq=64 -D d=256 -D micro_batch=1 -D dp=1 -D precision=bf16 --world 1 --target cuda \
  --emit-c "$t/src64" >/dev/null 2>&1
n64=$(count src64)
[ -n "$n64" ] || { launches src64; fail "S 64: the generated launches do not name 3 tuned kernels"; }
for kn in flash_fwd flash_bwd_q flash_bwd_kv; do # each with its wgmma candidates (codegen/cuda_wgmma_cfg.c)
  launches src64 | grep "\"$kn S 64 " | grep -q '"wg[0-9]*x[0-9]p*", [0-9]*}' || { launches src64; fail "S 64: $kn has no wgmma candidate"; }
done
# ... and the forward its warp-specialized ones (shardk_wgmma_ws.cuh: tiles ws<bk>x<consumers>x<stages>, 384 threads)
launches src64 | grep '"flash_fwd S 64 ' | grep -q ', 384, "ws[0-9]*x2x[0-9]", [0-9]*}' ||
  { launches src64; fail "S 64: flash_fwd has no warp-specialized candidate"; }
# the backward's pair key (codegen/cuda_kernels_attn.c): the two kernels' defaults ("two") and the one-kernel form
# in each of its tiles ("wgf<bt>x<nwg>", shardk_wgmma_bwd1.cuh), checked like the others; the two kernels' own
# keys are tuned only where it keeps "two" (else they never run)
grep -ho 'rt_cu_launch_tuned_or(ctx, "flash_bwd S 64 [^;]*' "$t"/src64/*.c | grep '"two", [0-9]*}' | grep -q '"wgf64x2", [0-9]*}' ||
  { grep -h flash_bwd "$t"/src64/*.c; fail "S 64: no pair key with the one-kernel backward's candidates"; }
# ... and the two kernels on wgmma, the i-th dQ tile with the i-th dK/dV tile ("wgq<bt>x<nwg>+kv<bt>x<nwg>"), so
# that the one-kernel form is timed against the fastest two-kernel pair, not only the mma.sync defaults
npair=$(grep -ho 'rt_cu_launch_tuned_or(ctx, "flash_bwd S 64 [^;]*' "$t"/src64/*.c | head -1 | grep -o '"wgq[0-9]*x[0-9]p*+kv[0-9]*x[0-9]p*", [0-9]*}' | wc -l)
[ "$npair" -eq 10 ] || { grep -h flash_bwd "$t"/src64/*.c; fail "S 64: $npair wgmma pairs' names in the pair key (want 5 in the candidates and 5 in the first launches)"; }
tl=$(grep '^attn autotune: flash_[a-z_]* S 64 .*, the fastest$' "$t/s64.out")
want="flash_bwd flash_fwd "
grep -q '^attn autotune: flash_bwd S 64 .*(candidate 0 of' <<<"$tl" && want="flash_bwd flash_bwd_kv flash_bwd_q flash_fwd "
[ "$(sed -E 's/^attn autotune: (flash_[a-z_]*) .*/\1/' <<<"$tl" | sort | tr '\n' ' ')" = "$want" ] ||
  { cat "$t/s64.out"; fail "S 64: the keys tuned are not $want"; }
nk64=$(wc -l <<<"$tl")
nc64=$(sed -E 's/.*\(candidate [0-9]* of ([0-9]*),.*/\1/' <<<"$tl" | awk '{ s += $1 } END { print s }')
grep -q "^attn autotune: $nk64 attention kernels tuned in .* ($((3 * nc64)) timed runs), .* $((nc64 - nk64)) candidates checked against the compiled default in .* 0 refused" "$t/s64.out" ||
  { cat "$t/s64.out"; echo "FAIL: S 64: a correct candidate refused (or not all checked)"; exit 1; }
# the pair key's record edited to name other tiles, taken (the two kernels' keys then never run), the loss that
# of the run above within 1e-4 relative: the one-kernel backward, then a wgmma pair (dQ, then dK/dV)
rec64=$(ls "$t"/c64/attn-tune-*.txt)
recorded() { # LOG TILES CANDIDATE WHAT
  sed -i -E "s/^(flash_bwd S 64 [^\t]*)\t.*$/\1\t$2/" "$rec64"
  SHARDRT_CUBIN_CACHE="$t/c64" SHARDRT_ATTN_AUTOTUNE=1 "$t/t64" --data "$t/data.txt" --steps 1 --eval-every 0 \
    --val-batches 1 --log "$t/$1.jsonl" >"$t/$1.out" 2>&1 || { cat "$t/$1.out"; fail "S 64 with $2"; }
  grep -q "^attn autotune: flash_bwd S 64 .*: tiles $2 (candidate $3 of 8, default two), as recorded by an earlier run$" \
    "$t/$1.out" && ! grep -q '^attn autotune: flash_bwd_[qk]' "$t/$1.out" ||
    { cat "$rec64" "$t/$1.out"; fail "S 64: the recorded $2 not taken"; }
  close s64 "$1" "$4 against the pair key's own choice"
}
recorded f64 wgf64x2 6 "the one-kernel backward"
recorded p64 'wgq64x2+kv64x1' 2 "the wgmma pair"
if SHARDRT_EMU_WRONG_ATTN=8 "$t/tb" --data "$t/data.txt" --steps 1 --eval-every 0 >"$t/bad.out" 2>&1 ||
  ! grep -q "SHARDRT_EMU_WRONG_ATTN=8: want the tiles" "$t/bad.out"; then
  cat "$t/bad.out"; echo "FAIL: SHARDRT_EMU_WRONG_ATTN=8 was not refused"; exit 1
fi
if SHARDRT_ATTN_AUTOTUNE=yes "$t/tb" --data "$t/data.txt" --steps 1 --eval-every 0 >"$t/bad.out" 2>&1 ||
  ! grep -q "SHARDRT_ATTN_AUTOTUNE=yes: want 1" "$t/bad.out"; then
  cat "$t/bad.out"; fail "SHARDRT_ATTN_AUTOTUNE=yes was not refused"
fi
# two ranks (dp 2 under mpirun): a record line per key and rank; a second run takes them
"$shardc" build models/tiny.model -D seq=16 -D micro_batch=1 -D dp=2 -D precision=bf16 --world 2 --target cuda \
  -o "$t/tb2r" >"$t/build2.out" 2>&1 || { cat "$t/build2.out"; exit 1; }
for r in 1 2; do
  SHARDRT_ATTN_AUTOTUNE=1 "${mpi[@]}" -np 2 "$t/tb2r" --data "$t/data.txt" --steps 1 --eval-every 0 --val-batches 1 \
    --log "$t/mr$r.jsonl" >"$t/mr$r.out" 2>&1 || { cat "$t/mr$r.out"; fail "2 ranks, run $r"; }
done
for k in 0 1; do
  [ "$(grep -c "B 1 rank $k	" "$rec")" = 3 ] || { cat "$rec"; fail "2 ranks: rank $k has not 3 record lines"; }
done
[ "$(grep -c '^attn autotune: flash_.*, the fastest$' "$t/mr1.out")" = 3 ] &&
  [ "$(grep -c '^attn autotune: flash_.*, as recorded by an earlier run$' "$t/mr2.out")" = 3 ] ||
  { cat "$t/mr1.out" "$t/mr2.out"; fail "2 ranks: rank 0 did not tune, then take its record"; }
[ "$(losses "$t/mr1.jsonl")" = "$(losses "$t/mr2.jsonl")" ] || fail "2 ranks: the recorded run's loss differs"
grep "^attn autotune" "$t/tuned.out" "$t/forced.out"
grep "^warning: attn autotune" "$t/wrong.out"
grep "^attn autotune: [0-9]" "$t/s64.out"
paste <(losses "$t/plain.jsonl") <(losses "$t/tuned.jsonl") <(losses "$t/forced.jsonl")
echo "cuda attention autotuning (emulated device, tiny bf16): 3 kernels x their tile candidates ($ncand) timed, recorded, honoured on resume (byte-identical) and when edited; losses within 1e-4 of the compiled default's"
