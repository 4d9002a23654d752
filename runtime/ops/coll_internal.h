/* runtime/ops/coll_internal.h — what coll.c and coll_pack.c share (not part of coll.h's API). */
#ifndef SHARDRT_COLL_INTERNAL_H
#define SHARDRT_COLL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "coll.h"

/* The device the collectives run on (rt_coll_set_device); NULL: host memory. */
const RtCollDevice *rt_coll_device(void);

/* members[c][o, l, :] <-> logical[o, rt_block_index(nl, blocks, deg, c, l), :] for every member c
 * of deg: pack (to_members) or unpack (from the members' concatenation), on the host or as the
 * device's block copies. */
void rt_coll_permute(RtCtx *ctx, char *members, char *logical, int64_t outer, int64_t nl, int64_t inner, int blocks,
                     int deg, size_t esize, int to_members);

#endif
