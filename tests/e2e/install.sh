#!/usr/bin/env bash
# cmake --install: the prefix holds shardc, libshardrt, the runtime's headers and the models; moved
# elsewhere, its shardc builds a trainer from the prefix's own files (not the build or source tree)
# and the trainer trains. usage: install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/staged" >/dev/null
mv "$tmp/staged" "$tmp/moved prefix" # relocated, with a space: found from shardc's own path, quoted
p="$tmp/moved prefix"
for f in bin/shardc bin/shardc-launch lib/shardc/libshardrt.a include/shardc/program.h include/shardc/ops/coll.h share/shardc/models/tiny.model \
  share/shardc/models/std/transformer.model; do
  [ -e "$p/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
cd "$tmp"
"$p/bin/shardc" build "$p/share/shardc/models/tiny.model" --world 1 -o "$tmp/t" -v 2>"$tmp/log" || { cat "$tmp/log"; exit 1; }
cmd=$(grep '^shardc: ' "$tmp/log" | head -1)
case "$cmd" in *"$src/"* | *"$build/"*) echo "FAIL: the installed shardc used the source or build tree: $cmd"; exit 1 ;; esac
case "$cmd" in *"$p/bin/../lib/shardc"*) ;; *) echo "FAIL: not linked from the prefix: $cmd"; exit 1 ;; esac
"$p/bin/shardc" plan "$p/share/shardc/models/tiny.model" --world 1 --sbatch "$tmp/job.sh" >/dev/null 2>&1 || { echo "FAIL: plan --sbatch"; exit 1; }
grep -qF "exec '$p/bin/shardc-launch' " "$tmp/job.sh" || { cat "$tmp/job.sh"; echo "FAIL: the sbatch script does not run the installed launcher"; exit 1; }
python3 -c "print('the quick brown fox jumps over the lazy dog. ' * 400)" >"$tmp/corpus.txt"
"$tmp/t" --data "$tmp/corpus.txt" --steps 3 --save-to "$tmp/ckpt" >"$tmp/run" 2>&1 || { cat "$tmp/run"; exit 1; }
grep -q 'done: 3 step' "$tmp/run" || { cat "$tmp/run"; exit 1; }
echo "ok: installed, moved, built and trained from $p"
