/* runtime/ops/coll_pack.c — the collectives' packing: a gather or scatter along an inner tensor
 * axis, or of a blocked (fused) layout, moves member c's chunk between its logical places and a
 * contiguous block of the scratch (on the host, or as the device's block copies); and the local
 * shard of a tensor (rt_coll_shard_slice). */
#include <stddef.h>
#include <string.h>

#include "coll.h"
#include "coll_internal.h"
#include "mesh.h"
#include "train/ctx.h"

/* dst[c][o, l, :] <-> logical[o, rt_block_index(nl, blocks, deg, c, l), :] for every member c:
 * pack (to_members) or unpack (from the members' concatenation). */
static void permute(char *members, char *logical, int64_t outer, int64_t nl, int64_t inner, int blocks, int deg,
                    size_t esize, int to_members) {
  size_t row = (size_t)inner * esize;
  int64_t n = nl * deg;
#pragma omp parallel for collapse(2) schedule(static) if (outer * n * inner > 65536)
  for (int c = 0; c < deg; c++)
    for (int64_t o = 0; o < outer; o++)
      for (int64_t l = 0; l < nl; l++) {
        char *m = members + (((size_t)c * (size_t)outer + (size_t)o) * (size_t)nl + (size_t)l) * row;
        char *g = logical + ((size_t)o * (size_t)n + (size_t)rt_block_index(nl, blocks, deg, c, l)) * row;
        if (to_members)
          memcpy(m, g, row);
        else
          memcpy(g, m, row);
      }
}

/* Member c's chunk as runs of consecutive logical indices: for each run, fn(c, l, at, len) with
 * local indices [l, l + len) at logical [at, at + len). One run per member without blocks, one
 * per block with them. */
static void member_runs(int64_t nl, int blocks, int deg, int c,
                        void (*fn)(void *arg, int c, int64_t l, int64_t at, int64_t len), void *arg) {
  for (int64_t l = 0; l < nl;) {
    int64_t at = rt_block_index(nl, blocks, deg, c, l), len = 1;
    while (l + len < nl && rt_block_index(nl, blocks, deg, c, l + len) == at + len) len++;
    fn(arg, c, l, at, len);
    l += len;
  }
}

typedef struct {
  const RtCollDevice *dev;
  RtCtx *ctx;
  char *members;      /* [deg][outer, nl, inner]; or y of a shard slice ([outer, nl, inner]) */
  char *logical;      /* [outer, nl * deg, inner] */
  int64_t outer, nl, inner;
  int deg, esize;
  int to_members;     /* 1: logical -> members (pack), 0: members -> logical (unpack) */
  int one;            /* 1: members holds one member's chunk (shard slice) */
} DevPermute;

static void dev_run(void *arg, int c, int64_t l, int64_t at, int64_t len) {
  DevPermute *d = arg;
  char *m = d->members + (d->one ? 0 : (size_t)c * (size_t)(d->outer * d->nl * d->inner) * (size_t)d->esize);
  int64_t n = d->nl * d->deg;
  if (d->to_members)
    d->dev->copy_block(d->ctx, m, d->nl, l, d->logical, n, at, d->outer, len, d->inner, d->esize);
  else
    d->dev->copy_block(d->ctx, d->logical, n, at, m, d->nl, l, d->outer, len, d->inner, d->esize);
}

/* permute() on the device: one block copy per run of every member's chunk. */
static void permute_dev(const RtCollDevice *dev, RtCtx *ctx, char *members, char *logical, int64_t outer, int64_t nl, int64_t inner, int blocks,
                        int deg, size_t esize, int to_members) {
  DevPermute d = {dev, ctx, members, logical, outer, nl, inner, deg, (int)esize, to_members, 0};
  for (int c = 0; c < deg; c++) member_runs(nl, blocks, deg, c, dev_run, &d);
}

void rt_coll_permute(RtCtx *ctx, char *members, char *logical, int64_t outer, int64_t nl, int64_t inner, int blocks,
                     int deg, size_t esize, int to_members) {
  const RtCollDevice *dev = rt_coll_device();
  if (dev)
    permute_dev(dev, ctx, members, logical, outer, nl, inner, blocks, deg, esize, to_members);
  else
    permute(members, logical, outer, nl, inner, blocks, deg, esize, to_members);
}

void rt_coll_shard_slice(RtCtx *ctx, int axis, void *y, const void *x, int64_t outer, int64_t nl, int64_t inner,
                         int blocks, int esize) {
  int deg = rt_ctx_degree(ctx, axis), c = rt_ctx_coord(ctx, axis);
  const RtCollDevice *dev = rt_coll_device();
  if (dev) {
    DevPermute d = {dev, ctx, y, (char *)x, outer, nl, inner, deg, esize, 1, 1};
    member_runs(nl, blocks, deg, c, dev_run, &d);
    return;
  }
  size_t row = (size_t)inner * (size_t)esize;
  int64_t n = nl * deg;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t l = 0; l < nl; l++)
      memmove((char *)y + ((size_t)o * (size_t)nl + (size_t)l) * row,
              (const char *)x + ((size_t)o * (size_t)n + (size_t)rt_block_index(nl, blocks, deg, c, l)) * row, row);
}
