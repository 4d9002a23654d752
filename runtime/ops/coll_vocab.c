/* runtime/ops/coll_vocab.c — vocab-parallel embedding and cross-entropy (coll.h): each rank's part
 * over its block of the vocabulary (ids shifted by the block's start, columns of its block); the
 * program's collectives combine the parts (passes/shard_tp.c: ce_max, ce_sums, ce_loss, ce_grad). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "kernels/kernels.h"

size_t rt_embed_shard_ws_bytes(int64_t n) { return (size_t)n * sizeof(int32_t); }

/* ids - c V into ws (after checking every id against the logical table). */
static const int32_t *local_ids(RtCtx *ctx, int axis, const int32_t *idx, int64_t n, int64_t V, void *ws) {
  int deg = axis >= 0 ? rt_ctx_degree(ctx, axis) : 1;
  int64_t lo = axis >= 0 ? (int64_t)rt_ctx_coord(ctx, axis) * V : 0, total = V * deg;
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= total) {
      fprintf(stderr, "shardrt: embed: token id %d at position %lld is outside the table of %lld rows\n", idx[i],
              (long long)i, (long long)total);
      exit(1);
    }
  if (lo == 0) return idx;
  int32_t *ids = ws;
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(idx[i] - lo); /* outside [0, V): a zero row / skipped */
  return ids;
}

void rt_embed_shard_f32(RtCtx *ctx, int axis, float *y, const float *table, const int32_t *idx, int64_t n, int64_t d,
                        int64_t V, void *ws) {
  rt_embed_fwd(n, V, d, table, local_ids(ctx, axis, idx, n, V, ws), y);
}

void rt_embed_bwd_shard_f32(RtCtx *ctx, int axis, float *dtable, const int32_t *idx, const float *dy, int64_t n,
                            int64_t d, int64_t V, void *ws) {
  rt_embed_bwd(n, V, d, local_ids(ctx, axis, idx, n, V, ws), dy, 0, dtable);
}

/* This rank's first logical column and its count of valid columns. */
static void vocab_cols(RtCtx *ctx, int axis, int64_t V, int64_t len, int64_t *lo, int64_t *nv) {
  int deg = axis >= 0 ? rt_ctx_degree(ctx, axis) : 1;
  *lo = axis >= 0 ? (int64_t)rt_ctx_coord(ctx, axis) * V : 0;
  int64_t L = len > 0 ? len : V * deg;
  *nv = L - *lo < 0 ? 0 : L - *lo > V ? V : L - *lo;
}

void rt_ce_max_f32(RtCtx *ctx, int axis, float *m, const float *logits, int64_t rows, int64_t V, int64_t len) {
  int64_t lo, nv;
  vocab_cols(ctx, axis, V, len, &lo, &nv);
  rt_ce_max(rows, V, nv, logits, m);
}

void rt_ce_sums_f32(RtCtx *ctx, int axis, float *st, const float *logits, const int32_t *targets, const float *m,
                    int64_t rows, int64_t V, int64_t len) {
  int64_t lo, nv;
  vocab_cols(ctx, axis, V, len, &lo, &nv);
  rt_ce_sums(rows, V, nv, lo, logits, targets, m, st);
}

void rt_ce_loss_f32(float *out, const float *st, const float *m, const int32_t *targets, int64_t rows, int64_t len) {
  int64_t bad = rt_ce_loss(rows, len, st, m, targets, out);
  if (bad >= 0) {
    fprintf(stderr, "shardrt: cross-entropy: target %d at position %lld is outside the vocabulary of %lld\n",
            targets[bad], (long long)bad, (long long)len);
    exit(1);
  }
}

void rt_ce_grad_f32(RtCtx *ctx, int axis, float *dlogits, const float *logits, const int32_t *targets, const float *m,
                    const float *st, const float *scale, int64_t rows, int64_t V, int64_t len) {
  int64_t lo, nv;
  vocab_cols(ctx, axis, V, len, &lo, &nv);
  rt_ce_grad(rows, V, nv, lo, logits, targets, m, st, scale[0], dlogits);
}
