#!/usr/bin/env bash
# The demo: sets up, builds shardc, compiles the bundled byte-level model (models/tiny.model)
# into a trainer, and trains it on a generated English-like corpus, printing one line per step
# and a text sample at the end. Extra arguments go to the trainer (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
mkdir -p data/tiny
[ -f data/tiny/train.txt ] || bash scripts/gen_corpus.sh data/tiny/train.txt
[ -f data/tiny/val.txt ] || bash scripts/gen_corpus.sh data/tiny/val.txt 40000 7
echo "== shardc build models/tiny.model -o build/train_tiny"
./build/shardc build models/tiny.model -o build/train_tiny
echo "== build/train_tiny --steps 2000 --eval-every 250 --sample 300"
./build/train_tiny --steps 2000 --eval-every 250 --sample 300 "$@"
