#!/usr/bin/env bash
# shardc ckpt on one rank (label e2e; the layouts' conversions are in ckpt_sharded.sh): a single-file
# checkpoint converted to a sharded one and back is the same files byte for byte, the trainer resumes
# the sharded one bit-identically, `info` lists both; and bad input — a missing or truncated piece
# file, pieces that overlap or fall short, a wrong dtype, a truncated or corrupted index (every
# truncation length of a stride, byte flips at a stride of positions), bad arguments — ends with an
# error naming the problem and status 1 (never a signal, never status 0 with a bad checkpoint).
# shardc links the checkpoint files library only (runtime/CMakeLists.txt): it loads neither libmpi
# nor libfabric.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
libs=$(ldd "$shardc")
grep -q 'libc\.so' <<<"$libs" || { echo "$libs"; fail "ldd could not list shardc's libraries"; }
! grep -E 'libmpi|libfabric|libopen-(rte|pal)' <<<"$libs" || fail "shardc loads MPI or libfabric (it should link libshardrt_files only)"
corpus 20000
"$shardc" build models/tiny.model -D seq=32 -D micro_batch=2 -D batch=4 --world 1 -o "$t/one" >/dev/null
w=(--data "$t/data.txt" --eval-every 0 --val-batches 1 --threads 1 --steps 4)
"$t/one" "${w[@]}" --log "$t/base.jsonl" --save-to '' >/dev/null
"$t/one" "${w[@]}" --stop-at 2 --save-to "$t/ck" >/dev/null
single=$t/ck/step_00000002
"$shardc" ckpt convert "$single" "$t/sh" --format sharded >/dev/null
"$shardc" ckpt convert "$t/sh" "$t/back" >/dev/null
for f in model.safetensors optimizer.safetensors model.safetensors.index.json; do
  cmp "$single/$f" "$t/back/$f" || fail "single -> sharded -> single changed $f"
done
grep -q '"layers":true' "$t/sh/index.json" || fail "the per-layer entries were not regrouped into stacked tensors"
"$t/one" "${w[@]}" --resume "$t/sh" --log "$t/r.jsonl" --save-to '' >/dev/null
[ "$(losses "$t/base.jsonl" | tail -n 2)" = "$(losses "$t/r.jsonl")" ] || fail "the converted sharded checkpoint resumed differently"
"$shardc" ckpt info "$t/sh" >"$t/info.txt"
grep -q '^step 2 of 4' "$t/info.txt" && grep -q 'blocks.attention.w_qkv  *param  F32  *\[2, 64, 192\]  *2 piece' "$t/info.txt" &&
  grep -q '^file rank_00000.safetensors' "$t/info.txt" || { cat "$t/info.txt"; fail "ckpt info (sharded)"; }
"$shardc" ckpt info "$single" >"$t/info1.txt"
grep -q 'blocks.1.attention.w_qkv  *F32  *\[64, 192\]' "$t/info1.txt" || { cat "$t/info1.txt"; fail "ckpt info (single)"; }
# the columns are aligned: every tensor line's shape (and, sharded, its piece count) starts at one column
# (of a single-file checkpoint: within each file's list)
cols() { awk -v re="$2" '/bytes$/ { f++ } /^  [^ ]/ { c[f " " match($0, re)] = 1 } END { for (k in c) n++; print n - f + (f > 0) }' "$1"; }
[ "$(cols "$t/info.txt" '\\[')" = 1 ] && [ "$(cols "$t/info.txt" '[0-9]+ piece')" = 1 ] && [ "$(cols "$t/info1.txt" '\\[')" = 1 ] ||
  { cat "$t/info.txt" "$t/info1.txt"; fail "ckpt info: the shape or piece columns are not aligned"; }
# what run wrote it: the model, its batch, seed, data position and loss (both formats)
for f in info info1; do
  grep -Eq '^model tiny \(.*models/tiny.model\), batch 4 x 32 tokens, seed [0-9]+, data position 8, loss [0-9.]+$' "$t/$f.txt" ||
    { cat "$t/$f.txt"; fail "ckpt info ($f): no run line"; }
done
# a wrong argument count says what is wrong before the usage
rc=0; "$shardc" ckpt info "$t/sh" extra >/dev/null 2>"$t/usage.txt" || rc=$?
[ $rc = 2 ] && grep -q '^shardc ckpt: error: info takes one checkpoint directory (got 2' "$t/usage.txt" ||
  { cat "$t/usage.txt"; fail "ckpt info with two arguments: status $rc"; }
rc=0; "$shardc" ckpt convert "$t/sh" >/dev/null 2>"$t/usage.txt" || rc=$?
[ $rc = 2 ] && grep -q '^shardc ckpt: error: convert needs SRC and DST (got 1)' "$t/usage.txt" ||
  { cat "$t/usage.txt"; fail "ckpt convert without DST: status $rc"; }
echo "single -> sharded -> single: byte for byte; the sharded one resumes bit-identically; info lists both"

n=0
# bad CASE WANT CMD...: CMD exits 1 and says WANT (a regular expression)
bad() {
  local name=$1 want=$2 rc=0
  shift 2
  rm -rf "$t/out"
  "$@" >"$t/bad.out" 2>&1 || rc=$?
  [ $rc = 1 ] && grep -Eq -e "$want" "$t/bad.out" || { cat "$t/bad.out"; fail "$name: status $rc, want 1 and /$want/"; }
  n=$((n + 1))
}
# a copy of the sharded checkpoint with index.json passed through sed EXPR
variant() { rm -rf "$t/v"; cp -r "$t/sh" "$t/v"; sed -i "$1" "$t/v/index.json"; }
variant 's/"start":\[1,0\],"shape":\[1,64\]/"start":[0,0],"shape":[1,64]/'
bad overlap "pieces 0 and 1 of 'blocks.layernorm.w' overlap" "$shardc" ckpt convert "$t/v" "$t/out"
variant 's/,{"file":"rank_00000.safetensors","entry":"blocks.1.layernorm.w","start":\[1,0\],"shape":\[1,64\]}//'
bad short "cover 64 of the 128 elements" "$shardc" ckpt convert "$t/v" "$t/out"
variant 's/"start":\[1,0\],"shape":\[1,64\]/"start":[2,0],"shape":[1,64]/'
bad outside "lies outside the tensor" "$shardc" ckpt convert "$t/v" "$t/out"
variant 's/"name":"wpe","kind":"param","dtype":"F32"/"name":"wpe","kind":"param","dtype":"BF16"/'
bad dtype "'wpe' has dtype F32, the model needs BF16" "$shardc" ckpt convert "$t/v" "$t/out"
variant 's/"name":"wpe","kind":"param","dtype":"F32"/"name":"wpe","kind":"param","dtype":"Q7"/'
bad dtype-unknown 'unknown dtype "Q7"' "$shardc" ckpt convert "$t/v" "$t/out"
variant 's/"rank_00000.safetensors","entry":"wpe"/"rank_00001.safetensors","entry":"wpe"/'
bad missing-file "rank_00001.safetensors.*No such file" "$shardc" ckpt convert "$t/v" "$t/out"
bad missing-file-info "^shardc ckpt: error: .*piece file 'rank_00001.safetensors' is missing" "$shardc" ckpt info "$t/v"
variant 's/"file":"rank_00000.safetensors","entry":"wpe"/"file":"..\/x","entry":"wpe"/'
bad file-path "wrong rank or file" "$shardc" ckpt convert "$t/v" "$t/out"
variant 's/"entry":"wpe"/"entry":"wpf"/'
bad entry "missing tensor 'wpf'" "$shardc" ckpt convert "$t/v" "$t/out"
variant 's/"kind":"param"/"kind":"weights"/'
bad kind 'kind "weights" is neither param nor state' "$shardc" ckpt convert "$t/v" "$t/out"
rm -rf "$t/v" && cp -r "$t/sh" "$t/v" && truncate -s -100 "$t/v/rank_00000.safetensors"
bad truncated-piece-file "the file truncated|data region has" "$shardc" ckpt convert "$t/v" "$t/out"
# the converted file and the single file's own damage
rm -rf "$t/v" && cp -r "$single" "$t/v" && truncate -s -4 "$t/v/optimizer.safetensors"
bad truncated-single "optimizer.safetensors.*(truncated|data region has)" "$shardc" ckpt convert "$t/v" "$t/out" --format sharded
bad exists "'.*' exists" "$shardc" ckpt convert "$t/sh" "$t/back"
bad already "already a single file" "$shardc" ckpt convert "$single" "$t/out"
bad already-sharded "already a sharded checkpoint" "$shardc" ckpt convert "$t/sh" "$t/out" --format sharded
bad format "--format 'hf' is neither single nor sharded" "$shardc" ckpt convert "$t/sh" "$t/out" --format hf
bad option "unknown option '--fast'" "$shardc" ckpt convert "$t/sh" "$t/out" --fast
bad format-twice "--format given twice \('sharded', then 'single'\); give it once" "$shardc" ckpt convert "$t/sh" "$t/out" --format sharded --format=single
bad nothing "holds no checkpoint|cannot open" "$shardc" ckpt convert "$t/nothing" "$t/out"
# a checkpoint of another model (2 layers into 3, 3 into 2: the latter resumed its first 2 layers without a
# word before) is refused naming the tensor and both layer counts, single-file and sharded
"$shardc" build models/tiny.model -D seq=32 -D micro_batch=2 -D batch=4 -D layers=3 --world 1 -o "$t/three" >/dev/null
bad layers-2-into-3 "comes from another model: it holds 2 layer\(s\) of 'blocks.layernorm.w', this model has 3 \('blocks.2.layernorm.w' is missing\)" \
  "$t/three" "${w[@]}" --resume "$single" --save-to ''
bad layers-2-into-3-sharded "tensor 'blocks.layernorm.w' is F32 \[2, 64\], the model needs F32 \[3, 64\]: the checkpoint comes from another model \(2 layer\(s\), this model has 3\)" \
  "$t/three" "${w[@]}" --resume "$t/sh" --save-to ''
"$t/three" "${w[@]}" --stop-at 1 --save-to "$t/ck3" >/dev/null
bad layers-3-into-2 "comes from another model: it holds 3 layer\(s\) of 'blocks.layernorm.w', this model has 2 \('blocks.2.layernorm.w' is one too many\)" \
  "$t/one" "${w[@]}" --resume "$t/ck3" --save-to ''
# every truncation of index.json at a stride, and byte flips at a stride of positions: an error
# (status 1) or, where the damage left a valid checkpoint, a conversion; never a signal
size=$(stat -c %s "$t/sh/index.json")
fz=0
for ((k = 0; k < size; k += size / 12 + 1)); do
  rm -rf "$t/v" "$t/out" && cp -r "$t/sh" "$t/v" && truncate -s "$k" "$t/v/index.json"
  rc=0
  "$shardc" ckpt convert "$t/v" "$t/out" >"$t/f.out" 2>&1 || rc=$?
  [ $rc = 1 ] && grep -q "error" "$t/f.out" || { cat "$t/f.out"; fail "index.json cut at byte $k: status $rc, want 1"; }
  fz=$((fz + 1))
done
for ((k = 0; k < size; k += size / 12 + 1)); do
  for byte in "9" "\""; do
    rm -rf "$t/v" "$t/out" && cp -r "$t/sh" "$t/v"
    printf "$byte" | dd of="$t/v/index.json" bs=1 seek="$k" conv=notrunc status=none
    rc=0
    "$shardc" ckpt convert "$t/v" "$t/out" >"$t/f.out" 2>&1 || rc=$?
    [ $rc = 0 ] || { [ $rc = 1 ] && grep -q "error" "$t/f.out"; } || { cat "$t/f.out"; fail "index.json byte $k set to $byte: status $rc"; }
    if [ $rc = 0 ]; then # a conversion that succeeded wrote a checkpoint the trainer reads or refuses cleanly
      rc=0
      "$t/one" "${w[@]}" --resume "$t/out" --stop-at 2 --save-to '' >"$t/f.out" 2>&1 || rc=$?
      [ $rc -le 1 ] || { cat "$t/f.out"; fail "the trainer on index.json byte $k set to $byte: status $rc"; }
    fi
    fz=$((fz + 1))
  done
done
echo "ckpt_convert: $n bad inputs refused with their error; $fz damaged indexes: an error or a valid conversion, no crash"
