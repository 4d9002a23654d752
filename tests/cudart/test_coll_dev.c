/* tests/cudart/test_coll_dev.c — runtime/ops/coll.h on device memory (runtime/cuda/coll_dev.c),
 * under mpirun -np 2, on the emulated device.
 *
 * Each case runs a collective twice on identical inputs: with the device registered (its
 * buffers inside the device allocation, copies and the packing of non-contiguous chunks done
 * by device block copies) and on host buffers with no device (the CPU target's path, which
 * tests/codegen checks against the interpreter). The outputs must be byte-identical; gathers
 * and slices are also checked element by element against the layout of rt_block_index.
 * Cases: all-gather, reduce-scatter and shard slice along an inner axis (outer 5) and an outer
 * one (outer 1), plain and in 3 blocks (a fused QKV layout), f32 and bf16; all-reduce, the
 * asynchronous bucket all-reduce (start / progress / wait) and broadcast. Values are small
 * integers, so sums are exact in both dtypes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "cu_internal.h"
#include "device.h"
#include "dtype.h"
#include "mesh.h"
#include "../check.h" /* CHECK_RANK */

static int failures, me;

static char *M;     /* the device allocation (host memory on the emulated device) */
static size_t used; /* bytes of it handed out */

static void *dev_alloc(size_t bytes) {
  void *p = M + used;
  used += (bytes + 255) / 256 * 256;
  return p;
}

/* element i of a buffer of dtype dt = v (small integers: exact in bf16) */
static void put(void *b, int dt, int64_t i, float v) {
  if (dt == RT_F32)
    ((float *)b)[i] = v;
  else
    ((uint16_t *)b)[i] = rt_f32_to_bf16(v);
}
static float get(const void *b, int dt, int64_t i) {
  return dt == RT_F32 ? ((const float *)b)[i] : rt_bf16_to_f32(((const uint16_t *)b)[i]);
}

static void fill(void *b, int dt, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) put(b, dt, i, (float)((i * 7 + seed * 13) % 23 - 11));
}

/* Runs op on device buffers (inputs `in` copied in) and on host buffers; compares the outputs. */
typedef void (*Op)(RtCtx *ctx, void *y, void *x, void *ws);

static void both(RtCtx *ctx, const char *what, Op op, const void *in, size_t xbytes, size_t ybytes, size_t wsbytes,
                 void *host_y) {
  char *dx = dev_alloc(xbytes), *dy = dev_alloc(ybytes), *dws = dev_alloc(wsbytes + 1);
  memcpy(dx, in, xbytes);
  memset(dy, 0x55, ybytes);
  rt_coll_set_device(&rt_cu_coll_device);
  op(ctx, dy, dx, dws);
  rt_cuda_device.sync(ctx);
  rt_coll_set_device(NULL);
  char *hx = malloc(xbytes + 1), *hws = malloc(wsbytes + 1);
  if (!hx || !hws) abort();
  memcpy(hx, in, xbytes);
  memset(host_y, 0x55, ybytes);
  op(ctx, host_y, hx, hws);
  CHECK_RANK(me, memcmp(dy, host_y, ybytes) == 0, "%s: the device result differs from the host path", what);
  free(hx);
  free(hws);
  used = 0;
}

static int64_t g_outer, g_nl, g_inner;
static int g_blocks, g_dt;

static void op_gather(RtCtx *ctx, void *y, void *x, void *ws) {
  rt_coll_all_gather(ctx, RT_AX_TP, y, x, g_outer, g_nl, g_inner, g_blocks, g_dt, ws);
}
static void op_scatter(RtCtx *ctx, void *y, void *x, void *ws) {
  rt_coll_reduce_scatter(ctx, RT_AX_TP, y, x, g_outer, g_nl, g_inner, g_blocks, g_dt, ws);
}
static void op_slice(RtCtx *ctx, void *y, void *x, void *ws) {
  (void)ws;
  rt_coll_shard_slice(ctx, RT_AX_TP, y, x, g_outer, g_nl, g_inner, g_blocks, (int)rt_dtype_size((RtDType)g_dt));
}
static void op_all_reduce(RtCtx *ctx, void *y, void *x, void *ws) {
  (void)ws;
  rt_coll_all_reduce(ctx, RT_AX_TP, y, x, g_outer * g_nl * g_inner, g_dt, 0);
}
static void op_bucket(RtCtx *ctx, void *y, void *x, void *ws) {
  (void)ws;
  int64_t n = g_outer * g_nl * g_inner, es = (int64_t)rt_dtype_size((RtDType)g_dt), h = n / 3;
  void *const ys[] = {y, (char *)y + h * es};
  const void *const xs[] = {x, (char *)x + h * es};
  const int64_t ns[] = {h, n - h};
  rt_coll_all_reduce_start(ctx, RT_AX_TP, 7, ys, xs, ns, 2, g_dt, 1 /* avg */);
  rt_coll_progress(ctx);
  rt_coll_wait(ctx, 7);
}
static void op_broadcast(RtCtx *ctx, void *y, void *x, void *ws) {
  (void)ws;
  rt_coll_broadcast(ctx, RT_AX_TP, y, x, g_outer * g_nl * g_inner, g_dt, 1);
}

/* One case of the g_* shape: every op on the device and the host, results checked. */
static void one_case(RtCtx *ctx, int deg) {
      {
        size_t es = rt_dtype_size((RtDType)g_dt), local = (size_t)(g_outer * g_nl * g_inner) * es;
        size_t whole = local * (size_t)deg, ws = (size_t)rt_pack_bytes(g_outer, g_blocks, (int64_t)whole);
        char what[96];
        void *in = malloc(whole), *hy = malloc(whole);
        if (!in || !hy) abort();
        int64_t n = g_nl * deg;
        /* all-gather: member c's x lands at rt_block_index */
        fill(in, g_dt, g_outer * g_nl * g_inner, 100 + ctx->tp_rank);
        snprintf(what, sizeof what, "all_gather %s outer %lld blocks %d", rt_dtype_name((RtDType)g_dt),
                 (long long)g_outer, g_blocks);
        both(ctx, what, op_gather, in, local, whole, ws, hy);
        for (int m = 0; m < deg; m++) {
          char *xm = malloc(local);
          if (!xm) abort();
          fill(xm, g_dt, g_outer * g_nl * g_inner, 100 + m);
          int bad = 0;
          for (int64_t o = 0; o < g_outer; o++)
            for (int64_t l = 0; l < g_nl; l++)
              for (int64_t i = 0; i < g_inner; i++) {
                int64_t gl = rt_block_index(g_nl, g_blocks, deg, m, l);
                bad += get(hy, g_dt, (o * n + gl) * g_inner + i) != get(xm, g_dt, (o * g_nl + l) * g_inner + i);
              }
          CHECK_RANK(me, bad == 0, "%s: %d elements of member %d misplaced", what, bad, m);
          free(xm);
        }
        /* reduce-scatter of the logical buffer; shard slice of it */
        fill(in, g_dt, g_outer * n * g_inner, 200 + ctx->tp_rank);
        snprintf(what, sizeof what, "reduce_scatter %s outer %lld blocks %d", rt_dtype_name((RtDType)g_dt),
                 (long long)g_outer, g_blocks);
        both(ctx, what, op_scatter, in, whole, local, ws, hy);
        snprintf(what, sizeof what, "shard_slice %s outer %lld blocks %d", rt_dtype_name((RtDType)g_dt),
                 (long long)g_outer, g_blocks);
        both(ctx, what, op_slice, in, whole, local, 0, hy);
        int bad = 0;
        for (int64_t o = 0; o < g_outer; o++)
          for (int64_t l = 0; l < g_nl; l++)
            for (int64_t i = 0; i < g_inner; i++) {
              int64_t gl = rt_block_index(g_nl, g_blocks, deg, ctx->tp_rank, l);
              bad += get(hy, g_dt, (o * g_nl + l) * g_inner + i) != get(in, g_dt, (o * n + gl) * g_inner + i);
            }
        CHECK_RANK(me, bad == 0, "%s: %d elements misplaced", what, bad);
        /* whole-buffer ops */
        snprintf(what, sizeof what, "all_reduce %s", rt_dtype_name((RtDType)g_dt));
        both(ctx, what, op_all_reduce, in, local, local, 0, hy);
        snprintf(what, sizeof what, "bucket all_reduce (async) %s", rt_dtype_name((RtDType)g_dt));
        both(ctx, what, op_bucket, in, local, local, 0, hy);
        snprintf(what, sizeof what, "broadcast %s", rt_dtype_name((RtDType)g_dt));
        both(ctx, what, op_broadcast, in, local, local, 0, hy);
        free(in);
        free(hy);
      }
}

static void cases(RtCtx *ctx, int deg) {
  const int dts[] = {RT_F32, RT_BF16};
  const int64_t outers[] = {1, 5};
  const int blockss[] = {0, 3};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 2; c++) {
        g_dt = dts[a], g_outer = outers[b], g_blocks = blockss[c], g_nl = 6, g_inner = 7;
        one_case(ctx, deg);
      }
  /* a gather / scatter larger than RT_PACK_CHUNK: packed in chunks of whole rows (9 rows of 8 MiB
   * on 2 members: chunks of 8 rows and 1), through a scratch of 64 MiB, not the tensor's 72 */
  g_dt = RT_F32, g_outer = 9, g_nl = 4, g_inner = (1 << 19) / deg, g_blocks = 0;
  int64_t whole = g_outer * g_nl * g_inner * deg * 4, rows = rt_pack_rows(g_outer, g_blocks, whole);
  CHECK_RANK(me,
             rows > 1 && rows < g_outer && rt_pack_bytes(g_outer, g_blocks, whole) == rows * (whole / g_outer) &&
                 rt_pack_bytes(g_outer, g_blocks, whole) <= RT_PACK_CHUNK,
             "chunked packing: %lld rows of %lld, %lld bytes of scratch", (long long)rows, (long long)g_outer,
             (long long)rt_pack_bytes(g_outer, g_blocks, whole));
  one_case(ctx, deg);
}

int main(int argc, char **argv) {
  RtBoot boot;
  if (!rt_boot_init(&boot, &argc, &argv)) return 1;
  me = boot.rank;
  if (boot.world < 2) {
    fprintf(stderr, "test_coll_dev: run under mpirun -np 2 or more\n");
    return 1;
  }
  RtComm *c = rt_comm_init(&boot, NULL);
  RtCtx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.rank = boot.rank, ctx.world = boot.world, ctx.threads = 1;
  ctx.dp_size = ctx.pp_size = ctx.cp_size = 1;
  ctx.tp_rank = boot.rank, ctx.tp_size = boot.world;
  ctx.comm = c;
  ctx.groups[1u << RT_AX_TP] = rt_group_world(c);
  setenv("SHARDRT_DEVICE", "emu", 1);
  RtProgram p;
  memset(&p, 0, sizeof p);
  int64_t bytes = (int64_t)200 << 20; /* the chunked case: x 36, y 72 and the scratch 64 MiB */
  p.mem_bytes = bytes;
  if (rt_cuda_device.open(&p, &ctx, bytes, &M) != 0) return 1;
  cases(&ctx, boot.world);
  rt_cuda_device.close(&ctx);
  rt_comm_free(c);
  rt_boot_free(&boot);
  if (me == 0) printf("test_coll_dev: %s (%d ranks)\n", failures ? "FAILED" : "ok", boot.world);
  return failures ? 1 : 0;
}
