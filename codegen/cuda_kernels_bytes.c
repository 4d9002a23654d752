/* codegen/cuda_kernels_bytes.c — the CUK_VAR_ONE variant of the bytes-bound kernels that were below 60 % of their
 * bytes floor on the H100 (issue 17): the embedding backward in one launch without a sort, column sums with one level
 * of arrivals, the embedding forward and the transpose in 16-byte vectors (runtime/cuda/kernels/shardk_bytes.cuh).
 * Built and proven on the emulated device, not yet timed on a GPU: the compiler's default does not emit them; the
 * kernel benchmark times them beside the default (SHARDK_BYTES_SWEEP, docs/performance.md). Each returns NULL
 * where its shape does not suit it (the caller emits the default). */
#include <string.h>

#include "cuda_kernels_int.h"

/* y [cols] = scale * the column sums of x [rows, cols] (rows ld apart; cols, ld multiples of 16 / sizeof(x)): about 2
 * blocks an SM of an H100 (264 blocks over the column tiles), at most 128 chunks and at most 16 rows a thread's loads at
 * once. [8192, 768] bf16: 3 tiles x 88 chunks of 94 rows, 12 rows a thread in flight. */
const char *ck_colsum_flat(CuK *k, const char *y, DType ydt, const char *x, DType xdt, int64_t rows, int64_t cols,
                           int64_t ld, double scale) {
  const int vw = xdt == DT_BF16 ? 8 : 4, ry = 8, cx = 256 / ry;
  const int64_t tiles = cdiv(cols / vw, cx), m = (int64_t)cx * vw;
  if (tiles > CUK_MAX_COUNTERS || rows < 2 * ry) return NULL;
  int64_t P = imin(128, imax(cdiv(rows, ry * 16), cdiv(264, tiles)));
  P = imin(P, cdiv(rows, ry));
  const int64_t ch = cdiv(rows, P);
  P = cdiv(rows, ch);
  const int u = (int)imin(16, cdiv(ch, ry));
  ck_need_ws(k, tiles * P * m * 4);
  Args g = {.np = 4, .p = {y, x, ck_ws_at(k, 0), ck_counters(k, (int)tiles)}};
  k->minb = 2; /* 2 blocks an SM: at most 128 registers (the partials' 12 rows of loads at once) */
  const char *s = ck_simple(k, &g, tiles, P, 1, cx, ry,
                   arena_printf(k->a,
                                "sk::colsum_flat<%s, %s, %lldLL, %lldLL, %lldLL, %d, %d, %d>((%s *)p0, (const %s *)p1, %s, "
                                "(float *)p2, (int *)p3);",
                                ck_ctype(ydt), ck_ctype(xdt), (long long)rows, (long long)cols, (long long)ld, (int)P, ry,
                                u, ck_ctype(ydt), ck_ctype(xdt), ck_fl(k, scale)));
  k->minb = 0;
  return s;
}

/* embedding forward, d a multiple of 8: a warp per row, 16 rows a block */
const char *ck_embed_vec(CuK *k, const char *y, DType ydt, const char *table, DType tdt, const char *idx, int64_t n,
                         int64_t d, int64_t V, const char *row0) {
  if (d % 8 || (ydt != DT_BF16 && ydt != DT_F32) || (tdt != DT_BF16 && tdt != DT_F32)) return NULL;
  Args g = {.np = 4, .nl = 1, .p = {y, table, idx, "WS"}, .l = {row0}};
  return ck_simple(k, &g, cdiv(n, 16), 1, 1, 256, 1,
                   arena_printf(k->a,
                                "sk::embed_vec<%s, %s, %lldLL, %lldLL, %lldLL, %s>((%s *)p0, (const %s *)p1, (const int *)p2, "
                                "l0, (int *)p3);",
                                ck_ctype(ydt), ck_ctype(tdt), (long long)n, (long long)d, (long long)V,
                                strcmp(row0, "0") == 0 ? "true" : "false", ck_ctype(ydt), ck_ctype(tdt)));
}

/* transpose of [batch, rows, cols] with rows and cols multiples of 16 / sizeof(element): 64 x 64 tiles */
const char *ck_transpose_vec(CuK *k, const char *y, const char *x, DType dt, int64_t batch, int64_t rows, int64_t cols) {
  const int vw = dt == DT_BF16 ? 8 : 4;
  if ((dt != DT_BF16 && dt != DT_F32) || rows % vw || cols % vw) return NULL;
  Args g = {.np = 2, .p = {y, x}};
  const char *t = ck_ctype(dt);
  return ck_simple(k, &g, cdiv(cols, 64), imin(cdiv(rows, 64), k->grid_y_max), imin(batch, 65535), 256, 1,
                   arena_printf(k->a, "sk::transpose_vec<%s, %lldLL, %lldLL, %lldLL>((%s *)p0, (const %s *)p1);", t,
                                (long long)batch, (long long)rows, (long long)cols, t, t));
}

/* embedding backward, d a multiple of 8: a block per R table rows (about 400 blocks: 3 an SM of an H100, every block
 * resident at once; 32 to 256 rows), its hits kept in shared memory up to CAP = half the ids (at most 8192; 4096 past
 * 65536 ids, whose indices take 32 bits; a block past it takes the slow path). V 50304: 393 blocks of 128 rows. */
const char *ck_embed_bwd_own(CuK *k, const char *dtable, DType tdt, const char *idx, const char *dy, DType dydt,
                             int64_t n, int64_t d, int64_t V, const char *row0) {
  if (d % 8 || (tdt != DT_BF16 && tdt != DT_F32) || (dydt != DT_BF16 && dydt != DT_F32)) return NULL;
  const int64_t R = imin(256, imax(32, cdiv(cdiv(V, 400), 32) * 32));
  const int64_t cap = imin(n <= 65536 ? 8192 : 4096, imax(32, cdiv(n / 2, 32) * 32)); /* 5 (9) bytes a hit: 41 KB */
  Args g = {.np = 3, .nl = 1, .p = {dtable, idx, dy}, .l = {row0}};
  k->minb = 3; /* 3 blocks an SM (every block of V 50304 resident at once): ptxas -v sm_90a 54 registers, 0 spilled
                * (left to itself, 48 and 4 bytes spilled at 16384 ids) */
  const char *s = ck_simple(k, &g, cdiv(V, R), 1, 1, 256, 1,
                   arena_printf(k->a,
                                "sk::embed_bwd_own<%s, %s, %lldLL, %lldLL, %lldLL, %d, %d>((%s *)p0, (const int *)p1, "
                                "(const %s *)p2, l0);",
                                ck_ctype(tdt), ck_ctype(dydt), (long long)n, (long long)d, (long long)V, (int)R, (int)cap,
                                ck_ctype(tdt), ck_ctype(dydt)));
  k->minb = 0;
  return s;
}
