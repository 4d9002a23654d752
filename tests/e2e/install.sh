#!/usr/bin/env bash
# cmake --install: the prefix holds shardc, libshardrt, the runtime's headers and the models; moved
# elsewhere, its shardc builds a trainer from the prefix's own files (not the build or source tree)
# and the trainer trains. usage: install.sh BUILD_DIR SOURCE_DIR
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
build=$(abspath "$1") src=$(abspath "$2")
cmake --install "$build" --prefix "$t/staged" >/dev/null
mv "$t/staged" "$t/moved prefix" # relocated, with a space: found from shardc's own path, quoted
p="$t/moved prefix"
for f in bin/shardc bin/shardc-launch lib/shardc/libshardrt.a include/shardc/program.h include/shardc/ops/coll.h share/shardc/models/tiny.model \
  share/shardc/models/std/transformer.model; do
  [ -e "$p/$f" ] || fail "$f not installed"
done
cd "$t"
"$p/bin/shardc" build "$p/share/shardc/models/tiny.model" --world 1 -o "$t/t" -v 2>"$t/log" || { cat "$t/log"; exit 1; }
cmd=$(grep '^shardc: ' "$t/log" | head -1)
case "$cmd" in *"$src/"* | *"$build/"*) fail "the installed shardc used the source or build tree: $cmd" ;; esac
case "$cmd" in *"$p/bin/../lib/shardc"*) ;; *) fail "not linked from the prefix: $cmd" ;; esac
"$p/bin/shardc" plan "$p/share/shardc/models/tiny.model" --world 1 --sbatch "$t/job.sh" >/dev/null 2>&1 || fail "plan --sbatch"
grep -qF "exec '$p/bin/shardc-launch' " "$t/job.sh" || { cat "$t/job.sh"; fail "the sbatch script does not run the installed launcher"; }
"$p/bin/shardc-launch" --help | grep -q 'restarts it after a failure' || fail "shardc-launch --help"
rc=0; "$p/bin/shardc-launch" --np >/dev/null 2>"$t/err" || rc=$?
[ $rc = 2 ] && grep -q -- '--np needs a value' "$t/err" || { cat "$t/err"; fail "shardc-launch --np without a value: status $rc"; }
help=$("$p/bin/shardc" --help | grep -- '-I DIR')
case "$help" in *"$p/bin/../share/shardc/models)"*) ;; *) fail "--help names another import directory: $help" ;; esac
python3 -c "print('the quick brown fox jumps over the lazy dog. ' * 400)" >"$t/corpus.txt"
"$t/t" --data "$t/corpus.txt" --steps 3 --save-to "$t/ckpt" >"$t/run" 2>&1 || { cat "$t/run"; exit 1; }
grep -q 'done: 3 step' "$t/run" || { cat "$t/run"; exit 1; }
echo "ok: installed, moved, built and trained from $p"
