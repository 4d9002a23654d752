/* codegen/cuda_kernels_int.h — what the files of the CUDA kernel emitters share (cuda_kernels.c: the
 * kernel text and its launch, the elementwise, data-movement, norm, embedding, reduction and optimizer
 * families; cuda_kernels_attn.c: attention; cuda_kernels_ce.c: cross-entropy). Not for other users:
 * codegen/cuda_kernels.h is the interface. */
#ifndef SHARDC_CUDA_KERNELS_INT_H
#define SHARDC_CUDA_KERNELS_INT_H

#include <stdint.h>

#include "cuda_kernels.h"

struct CuK {
  Arena *a;
  char *src;    /* the source so far */
  size_t len;   /* bytes in src */
  size_t cap;   /* bytes allocated for src */
  int n;        /* kernels emitted */
  int64_t ws;   /* bytes of scratch needed at WS (flags included) */
  const char **bodies; /* [n] each kernel's text after its name: a repeat reuses the kernel */
  int capbodies;
  size_t kstart, bstart; /* the kernel being written: where it starts, where its name ends */
  const CuFlashCfg *flash; /* tensor-core attention tiles (NULL: cuk_flash_cfg) */
  const CuWgTile *wg;      /* the wgmma forward's tiles (cuk_set_flash_wg; NULL: off) */
  const CuWgBwdTile *wgkv, *wgq; /* the wgmma backward's tiles (cuk_set_flash_wg_bwd; NULL: off) */
  const CuWgBwdTile *wgf;        /* the one-kernel wgmma backward's tiles (cuk_set_flash_wg_bwd1; NULL: off) */
  int minb;                /* the next kernel's minimum blocks per SM (__launch_bounds__), 0: none */
  int variant;             /* CUK_VAR_*: the bytes-bound kernels' variant */
  int attn_tune;           /* cuk_set_attn_tune: the tensor-core attentions' other tile candidates too */
  int guard;               /* the kernel being written is such a candidate: inside #ifdef SK_ATTN_TUNE */
  int last;                /* the kernel the last ck_end launches (a repeat: the earlier one) */
  char *guarded;           /* [capbodies]: kernel i is a guarded candidate (never reused by an unguarded one) */
  int64_t grid_y_max;      /* the launches' grid y of the kernels that loop over theirs (65535, CUDA's limit; a test's
                              smaller one: cuk_set_grid_y_max) */
};

/* Kernel arguments: the pointers first (char *), then the int64 host values (long long); at most CUK_MAX_*_ARGS. */
typedef struct {
  int np, nl;
  const char *p[CUK_MAX_PTR_ARGS]; /* host C expressions of device addresses */
  const char *l[CUK_MAX_INT_ARGS]; /* host C int64 expressions */
} Args;

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* appends to the program's kernel source */
__attribute__((format(printf, 2, 3))) void ck_out(CuK *k, const char *fmt, ...);
/* the kernels' scratch at WS must hold bytes (beyond the flags) */
void ck_need_ws(CuK *k, int64_t bytes);
/* the kernel library's storage type of a dtype */
const char *ck_ctype(DType dt);
/* a float literal */
const char *ck_fl(CuK *k, double v);
/* Starts kernel N: its signature (parameters p0.., l0..); the body follows, ended by ck_end. Returns N. */
int ck_begin(CuK *k, const Args *g, int nt);
/* Ends kernel id (a repeat of an earlier kernel launches that one) and returns its launch statement;
 * smem: bytes of dynamic shared memory. */
const char *ck_end_smem(CuK *k, int id, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by, int bz,
                        int64_t smem);
const char *ck_end(CuK *k, int id, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by, int bz);
/* a one-statement kernel */
const char *ck_simple_smem(CuK *k, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by, int64_t smem,
                           const char *body);
const char *ck_simple(CuK *k, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by, const char *body);
/* two launch statements on one line */
const char *ck_cat(CuK *k, const char *a, const char *b);
/* the address of the kernels' scratch at off */
const char *ck_ws_at(CuK *k, int64_t off);
/* the arrival counters of one-launch reductions (int *; the kernel may use n <= CUK_MAX_COUNTERS of them) */
const char *ck_counters(CuK *k, int n);
/* A colsum (shardk.cuh) of x [rows, cols] (rows ld apart) over P chunks of rows into y [P, cols] (P 1: y [cols]),
 * times scale: its call (ry row slices a block; yarg, xarg the kernel's expressions) and a launch of it (ry 8 for many
 * rows or several chunks, else 32). */
const char *ck_colsum_call(CuK *k, DType ydt, DType xdt, int64_t rows, int64_t cols, int64_t ld, int64_t P, int ry,
                           double scale, const char *yarg, const char *xarg);
const char *ck_colsum_launch(CuK *k, const char *y, DType ydt, const char *x, DType xdt, int64_t rows, int64_t cols,
                             int64_t ld, int64_t P, double scale);
/* the CUK_VAR_ONE forms (codegen/cuda_kernels_bytes.c): a launch statement, or NULL where the shape does not suit */
const char *ck_colsum_flat(CuK *k, const char *y, DType ydt, const char *x, DType xdt, int64_t rows, int64_t cols,
                           int64_t ld, double scale);
const char *ck_embed_vec(CuK *k, const char *y, DType ydt, const char *table, DType tdt, const char *idx, int64_t n,
                         int64_t d, int64_t V, const char *row0);
const char *ck_transpose_vec(CuK *k, const char *y, const char *x, DType dt, int64_t batch, int64_t rows, int64_t cols);
const char *ck_embed_bwd_own(CuK *k, const char *dtable, DType tdt, const char *idx, const char *dy, DType dydt,
                             int64_t n, int64_t d, int64_t V, const char *row0);
/* grid of a grid-stride loop over n elements with 256 threads */
int64_t ck_stride_grid(int64_t n);
/* threads of a row kernel over d columns: a multiple of 32 with about 4 columns each */
int ck_row_threads(int64_t d);

#endif
