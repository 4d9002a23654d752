#!/usr/bin/env bash
# The textual IR reader against the printer, on the bundled models (label: passes, golden).
#   usage: ir_roundtrip.sh SHARDC IR_OPT
# 1. Round trip: print(read(T)) == T byte for byte, for
#    - the `shardc plan --ir` text of every golden case (tests/golden/cases.sh) less its
#      reports, which are computed from the IR and not read back: `#` lines (rank classes,
#      communication, memory), the `parameters:` table and `flops per token:`;
#    - the IR after every pass (--dump-ir=after:all), whole.
# 2. Replay: each pass P run alone (ir_opt --pass P) on the IR read from the dump before it
#    (with the plan's module header) prints the pipeline's dump after P. Two known
#    differences are masked: nodes the optimizer adds take the recipe's location, which the
#    header does not print (the reader gives them the header line's: comments are compared
#    without locations for that pass), and memplan's run prints the memory summary (`#` lines).
#    The passes after memplan that read its placement (gacc, epilogue, hfuse, fuse_normres, fuse_ce, fuse_sumsq), which the IR text does
#    not carry, are replayed with memplan run again first.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
opt=$(abspath "$2")
status=0
# shellcheck source=tests/golden/cases.sh
source tests/golden/cases.sh
cases=(
  "${golden_cases[@]}"
  "tiny-cuda-bf16|models/tiny.model|--world 1 --target cuda -D precision=bf16"
  "tiny-zero3-dp2-coalesce|models/tiny.model|-D seq=32 -D micro_batch=4 -D dp=2 -D zero=3 -D coalesce=on --world 2"
  "tiny-zero2-dp2-defer-off|models/tiny.model|-D seq=32 -D micro_batch=4 -D dp=2 -D zero=2 -D defer_waits=off --world 2"
  "tiny-pp2-zb-rc-full|models/tiny.model|-D seq=32 -D micro_batch=2 -D dp=1 -D pp=2 -D schedule=zb -D recompute=full --world 2"
  "tiny-pp2-zb-rc-full-zbw-recompute|models/tiny.model|-D seq=32 -D micro_batch=2 -D dp=1 -D pp=2 -D schedule=zb -D recompute=full -D zb_w=recompute --world 2"
  "tiny-cuda-zero2-offload|models/tiny.model|-D seq=32 -D micro_batch=4 -D dp=2 -D zero=2 -D offload=on --world 2 --target cuda"
  "tiny-cuda-bf16-zero1-dp2|models/tiny.model|-D seq=32 -D micro_batch=4 -D dp=2 -D zero=1 -D precision=bf16 --world 2 --target cuda"
  "tiny-cuda-bf16-offload|models/tiny.model|-D seq=32 -D micro_batch=4 -D zero=1 -D offload=on -D precision=bf16 --world 1 --target cuda"
  "tiny-dp4-2nodes|models/tiny.model|-D seq=32 -D micro_batch=4 -D dp=4 --world 4"
  "tiny-pp2-zb|models/tiny.model|-D layers=4 -D micro_batch=2 -D batch=8 -D dp=1 -D pp=2 -D schedule=zb --world 2"
  "tiny-pp2-interleaved-tp2|models/tiny.model|-D layers=4 -D micro_batch=2 -D batch=8 -D dp=1 -D tp=2 -D pp=2 -D schedule=interleaved --world 4"
  "llama-cp2-tp2|models/llama3-8b.model|-D vocab=256 -D seq=64 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96 -D batch=2 -D micro_batch=2 -D dp=1 -D zero=0 -D sp=off -D tp=2 -D cp=2 --world 4"
  "llama-cp2-tp2-sp|models/llama3-8b.model|-D vocab=256 -D seq=64 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96 -D batch=2 -D micro_batch=2 -D dp=1 -D zero=0 -D sp=on -D tp=2 -D cp=2 --world 4"
  "llama-cp2-dp2|models/llama3-8b.model|-D vocab=256 -D seq=64 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96 -D batch=2 -D micro_batch=1 -D dp=2 -D zero=0 -D sp=off -D tp=1 -D cp=2 --world 4"
  "llama-cp2-dp2-zero3-accum2|models/llama3-8b.model|-D vocab=256 -D seq=64 -D d=64 -D heads=4 -D kv_heads=2 -D layers=2 -D ffn=96 -D batch=4 -D micro_batch=1 -D dp=2 -D zero=3 -D sp=off -D tp=1 -D cp=2 --world 4"
)
# The IR part of a plan: no `#` lines, nothing from `parameters:` on, no trailing blank line.
ir_part() { grep -v '^#' "$1" | sed '/^parameters:$/,$d' | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'; }
no_locs() { sed 's/  *#.*$//' "$1"; }
npass=0
for c in "${cases[@]}"; do
  IFS='|' read -r name model flags <<<"$c"
  # shellcheck disable=SC2086
  # (a plan that does not fit its devices exits 1 after printing itself: tests/report/fit.sh)
  "$shardc" plan "$model" $flags --ir >"$t/$name.plan" 2>/dev/null || true
  ir_part "$t/$name.plan" >"$t/$name.want"
  if ! "$opt" "$t/$name.plan" >"$t/$name.got" 2>"$t/err" || ! cmp -s "$t/$name.want" "$t/$name.got"; then
    echo "round trip FAILED: $name (shardc plan $model $flags)"
    cat "$t/err"
    diff "$t/$name.want" "$t/$name.got" | head -20 || true
    status=1
  fi
  sed -n '1,/^$/p' "$t/$name.plan" >"$t/$name.header"
  replay_flags=() # what the plan was made with that the module header does not say
  [[ "$flags" == *"--target cuda"* ]] && replay_flags+=(--target cuda)
  [[ "$flags" =~ --world\ ([0-9]+) ]] && replay_flags+=(--world "${BASH_REMATCH[1]}")
  # shellcheck disable=SC2086
  "$shardc" plan "$model" $flags --dump-ir=after:all 2>/dev/null |
    awk -v d="$t" -v n="$name" '/^# ---- after /{f = d "/" n ".after." $4; print $4 >> (d "/" n ".passes"); next} {print > f}' || true
  prev=
  while read -r p; do
    f="$t/$name.after.$p"
    npass=$((npass + 1))
    if ! "$opt" "$f" >"$t/got" 2>"$t/err" || ! cmp -s "$f" "$t/got"; then
      echo "round trip FAILED: $name after $p"
      cat "$t/err"
      diff "$f" "$t/got" | head -20 || true
      status=1
    fi
    if [ -n "$prev" ]; then
      cat "$t/$name.header" "$t/$name.after.$prev" >"$t/in.ir"
      placed=()
      [[ "$p" = gacc || "$p" = epilogue || "$p" = hfuse || "$p" = fuse_normres || "$p" = fuse_ce || "$p" = fuse_sumsq ]] && placed=(--pass memplan)
      if ! "$opt" "$t/in.ir" "${placed[@]}" --pass "$p" --graph-only "${replay_flags[@]}" 2>"$t/err" | grep -v '^#' >"$t/got"; then
        echo "replay FAILED: $name: pass $p on the IR after $prev"
        cat "$t/err"
        status=1
      else
        want="$f"
        if [ "$p" = optimizer ]; then
          no_locs "$f" >"$t/want.nl" && no_locs "$t/got" >"$t/got.nl"
          want="$t/want.nl" && cp "$t/got.nl" "$t/got"
        fi
        if ! cmp -s "$want" "$t/got"; then
          echo "replay FAILED: $name: pass $p on the IR after $prev differs from the pipeline's"
          diff "$want" "$t/got" | head -20 || true
          status=1
        fi
      fi
    fi
    prev=$p
  done <"$t/$name.passes"
done
[ $status = 0 ] && echo "ir round trip: ${#cases[@]} plans and $npass after-pass dumps read back identical; every pass replayed"
exit $status
