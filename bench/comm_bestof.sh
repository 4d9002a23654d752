#!/bin/sh
# bench/comm_bestof.sh — runs comm_bench RUNS times and keeps, per op and size, each
# implementation's best time over every round of every run (a shared machine disturbs
# some rounds; the two implementations alternate, so neither is favoured).
#
#   bench/comm_bestof.sh RUNS NP [comm_bench args: max_bytes min_bytes ops]
#
# env: COMM_BENCH (the binary, default build/bench/comm_bench); MPIX (extra mpirun
# arguments, e.g. "-x COMM_BENCH_ALT=ring -x COMM_BENCH_ROUND_MS=20 -x COMM_BENCH_ROUNDS=7").
# Prints the load average before each run and after the last (stderr), then the table:
# ratio = MPI time / shardrt time (> 1: shardrt faster); alt: the COMM_BENCH_ALT column
# (for all_reduce_v: shardrt with one rt_all_reduce per member).
set -eu
runs=$1
np=$2
shift 2
bench=${COMM_BENCH:-build/bench/comm_bench}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for i in $(seq 1 "$runs"); do
  echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  # shellcheck disable=SC2086
  mpirun --allow-run-as-root --oversubscribe --mca pml ob1 -np "$np" ${MPIX:-} "$bench" "$@" | grep -v '^#' | grep -v '^op' >>"$out"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
awk '
{ k = $1 " " $2
  if (!(k in s) || $3 < s[k]) s[k] = $3
  if (!(k in m) || $5 < m[k]) m[k] = $5
  if (NF >= 8 && (!(k in a) || $8 < a[k])) a[k] = $8
  if (!(k in seen)) { seen[k] = 1; key[++n] = k } }
END {
  printf "%-14s %10s %11s %11s %7s %11s %7s\n", "op", "bytes", "shardrt_us", "mpi_us", "ratio", "alt_us", "alt_ratio"
  for (i = 1; i <= n; i++) {
    k = key[i]; split(k, f, " ")
    printf "%-14s %10s %11.2f %11.2f %7.2f", f[1], f[2], s[k], m[k], m[k] / s[k]
    if (k in a) printf " %11.2f %7.2f", a[k], m[k] / a[k]
    printf "\n"
  } }' "$out"
