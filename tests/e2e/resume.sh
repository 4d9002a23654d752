#!/usr/bin/env bash
# Resume is bit-identical for a compiled trainer: 20 steps in one run equal 10 steps, a checkpoint,
# and 10 more from --resume (weights, optimizer state and the logged losses).
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
"$shardc" build models/tiny.model -D micro_batch=4 -D seq=32 --world 1 -o "$t/train" 2>/dev/null
corpus 60000
common=(--data "$t/data.txt" --val "$t/data.txt" --val-batches 1 --eval-every 0 --steps 20 --threads 2)
"$t/train" "${common[@]}" --save-to "$t/a" --log "$t/a.jsonl" >/dev/null
"$t/train" "${common[@]}" --stop-at 10 --save-to "$t/b" --log "$t/b1.jsonl" >/dev/null
"$t/train" "${common[@]}" --resume "$t/b" --save-to "$t/b" --log "$t/b2.jsonl" >/dev/null
for f in model.safetensors optimizer.safetensors; do
  cmp "$t/a/step_00000020/$f" "$t/b/step_00000020/$f" || fail "$f differs after resume"
done
# the losses of steps 11..20 are the same numbers
a=$(grep -o '"loss":[^,]*' "$t/a.jsonl" | sed -n '11,20p')
b=$(grep -o '"loss":[^,]*' "$t/b2.jsonl" | sed -n '1,10p')
[ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") || true; fail "losses after resume differ"; }
echo "resume: 20 steps == 10 + resume + 10 (checkpoints byte-identical, losses equal)"
