/* runtime/ops/coll_count.c — the collectives' calls and bytes by group and kind (coll_count.h). */
#include "coll_count.h"

#include <stdio.h>
#include <stdlib.h>

const char *const rt_coll_kind_names[RT_CK_COUNT] = {"all_reduce", "reduce_scatter", "all_gather",
                                                     "broadcast",  "send/recv",      "all_to_all"};

static RtCollCounts counts; /* one program per process */

static int row_of(int axis) {
  if (axis >= 0 && axis < RT_AX_COUNT) return axis;
  if (axis == RT_AX_GROUP(RT_MESH_DP | RT_MESH_CP)) return RT_CC_DPCP;
  unsigned mask = axis > RT_AX_COUNT ? (unsigned)(axis - RT_AX_COUNT) : 0;
  for (int a = 0; a < RT_AX_COUNT; a++)
    if (mask == 1u << a) return a;
  fprintf(stderr, "shardrt: a collective over axis %d, which the counts have no row for (a bug)\n", axis);
  abort();
}

void rt_coll_count(int axis, int kind, int64_t bytes) {
  int r = row_of(axis);
  counts.count[r][kind]++;
  counts.bytes[r][kind] += bytes;
}

void rt_coll_counts(RtCollCounts *out) { *out = counts; }

unsigned rt_coll_row_mask(int row) { return row == RT_CC_DPCP ? RT_MESH_DP | RT_MESH_CP : 1u << row; }
