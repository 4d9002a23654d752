# tests/codegen/lib.sh — sourced by the mpirun end-to-end scripts (layouts.sh, buckets.sh) after
# `shardc=...` and `cd` to the repository root: a temporary folder $t, the mpirun command $mpi,
# a corpus and the common trainer flags $run, and the loss-curve comparison.
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun --mca pml ob1)
bash scripts/gen_corpus.sh "$t/data.txt" 60000 3 >/dev/null
run=(--data "$t/data.txt" --steps 20 --eval-every 0 --val-batches 1)

losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
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
