#!/usr/bin/env bash
# tests/report/offload_cost.sh — plan offload in the cost model and the planner (docs/planner.md,
# "Offload"): GPT-2 124M, B 16 x 1024, bf16, one H200 (models/topo/h200-x1.topo), CUDA target:
#  1. the copies' time scales with their bytes: with a profile whose copies cost no latency, D2H and
#     H2D times are their bytes over the link's bandwidth exactly, at 12 and 6 layers and with the
#     f32 parameters kept on the device (weight_copy per_layer: 3 x the downloads);
#  2. synchronous copies (`offload_sync 1`, the trainer's SHARDRT_OFFLOAD_SYNC=1): the step is slower
#     than the plan without offload by at least every copy and the host update (none overlapped),
#     less the device's own update that offload removes;
#  3. overlapped (passes/offload_sched.c's schedule): faster than synchronous, slower than without
#     offload by at least the host update (it waits for every gradient: the clip) less that device
#     update, and its exposed offload time less than the copies and the update together;
#     with a free host update at least half the downloads are hidden behind the compute, no upload;
#  4. the planner's analytic model prices the same: the offload plan's analytic step over the plan
#     without offload by at least 0.9 x the host update, and within 15 % of its compiled prediction;
#  5. a bad offload_sync or a negative host_link_latency in a profile is an error at file:line:col.
# Usage: tests/report/offload_cost.sh SHARDC
set -uo pipefail
shardc=${1:?usage: offload_cost.sh SHARDC}
source "$(dirname "$0")/lib.sh"
field() { sed -n "s/^#   $1.*/&/p" "$2"; }
step() { sed -n 's/^#   step  *\([0-9.e+]* [mu]*s\) .*/\1/p' "$1" | secs; }
compute() { sed -n 's/^#   compute  *\([0-9.e+]* [mu]*s\) .*/\1/p' "$1" | secs; }
exposed() { sed -n 's/^#   offload  *\([0-9.e+]* [mu]*s\) .*/\1/p' "$1" | secs; }
host() { sed -n 's/^#   offload .* host update \([0-9.e+]* [mu]*s\) .*/\1/p' "$1" | secs; }
d2h() { sed -n 's/^#   offload .* D2H \([0-9.e+]* [mu]*s\) .*/\1/p' "$1" | secs; }
h2d() { sed -n 's/^#   offload .* H2D \([0-9.e+]* [mu]*s\) .*/\1/p' "$1" | secs; }
d2h_mb() { sed -n 's/^#   offload .* D2H [0-9.e+]* [mu]*s (\([0-9.e+]*\) MB).*/\1/p' "$1"; }
h2d_mb() { sed -n 's/^#   offload .* H2D [0-9.e+]* [mu]*s (\([0-9.e+]*\) MB).*/\1/p' "$1"; }
link_gbs() { sed -n 's/^#   offload .* over \([0-9.e+]*\) GB\/s .*/\1/p' "$1"; }
# true when a <= b (x factor) + slack
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b * (1 + 1e-3) + 1e-6) }'; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= t * b) }'; }

gpt2=(plan models/gpt2-124m.model --target cuda --world 1 -D batch=16 -D micro_batch=16 -D recompute=none
  --topology models/topo/h200-x1.topo)
plan() { # out-file args...
  local out=$1
  shift
  "$shardc" "${gpt2[@]}" "$@" --cost >"$out" 2>&1 || bad "shardc ${gpt2[*]} $* --cost failed: $(tail -3 "$out")"
}

# 1. the copies' time is their bytes over the link
printf 'host_link_latency 0\n' >"$tmp/nolat.profile"
prev=""
for v in "-D layers=12" "-D layers=6" "-D layers=12 -D weight_copy=per_layer"; do
  # shellcheck disable=SC2086
  plan "$tmp/c.txt" -D offload=on $v --profile "$tmp/nolat.profile"
  bw=$(link_gbs "$tmp/c.txt")
  for dir in d2h h2d; do
    t=$($dir "$tmp/c.txt") mb=$(${dir}_mb "$tmp/c.txt")
    [ -n "$t" ] && [ -n "$mb" ] && [ -n "$bw" ] || { bad "$v: no offload line: $(grep offload "$tmp/c.txt")"; continue; }
    near "$t" "$(awk -v b="$mb" -v w="$bw" 'BEGIN { print b * 1e6 / (w * 1e9) }')" 0.01 ||
      bad "$v: $dir $t s for $mb MB over $bw GB/s: not bytes / bandwidth"
  done
  echo "$v: D2H $(d2h_mb "$tmp/c.txt") MB in $(d2h "$tmp/c.txt") s, H2D $(h2d_mb "$tmp/c.txt") MB in $(h2d "$tmp/c.txt") s"
  [ -n "$prev" ] && ! awk -v a="$(d2h_mb "$tmp/c.txt")" -v b="$prev" 'BEGIN { exit !(a != b) }' &&
    bad "$v: the same D2H bytes as the plan before ($prev MB)"
  prev=$(d2h_mb "$tmp/c.txt")
done
awk -v a="$prev" -v b="$(plan "$tmp/c12.txt" -D offload=on --profile "$tmp/nolat.profile"; d2h_mb "$tmp/c12.txt")" \
  'BEGIN { exit !(a >= 2.9 * b) }' || bad "per_layer's downloads ($prev MB) not about 3 x the bf16 path's"

# 2. and 3. synchronous, overlapped, none
printf 'offload_sync 1\n' >"$tmp/sync.profile"
plan "$tmp/off.txt" -D offload=off
plan "$tmp/on.txt" -D offload=on
plan "$tmp/sync.txt" -D offload=on --profile "$tmp/sync.profile"
s_off=$(step "$tmp/off.txt") s_on=$(step "$tmp/on.txt") s_sync=$(step "$tmp/sync.txt")
c_off=$(compute "$tmp/off.txt") c_on=$(compute "$tmp/on.txt")
h=$(host "$tmp/on.txt") dn=$(d2h "$tmp/on.txt") up=$(h2d "$tmp/on.txt")
x_on=$(exposed "$tmp/on.txt") x_sync=$(exposed "$tmp/sync.txt")
echo "step: no offload $s_off s, overlapped $s_on s (exposed $x_on), synchronous $s_sync s (exposed $x_sync); host $h, D2H $dn, H2D $up"
[ -n "$s_off" ] && [ -n "$s_on" ] && [ -n "$s_sync" ] && [ -n "$h" ] && [ -n "$dn" ] && [ -n "$up" ] || bad "missing figures"
[ -z "$(grep -E '^#   offload' "$tmp/off.txt")" ] || bad "an offload line without offload"
grep -q 'synchronous (offload_sync)' "$tmp/sync.txt" || bad "offload_sync 1 not reported"
saved=$(awk -v a="$c_off" -v b="$c_on" 'BEGIN { print (a > b ? a - b : 0) }') # the device update offload removes
le "$(awk -v d="$dn" -v u="$up" -v h="$h" -v s="$saved" 'BEGIN { print d + u + h - s }')" \
  "$(awk -v a="$s_sync" -v b="$s_off" 'BEGIN { print a - b }')" ||
  bad "synchronous: step $s_sync - $s_off under the copies $dn + $up + host $h - $saved"
near "$x_sync" "$(awk -v d="$dn" -v u="$up" -v h="$h" 'BEGIN { print d + u + h }')" 0.01 ||
  bad "synchronous: exposed $x_sync is not the copies and the update ($dn + $up + $h)"
awk -v a="$s_on" -v b="$s_sync" 'BEGIN { exit !(a < b) }' || bad "overlapped $s_on not faster than synchronous $s_sync"
le "$(awk -v h="$h" -v s="$saved" 'BEGIN { print h - s }')" "$(awk -v a="$s_on" -v b="$s_off" 'BEGIN { print a - b }')" ||
  bad "overlapped: step $s_on - $s_off under the host update $h - $saved"
awk -v x="$x_on" -v d="$dn" -v u="$up" -v h="$h" 'BEGIN { exit !(x < d + u + h && x >= h) }' ||
  bad "overlapped: exposed $x_on not in [host $h, copies + host)"

# 3b. the downloads overlap the compute as scheduled: with a free host update, at least half of them
# hidden (the parameters' beside the forward, the layer gradients' rows beside the backward), the
# uploads not (they follow the update, which follows the backward)
printf 'host_bandwidth 1e15\n' >"$tmp/fast.profile"
for v in "-D layers=12" "-D weight_copy=per_layer"; do
  # shellcheck disable=SC2086
  plan "$tmp/f.txt" -D offload=on $v --profile "$tmp/fast.profile"
  x=$(exposed "$tmp/f.txt") dn=$(d2h "$tmp/f.txt") up=$(h2d "$tmp/f.txt")
  echo "$v, free host: exposed $x s of D2H $dn + H2D $up"
  awk -v x="$x" -v d="$dn" -v u="$up" 'BEGIN { exit !(x >= u && x <= u + 0.5 * d) }' ||
    bad "$v, free host: exposed $x not in [H2D $up, H2D + D2H / 2]"
done

# 4. the analytic model
ana() { # the first row of the analytic-vs-compiled table: "analytic compiled" in seconds
  awk '/^# analytic ranking vs compiled/ { on = 1; next } on && /^#  1 / {
    for (i = 1; i <= NF; i++) if ($i == "GiB") g = i
    a = $(g + 2); au = $(g + 3); c = $(g + 4); cu = $(g + 5)
    print a * (au == "ms" ? 1e-3 : au == "us" ? 1e-6 : 1), c * (cu == "ms" ? 1e-3 : cu == "us" ? 1e-6 : 1); exit }' "$1"
}
for o in on off; do
  "$shardc" "${gpt2[@]}" -D offload=$o --search --top 1 >"$tmp/s_$o.txt" 2>&1 ||
    bad "--search with offload=$o failed: $(tail -3 "$tmp/s_$o.txt")"
done
read -r a_on k_on <<<"$(ana "$tmp/s_on.txt")"
read -r a_off k_off <<<"$(ana "$tmp/s_off.txt")"
echo "analytic: offload $a_on s (compiled $k_on), none $a_off s (compiled $k_off)"
[ -n "${a_on:-}" ] && [ -n "${a_off:-}" ] || bad "no analytic rows: $(head -8 "$tmp/s_on.txt")"
awk -v a="$a_on" -v b="$a_off" -v h="$h" 'BEGIN { exit !(a - b >= 0.9 * h) }' ||
  bad "analytic: offload $a_on - none $a_off under 0.9 x the host update $h"
near "$a_on" "$k_on" 0.15 || bad "analytic offload step $a_on not within 15 % of the compiled $k_on"

# 5. bad profiles
printf 'host_bandwidth 1e11\noffload_sync 2\n' >"$tmp/bad.profile"
"$shardc" "${gpt2[@]}" -D offload=on --cost --profile "$tmp/bad.profile" >"$tmp/bad.txt" 2>&1 && bad "offload_sync 2 accepted"
grep -q "bad.profile:2:14: error: profile key 'offload_sync' needs 0 or 1" "$tmp/bad.txt" ||
  bad "offload_sync 2: $(head -2 "$tmp/bad.txt")"
printf 'host_link_latency -1\n' >"$tmp/bad2.profile"
"$shardc" "${gpt2[@]}" -D offload=on --cost --profile "$tmp/bad2.profile" >"$tmp/bad2.txt" 2>&1 && bad "latency -1 accepted"
grep -q "bad2.profile:1:19: error: profile key 'host_link_latency'" "$tmp/bad2.txt" || bad "latency -1: $(head -2 "$tmp/bad2.txt")"

[ "$fail" = 0 ] && echo "offload_cost: ok"
exit "$fail"
