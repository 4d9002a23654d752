#!/usr/bin/env bash
# A pipeline program's instructions written once each (codegen/outline.c).
#
#   outline.sh SHARDC size   the trainer's code does not grow with the micro-batches: tiny at pp 4
#                            (1F1B, micro-batches of 1), `plan --emit-c` at 8 and 64 micro-batches:
#                            the same outlined functions, the code outside the two tables within 1%
#                            (it is the same text but for a few numbers), and the whole file growing by
#                            at most 4 KiB per micro-batch (the tables' rows and arguments: 12 runs of
#                            statements per micro-batch, ~2.9 KiB measured; written out, --no-outline,
#                            the file grows by ~74 KiB per micro-batch). --no-outline writes what main's
#                            shardc wrote: every instruction out, no outlined function.
#   outline.sh SHARDC bits   the outlined trainer computes what the written-out one (--no-outline)
#                            does: tiny pp 4 zero bubble and pp 2 x dp 2 1F1B with ZeRO-2, 4 micro-batches
#                            of 2, 3 steps with a validation pass under mpirun: the same losses, bit for
#                            bit, and so are the checkpoints written after step 3 (parameters and
#                            optimizer state, byte for byte): the same statements run in the same
#                            order on the same bytes.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
# code NAME.c: the bytes outside the outlined runs' tables (ol_args, ol_rows)
code() { awk '/^static const (int64_t ol_args|int32_t ol_rows)/ { skip = 1 } !skip { n += length($0) + 1 } skip && /^};/ { skip = 0 } END { print n + 0 }' "$1"; }
bodies() { grep -c '^static void ol_body_' "$1" || true; }

if [ "$2" = size ]; then
  tiny=(models/tiny.model -D layers=4 -D seq=64 -D micro_batch=1 -D dp=1 -D pp=4 --world 4)
  for m in 8 64; do
    "$shardc" plan "${tiny[@]}" -D batch=$m --emit-c "$t/m$m" >/dev/null 2>&1
    "$shardc" plan "${tiny[@]}" -D batch=$m --emit-c "$t/f$m" --no-outline >/dev/null 2>&1
  done
  read -r b8 b64 c8 c64 n8 n64 f8 f64 nf < <(echo "$(wc -c <"$t/m8/tiny.c") $(wc -c <"$t/m64/tiny.c") \
    $(code "$t/m8/tiny.c") $(code "$t/m64/tiny.c") $(bodies "$t/m8/tiny.c") $(bodies "$t/m64/tiny.c") \
    $(wc -c <"$t/f8/tiny.c") $(wc -c <"$t/f64/tiny.c") $(bodies "$t/f64/tiny.c")")
  echo "tiny pp 4, 8 -> 64 micro-batches: C $b8 -> $b64 bytes, code outside the tables $c8 -> $c64, outlined functions $n8 -> $n64; --no-outline: $f8 -> $f64 bytes"
  awk -v b8="$b8" -v b64="$b64" -v c8="$c8" -v c64="$c64" -v n8="$n8" -v n64="$n64" -v f8="$f8" -v f64="$f64" -v nf="$nf" 'BEGIN {
    bad = 0
    if (n8 < 2 || n8 != n64) { print "FAIL: outlined functions " n8 " at 8 micro-batches, " n64 " at 64"; bad = 1 }
    d = c64 - c8; if (d < 0) d = -d
    if (d > 0.01 * c8) { print "FAIL: the code grows with the micro-batches: " c8 " -> " c64 " bytes"; bad = 1 }
    per = (b64 - b8) / 56
    printf "per micro-batch: %.0f bytes (--no-outline: %.0f)\n", per, (f64 - f8) / 56
    if (per > 4096) { print "FAIL: the file grows by more than 4 KiB per micro-batch"; bad = 1 }
    if (nf != 0 || f64 < 10 * b64) { print "FAIL: --no-outline did not write the instructions out"; bad = 1 }
    exit bad }'
  exit
fi

corpus 60000
m=(models/tiny.model -D seq=64 -D layers=4 -D batch=8 -D micro_batch=2)
plans=("zb|-D dp=1 -D pp=4 -D schedule=zb --world 4|4" "dp2z2|-D dp=2 -D pp=2 -D zero=2 --world 4|4")
for p in "${plans[@]}"; do
  IFS='|' read -r name flags np <<<"$p"
  for how in outlined flat; do
    # shellcheck disable=SC2086
    "$shardc" build "${m[@]}" $flags $([ $how = flat ] && echo --no-outline) --emit-c "$t/$name.$how" \
      -o "$t/$name.$how.bin" >/dev/null 2>&1
    "${mpi[@]}" -np "$np" "$t/$name.$how.bin" --data "$t/data.txt" --steps 3 --eval-every 3 --val-batches 1 \
      --log "$t/$name.$how.jsonl" --save-to "$t/$name.$how.ck" >/dev/null
    grep -o '"\(val_\)\?loss":[^,}]*' "$t/$name.$how.jsonl" >"$t/$name.$how.losses"
  done
  n=$(bodies "$t/$name.outlined/tiny.c")
  [ "$n" -gt 0 ] || fail "$name: nothing outlined"
  [ "$(grep -c '"loss"' "$t/$name.outlined.losses")" = 3 ] && grep -q val_loss "$t/$name.outlined.losses" ||
    { cat "$t/$name.outlined.jsonl"; fail "$name: 3 losses and a validation loss expected"; }
  if ! cmp -s "$t/$name.outlined.losses" "$t/$name.flat.losses"; then
    paste "$t/$name.outlined.losses" "$t/$name.flat.losses"
    fail "$name: the outlined trainer's losses differ from the written-out one's"
  fi
  for f in "$t/$name.flat.ck"/*/*; do
    cmp -s "$f" "$t/$name.outlined.ck/${f#"$t/$name.flat.ck/"}" || fail "$name: checkpoint file ${f##*/} differs"
  done
  echo "$name: $n outlined functions, the step-3 checkpoints ($(ls "$t/$name.flat.ck"/*/* | wc -l) files) the same bytes and the losses bit-identical to --no-outline's: $(tr '\n' ' ' <"$t/$name.outlined.losses")"
done
