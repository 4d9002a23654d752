#!/usr/bin/env bash
# The demo: sets up, builds shardc, compiles the bundled byte-level model (models/tiny.model)
# for 4 ranks — tensor parallel 2 x data parallel 2 — and trains it under mpirun on a generated
# English-like corpus, printing one line per step (with the share of the step spent in
# communication) and a text sample at the end. Extra arguments go to the trainer (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
mkdir -p data/tiny
[ -f data/tiny/train.txt ] || bash scripts/gen_corpus.sh data/tiny/train.txt
[ -f data/tiny/val.txt ] || bash scripts/gen_corpus.sh data/tiny/val.txt 40000 7
echo "== shardc build models/tiny.model -D tp=2 -D dp=2 --world 4 -o build/train_tiny"
./build/shardc build models/tiny.model -D tp=2 -D dp=2 --world 4 -o build/train_tiny
# as root OpenMPI wants these; 4 ranks on a 2-core machine need oversubscription
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the demo's flags, less those the arguments give again (the command shown is the one run)
flags=()
for f in --steps=1000 --eval-every=250 --sample=300; do
  given=0
  for a in "$@"; do [[ $a == "${f%%=*}" || $a == "${f%%=*}="* ]] && given=1; done
  [[ $given == 1 ]] || flags+=("${f%%=*}" "${f#*=}")
done
echo "== mpirun -np 4 build/train_tiny ${flags[*]}${*:+ $*}"
mpirun --mca pml ob1 -np 4 ./build/train_tiny "${flags[@]}" "$@"
