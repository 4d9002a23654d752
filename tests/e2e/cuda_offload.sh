#!/usr/bin/env bash
# ZeRO-Offload's overlapped copies on one rank of the emulated CUDA device (labels cuda, e2e).
#
#   cuda_offload.sh SHARDC ST_CLOSE
#
# The tiny GPT (seq 32, micro-batch 4, 2 layers) with `zero 1 offload` at world 1, --target cuda, and
# the CPU target's trainer of the same plan (offload is a no-op there). passes/offload_sched.c puts
# the copies; checked here:
#   1. where the generated step issues them (the program's text, in order): every parameter's
#      download starts before the step's first kernel (beside the forward); one download per stacked
#      layer gradient starts inside the backward loop, at the end of its iteration, row i1 (beside
#      the backward of the earlier layers), none of the host's waits is inside that loop, and the
#      host waits for a download only after the backward loop; every upload has a device wait
#      after it and the step has no synchronous copy; under precision bf16 the 12 stacked bf16
#      gradients' rows download inside the loop and all 16 gradients are made f32 on the host;
#   2. the losses over 2 steps equal the CPU target's (|rel| <= 1e-6, cuda_multirank.sh's f32
#      tolerance) and so do the Adam moments after step 2 (<= 2.5e-7; measured 3.7e-9); (the
#      parameters are not compared with the CPU's here: one weight of this batch-4 plan, its
#      gradient near eps, ends 8.1e-7 apart, the same bytes as the program of synchronous copies
#      shardc emitted before the overlap; step 3 compares them bit for bit without the overlap)
#   3. SHARDRT_OFFLOAD_SYNC=1 (every copy synchronous where it starts: no overlap) gives the same
#      losses and checkpoints bit for bit;
#   4. the emulator's flight check (runtime/cuda/emu.c: each copy's bytes unchanged from its start
#      to its wait) stops a program whose row download was moved to the start of its iteration,
#      before the kernels that write the row, and one whose upload was moved before the host update
#      that makes its bytes (a C compiler wrapper moves them): the check can fail.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
st_close=$(abspath "$2")
corpus 20000
run=(--data "$t/data.txt" --steps 2 --eval-every 0 --val-batches 1 --ckpt-format logical)
m=(models/tiny.model -D seq=32 -D micro_batch=4 -D zero=1 -D offload=on --world 1)

# 1. the order of the copies in the generated step
"$shardc" plan "${m[@]}" --target cuda --emit-c "$t/src" >/dev/null 2>&1
awk '/^static void step\(/,/^}/' "$t/src/tiny.c" >"$t/step.c"
awk -v want=12 '
  /for \(int64_t i1 = 1; i1 >= 0; i1--\)/ { inbwd = 1; depth = 0 }
  inbwd && /{/ { depth += gsub(/{/, "{") }
  inbwd && /}/ { depth -= gsub(/}/, "}"); if (depth <= 0) { inbwd = 0; after = 1 } }
  /rt_cu_launch|rt_cu_matmul/ && !launched { launched = NR }
  /rt_cu_to_host_start\(ctx, \(H \+ [0-9]+\), \(M \+ [0-9]+\),/ && !launched { params++ }
  /rt_cu_to_host_start\(ctx, \(H \+ [0-9]+\) \+ i1 \* [0-9]+, \(M \+ [0-9]+\) \+ i1 \* [0-9]+,/ { if (inbwd) rows++; else badrow++ }
  /rt_cu_host_wait/ { waits++; if (inbwd || !after) early++ }
  /rt_cu_to_device_start/ { ups++; pending++ }
  /rt_cu_device_wait/ { dwaits++; pending-- }
  /rt_cu_to_(host|device)\(/ { sync++ }
  END {
    printf "step: %d parameter downloads before the first kernel, %d row downloads in the backward loop (%d outside), %d host waits (%d before the loop ends), %d uploads, %d device waits\n", params, rows, badrow, waits, early, ups, dwaits
    if (params != 16 || rows != want || badrow || early || waits == 0 || ups != 16 || dwaits != ups || pending || sync) { print "FAIL: the copies are not where passes/offload_sched.c puts them"; exit 1 }
  }' "$t/step.c"

# (precision bf16: the backward loop's bf16 gradient rows downloaded inside it, made f32 on the host)
"$shardc" plan "${m[@]}" -D precision=bf16 --target cuda --emit-c "$t/src16" >/dev/null 2>&1
nr=$(awk '/^static void step\(/,/^}/' "$t/src16/tiny.c" | grep -c 'rt_cu_to_host_start(ctx, (H + [0-9]*) + i1' || true)
nc=$(awk '/^static void step\(/,/^}/' "$t/src16/tiny.c" | grep -c 'rt_cvt_bf16_f32(' || true)
echo "bf16: $nr row downloads in the backward loop, $nc gradients made f32 on the host"
[ "$nr" -eq 12 ] && [ "$nc" -eq 16 ] || fail "bf16 gradients not downloaded in bf16 inside the loop"

# 2. against the CPU target; 3. without the overlap, bit for bit
"$shardc" build "${m[@]}" -o "$t/cpu" 2>/dev/null
"$shardc" build "${m[@]}" --target cuda -o "$t/cuda" >/dev/null
"$t/cpu" "${run[@]}" --log "$t/cpu.jsonl" --save-to "$t/ck_cpu" >/dev/null
SHARDRT_DEVICE=emu "$t/cuda" "${run[@]}" --log "$t/cuda.jsonl" --save-to "$t/ck_cuda" >"$t/cuda.out" 2>&1 ||
  { cat "$t/cuda.out"; fail "the offload trainer on the emulated device"; }
SHARDRT_DEVICE=emu SHARDRT_OFFLOAD_SYNC=1 "$t/cuda" "${run[@]}" --log "$t/sync.jsonl" --save-to "$t/ck_sync" >"$t/sync.out" 2>&1 ||
  { cat "$t/sync.out"; fail "the offload trainer with SHARDRT_OFFLOAD_SYNC=1"; }
paste <(losses "$t/cpu.jsonl") <(losses "$t/cuda.jsonl") | awk '
  { n++; d = $2 - $1; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; if (r > 1e-6) bad++ }
  END { printf "loss: worst |rel| offload (emulated CUDA, overlapped copies) vs CPU over %d steps %.2e (tolerance 1e-6)\n", n, w
        if (n != 2 || bad) { print "FAIL: losses"; exit 1 } }'
printf "optimizer: "
"$st_close" "$t/ck_cpu/step_00000002/optimizer.safetensors" "$t/ck_cuda/step_00000002/optimizer.safetensors" 2.5e-7 ||
  fail "the moments differ from the CPU target's"
for f in model optimizer; do
  cmp -s "$t/ck_cuda/step_00000002/$f.safetensors" "$t/ck_sync/step_00000002/$f.safetensors" ||
    fail "$f state differs without the overlap"
done
cmp -s <(losses "$t/cuda.jsonl") <(losses "$t/sync.jsonl") || fail "losses differ without the overlap"
echo "overlapped vs SHARDRT_OFFLOAD_SYNC=1: losses and checkpoints bit-identical"

# 4. a download started before its bytes are made, an upload started before the host made its
#    bytes: both caught by the emulator (a compiler wrapper moves the copy in the generated C)
cat >"$t/cc.sh" <<'CC'
#!/usr/bin/env bash
# MUTATE=row: the backward loop's first row download moves to the start of its iteration;
# MUTATE=upload: the first upload moves before the host update that makes its bytes
for a in "$@"; do case $a in *.c) src=$a ;; esac; done
if [ "$MUTATE" = row ]; then
  awk '/for \(int64_t i1 = 1; i1 >= 0; i1--\)/ && !loop { loop = NR }
       { line[NR] = $0 }
       loop && !row && NR > loop && /rt_cu_to_host_start\(ctx, \(H \+ [0-9]+\) \+ i1/ { row = NR }
       END { for (i = 1; i <= NR; i++) { if (i == row) continue; print line[i]; if (i == loop) print line[row] } }' "$src" >"$src.moved"
else
  awk '{ line[NR] = $0 }
       /rt_adamw_f32\(/ && !upd { upd = NR }
       upd && !up && /rt_cu_to_device_start\(/ { up = NR }
       END { for (i = 1; i <= NR; i++) { if (i == up) continue; if (i == upd) print line[up]; print line[i] } }' "$src" >"$src.moved"
fi
mv "$src.moved" "$src"
exec cc "$@"
CC
chmod +x "$t/cc.sh"
for mut in row upload; do
  MUTATE=$mut "$shardc" build "${m[@]}" --target cuda --cc "$t/cc.sh" -o "$t/bad_$mut" >/dev/null
  if SHARDRT_DEVICE=emu "$t/bad_$mut" "${run[@]}" --save-to "$t/ck_$mut" >"$t/$mut.out" 2>&1; then
    fail "the program with the $mut copy moved ran to the end"
  fi
  grep -q "overwritten while in flight" "$t/$mut.out" || { cat "$t/$mut.out"; fail "$mut: not stopped by the flight check"; }
  echo "moved $mut copy: $(grep -o 'offload slot [0-9]*: the [a-z]* of [0-9]* bytes' "$t/$mut.out" | head -1) was overwritten in flight (caught)"
done
echo "cuda offload: ok"
