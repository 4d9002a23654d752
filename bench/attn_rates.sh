#!/usr/bin/env bash
# bench/attn_rates.sh — the CPU attention's rates at the shapes the cost model meets, forward and
# backward, against sgemm 1024^3, one thread: ROUNDS runs of bench_attn over every shape (the shapes
# side by side within a round), the load average before each, and per shape the median over the
# rounds of each round's best of REPS (docs/performance.md "The CPU cost model's attention").
#   bench/attn_rates.sh [BUILD_DIR] [ROUNDS] [REPS] [B,S,H,KV,hd ...]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
rounds=${2:-5}
reps=${3:-3}
shift $(($# > 3 ? 3 : $#))
# tiny (hd 16) at seq 64, 128, 256 and 512; Llama-shaped (d 256 / 512, 4 heads, 2 kv) at hd 64 and
# 128, seq 256 and 1024; GPT-2-like (12 heads of 64) at seq 1024
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(8,64,4,4,16 8,128,4,4,16 8,256,4,4,16 4,512,4,4,16 2,256,4,2,64 2,1024,4,2,64
  2,256,4,2,128 2,1024,4,2,128 4,1024,12,12,64)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for r in $(seq "$rounds"); do
  echo "# round $r, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$build/bench/bench_attn" 1 "$reps" "${shapes[@]}" | tee -a "$tmp"
done
echo "# medians over $rounds rounds (GFLOP/s; forward 2 B H S^2 hd, backward 2.5 x that)"
# the fit: each shape's time over the scores the kernel computes (causal: whole 64 x 64 blocks on the
# diagonal, B H S (S + 64) / 2), a line in hd, least squares weighted by relative error: forward
# (4 hd + a_f) / R_f per score, backward (10 hd + a_b) / R_b (passes/cost.c's attention model)
awk -v blk=64 '
  function med(s,   a, n, t, i, j) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function num(x) { gsub(/[^0-9]/, "", x); return x + 0 }
  function line(x, y, n,   i, w, sw, sx, sy, sxx, sxy) { sw = sx = sy = sxx = sxy = 0
    for (i = 1; i <= n; i++) { w = 1 / (y[i] * y[i]); sw += w; sx += w * x[i]; sy += w * y[i]; sxx += w * x[i] * x[i]; sxy += w * x[i] * y[i] }
    c1 = (sw * sxy - sx * sy) / (sw * sxx - sx * sx); c0 = (sy - c1 * sx) / sw }
  /^sgemm/ { sg = sg " " $(NF - 1); next }
  /^B[0-9]/ { k = $1 " " $2 " " $3 " " $4 " " $5; if (!(k in f)) order[++n] = k
    f[k] = f[k] " " $8; b[k] = b[k] " " $10; fm[k] = fm[k] " " $7; bm[k] = bm[k] " " $9 }
  END { ms = med(sg); printf "sgemm 1024^3: %.1f GFLOP/s (range%s)\n", ms, sg
    printf "%-26s %9s %9s %9s %9s %8s %8s %9s\n", "shape", "fwd ms", "GFLOP/s", "bwd ms", "GFLOP/s", "fwd/sg", "bwd/sg", "bwd/fwd"
    for (i = 1; i <= n; i++) { k = order[i]; F = med(f[k]); Bw = med(b[k]); split(k, p, " ")
      S = num(p[2]); sc[i] = num(p[1]) * num(p[3]) * S * (S < (S + blk) / 2 ? S : (S + blk) / 2); hd[i] = num(p[5])
      tf[i] = med(fm[k]) * 1e-3; tb[i] = med(bm[k]) * 1e-3; yf[i] = tf[i] / sc[i]; yb[i] = tb[i] / sc[i]
      printf "%-26s %9.3f %9.2f %9.3f %9.2f %8.3f %8.3f %9.3f\n", k, med(fm[k]), F, med(bm[k]), Bw, F / ms, Bw / ms, Bw / F }
    line(hd, yf, n); rf = 4 / c1; af = c0 * rf; f0 = c0; f1 = c1
    line(hd, yb, n); rb = 10 / c1; ab = c0 * rb
    printf "fit, per computed score: forward (4 hd + %.0f) / %.1f GFLOP/s (%.3f of sgemm), backward (10 hd + %.0f) / %.1f GFLOP/s (%.3f of the forward rate)\n",
      af, rf * 1e-9, rf / (ms * 1e9), ab, rb * 1e-9, rb / rf
    printf "%-26s %9s %9s %8s %9s %9s %8s\n", "shape", "fwd ms", "fit", "error", "bwd ms", "fit", "error"
    for (i = 1; i <= n; i++) { pf = sc[i] * (4 * hd[i] + af) / rf; pb = sc[i] * (10 * hd[i] + ab) / rb
      printf "%-26s %9.3f %9.3f %+7.1f%% %9.3f %9.3f %+7.1f%%\n", order[i], tf[i] * 1e3, pf * 1e3, 100 * (pf - tf[i]) / tf[i],
        tb[i] * 1e3, pb * 1e3, 100 * (pb - tb[i]) / tb[i] } }' "$tmp"
