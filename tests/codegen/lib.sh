# tests/codegen/lib.sh — sourced by the mpirun end-to-end scripts (layouts.sh, buckets.sh, and some of
# tests/e2e) after `shardc=...` and `cd` to the repository root: tests/lib.sh's preamble (a temporary
# folder $t, the mpirun command $mpi, fail, losses), a 60000-byte corpus and the common trainer flags
# $run, and the loss-curve comparison.
# shellcheck shell=bash
source tests/lib.sh
corpus 60000
run=(--data "$t/data.txt" --steps 20 --eval-every 0 --val-batches 1)

# same_ckpt DIR_A DIR_B: two checkpoint directories hold the same files, byte for byte (a sharded
# checkpoint's rank files and index, or a logical one's model and optimizer files)
same_ckpt() {
  [ -n "$(ls "$1")" ] && [ "$(ls "$1")" = "$(ls "$2")" ] || return 1
  local f
  for f in "$1"/*; do cmp -s "$f" "$2/${f##*/}" || return 1; done
}
# compare NAME LOG REF [STEPS]: every step's loss within 1e-5 relative (justified in layouts.sh) over
# STEPS steps (default 20, as $run); prints the worst
compare() {
  paste <(losses "$3") <(losses "$2") | awk -v name="$1" -v want="${4:-20}" '
    { n++; d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; if (r > 1e-5) bad++ }
    END { if (n != want) { printf "FAIL %s: %d steps logged, want %d\n", name, n, want; exit 1 }
          printf "%-28s worst |rel| loss difference vs 1 rank over %d steps: %.2e\n", name, want, w
          if (bad) { printf "FAIL %s: %d step(s) beyond 1e-5\n", name, bad; exit 1 } }'
}
# resume_on_one NAME NP BIN LOG ONE: BIN's step-10 checkpoint (run on NP ranks) resumed by the
# one-rank trainer ONE gives step 11's loss of BIN's uninterrupted LOG within 1e-5 relative
resume_on_one() {
  local ck="$t/resume_${1//[^a-z0-9]/_}" want got
  "${mpi[@]}" -np "$2" "$3" "${run[@]}" --stop-at 10 --save-to "$ck" >/dev/null
  want=$(losses "$4" | sed -n 11p)
  "$5" "${run[@]}" --threads 2 --resume "$ck" --stop-at 11 --log "$ck.jsonl" --save-to "$ck.r" >/dev/null
  got=$(losses "$ck.jsonl" | head -1)
  awk -v a="$got" -v b="$want" -v name="$1" 'BEGIN { d = a - b; if (d < 0) d = -d;
    printf "resume %s step 10 -> 1 rank: step 11 loss %s vs %s uninterrupted (|rel| %.1e)\n", name, a, b, d / b;
    exit (d / b <= 1e-5 ? 0 : 1) }' || { echo "FAIL: a $1 checkpoint resumed on one rank"; exit 1; }
}
# sample_of OUT: the sample a trainer printed to OUT (what follows its "sample (" header, the last thing
# it prints: the prompt's lines and the tokens')
sample_of() { sed -n '/^sample (/,$p' "$1" | tail -n +2; }
# same_sample NAME OUT REF: OUT's sample is REF's, token for token (the same weights and seed: --init-from
# one checkpoint, $samp)
# shellcheck disable=SC2034 # (read by the scripts that source this)
samp=(--data "$t/data.txt" --steps 0 --val-batches 1 --sample 24 --temperature 0.5)
same_sample() {
  local a b
  a=$(sample_of "$2")
  b=$(sample_of "$3")
  [ -n "$b" ] && [ "$a" = "$b" ] || { printf "FAIL %s: sample\n%s\nthe reference's:\n%s\n" "$1" "$a" "$b"; exit 1; }
  printf "%-28s the reference's sample (%d bytes)\n" "$1" "${#a}"
}
