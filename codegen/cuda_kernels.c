/* codegen/cuda_kernels.c — the CUDA kernels of a program: one emitter per kernel family
 * (codegen/cuda_kernels.h). Each kernel kN is an `extern "C" __global__` wrapper over a template
 * of runtime/cuda/kernels/shardk.cuh with its shapes baked in, followed by SK_EMU_ENTRY (its
 * emulator entry kN_emu under -DSK_EMU, nothing otherwise). Kernel parameters are `char *`
 * device addresses and `long long` host values, in that order of the call; the launch
 * statement passes each through a compound literal: (void *[]){&(char *){e}, ...}.
 * A family that needs two passes (deterministic reductions) emits two kernels and returns
 * both launches on one line. */
#include "cuda_kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_kernels_int.h"
#include "diag.h"



CuK *cuk_new(Arena *a) {
  CuK *k = ARENA_NEW(a, CuK);
  k->a = a;
  k->cap = 4096;
  k->src = arena_alloc(a, k->cap);
  k->ws = CUK_WS_FLAGS;
  k->grid_y_max = 65535;
  const char *head = "#include \"shardk.cuh\"\n";
  k->len = strlen(head);
  memcpy(k->src, head, k->len + 1);
  return k;
}

const char *cuk_source(const CuK *k) { return k->src; }

void cuk_set_grid_y_max(CuK *k, int64_t n) { k->grid_y_max = n < 1 ? 1 : n > 65535 ? 65535 : n; }
void cuk_set_flash_cfg(CuK *k, const CuFlashCfg *c) {
  CuFlashCfg *f = c ? ARENA_NEW(k->a, CuFlashCfg) : NULL;
  if (c) *f = *c;
  k->flash = f;
}
void cuk_set_flash_wg(CuK *k, const CuWgTile *t) {
  CuWgTile *w = t ? ARENA_NEW(k->a, CuWgTile) : NULL;
  if (t) *w = *t;
  k->wg = w;
}
static const CuWgBwdTile *wgb_copy(CuK *k, const CuWgBwdTile *t) {
  CuWgBwdTile *w = t ? ARENA_NEW(k->a, CuWgBwdTile) : NULL;
  if (t) *w = *t;
  return w;
}
void cuk_set_flash_wg_bwd(CuK *k, const CuWgBwdTile *kv, const CuWgBwdTile *q) {
  k->wgkv = wgb_copy(k, kv);
  k->wgq = wgb_copy(k, q);
}
void cuk_set_flash_wg_bwd1(CuK *k, const CuWgBwdTile *t) { k->wgf = wgb_copy(k, t); }
void cuk_set_attn_tune(CuK *k, int on) { k->attn_tune = on; }
int cuk_count(const CuK *k) { return k->n; }
int64_t cuk_workspace(const CuK *k) { return k->ws; }

__attribute__((format(printf, 2, 3))) void ck_out(CuK *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) die("cuda_kernels: bad format");
  if (k->len + (size_t)n + 1 > k->cap) {
    size_t cap = k->cap * 2;
    while (cap < k->len + (size_t)n + 1) cap *= 2;
    char *s = arena_alloc(k->a, cap);
    memcpy(s, k->src, k->len + 1);
    k->src = s;
    k->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(k->src + k->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  k->len += (size_t)n;
}

void ck_need_ws(CuK *k, int64_t bytes) {
  if (CUK_WS_FLAGS + bytes > k->ws) k->ws = CUK_WS_FLAGS + bytes;
}

/* the kernel library's storage type of a dtype */
const char *ck_ctype(DType dt) {
  switch (dt) {
  case DT_F32: return "float";
  case DT_BF16: return "sk::bf16";
  case DT_I32: return "int";
  default: die("cuda_kernels: dtype %s has no CUDA storage type", ir_dtype_name(dt));
  }
}

const char *ck_fl(CuK *k, double v) { return arena_printf(k->a, "%.9ef", v); }



/* Starts kernel N: its signature; the body follows (ending with end_kernel). Parameters are
 * named p0.. and l0... Returns N. */
int ck_begin(CuK *k, const Args *g, int nt) {
  if (g->np < 0 || g->np > CUK_MAX_PTR_ARGS || g->nl < 0 || g->nl > CUK_MAX_INT_ARGS)
    die("cuda_kernels: a kernel of %d pointer and %d int64 arguments", g->np, g->nl);
  int id = k->n++;
  k->kstart = k->len;
  if (k->guard) ck_out(k, "\n#ifdef SK_ATTN_TUNE");
  if (k->minb > 0) ck_out(k, "\nextern \"C\" __global__ void __launch_bounds__(%d, %d) k%d", nt, k->minb, id);
  else ck_out(k, "\nextern \"C\" __global__ void __launch_bounds__(%d) k%d", nt, id);
  k->bstart = k->len;
  ck_out(k, "(");
  for (int i = 0; i < g->np; i++) ck_out(k, "%schar *p%d", i ? ", " : "", i);
  for (int i = 0; i < g->nl; i++) ck_out(k, "%slong long l%d", g->np + i ? ", " : "", i);
  ck_out(k, ") {\n");
  return id;
}

/* Ends kernel id: its emulator entry; returns its launch statement (smem: bytes of dynamic shared memory). */
const char *ck_end_smem(CuK *k, int id, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by,
                                   int bz, int64_t smem) {
  if (gx < 1 || gx > 0x7fffffffLL || gy < 1 || gy > 65535 || gz < 1 || gz > 65535)
    die("cuda_kernels: grid (%lld, %lld, %lld) of k%d out of range", (long long)gx, (long long)gy, (long long)gz,
        id);
  ck_out(k, "}\n");
  /* the same kernel as an earlier one (same template, shapes and signature): launch that one */
  const char *body = k->src + k->bstart;
  int dup = -1;
  for (int i = 0; i < id && dup < 0; i++) /* not a candidate compiled only for the autotuning, unless this is one */
    if ((k->guard || !k->guarded[i]) && strcmp(k->bodies[i], body) == 0) dup = i;
  if (dup >= 0) {
    k->len = k->kstart;
    k->src[k->len] = 0;
    k->n--;
    id = dup;
  } else {
    int cap = k->capbodies;
    arena_grow(k->a, (void **)&k->bodies, &k->capbodies, id + 1, sizeof(char *));
    if (k->capbodies != cap) {
      char *g = arena_alloc(k->a, (size_t)k->capbodies);
      if (cap) memcpy(g, k->guarded, (size_t)cap);
      k->guarded = g;
    }
    k->bodies[id] = arena_strdup(k->a, body);
    k->guarded[id] = (char)k->guard;
    ck_out(k, "SK_EMU_ENTRY(k%d, (", id);
    for (int i = 0; i < g->np; i++) ck_out(k, "%sSK_ARG(%d, char *)", i ? ", " : "", i);
    for (int i = 0; i < g->nl; i++) ck_out(k, "%sSK_ARG(%d, long long)", g->np + i ? ", " : "", g->np + i);
    ck_out(k, "))\n");
    if (k->guard) ck_out(k, "#endif\n");
  }
  k->last = id;
  char *s = arena_printf(k->a, "rt_cu_launch(ctx, %d, %lld, %lld, %lld, %d, %d, %d, %lld, (void *[]){", id,
                         (long long)gx, (long long)gy, (long long)gz, bx, by, bz, (long long)smem);
  for (int i = 0; i < g->np; i++) s = arena_printf(k->a, "%s%s&(char *){%s}", s, i ? ", " : "", g->p[i]);
  for (int i = 0; i < g->nl; i++)
    s = arena_printf(k->a, "%s%s&(long long){%s}", s, g->np + i ? ", " : "", g->l[i]);
  return arena_printf(k->a, "%s});", s);
}

const char *ck_end(CuK *k, int id, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by,
                              int bz) {
  return ck_end_smem(k, id, g, gx, gy, gz, bx, by, bz, 0);
}

/* A one-statement kernel: body is the statement (uses p0.., l0..); smem bytes of dynamic shared memory. */
const char *ck_simple_smem(CuK *k, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by, int64_t smem,
                               const char *body) {
  int id = ck_begin(k, g, bx * by);
  ck_out(k, "  %s\n", body);
  return ck_end_smem(k, id, g, gx, gy, gz, bx, by, 1, smem);
}
const char *ck_simple(CuK *k, const Args *g, int64_t gx, int64_t gy, int64_t gz, int bx, int by, const char *body) {
  return ck_simple_smem(k, g, gx, gy, gz, bx, by, 0, body);
}

const char *ck_cat(CuK *k, const char *a, const char *b) { return arena_printf(k->a, "%s %s", a, b); }

const char *ck_ws_at(CuK *k, int64_t off) {
  return arena_printf(k->a, "(WS + %lld)", (long long)(CUK_WS_FLAGS + off));
}

const char *ck_counters(CuK *k, int n) {
  if (n < 1 || n > CUK_MAX_COUNTERS) die("cuda_kernels: %d arrival counters (at most %d)", n, CUK_MAX_COUNTERS);
  return arena_printf(k->a, "(WS + %d)", CUK_WS_COUNTERS);
}

const char *const cuk_variant_names[CUK_NVARIANTS] = {"default", "main", "one-pass"};
void cuk_set_variant(CuK *k, int v) {
  if (v < 0 || v >= CUK_NVARIANTS) die("cuda_kernels: variant %d", v);
  k->variant = v;
}

/* grid of a grid-stride loop over n elements with 256 threads */
int64_t ck_stride_grid(int64_t n) { return imax(1, imin(cdiv(n, 256), 8192)); }

/* Threads of a row kernel over d columns: a multiple of 32 with about 4 columns each. */
int ck_row_threads(int64_t d) { return (int)imin(1024, imax(32, cdiv(cdiv(d, 4), 32) * 32)); }

/* ---- fused elementwise chains --------------------------------------------------------------- */

static const char *op_expr(CuK *k, const CuEwOp *o, const char *a, const char *b) {
  switch (o->op) {
  case OP_ADD: return arena_printf(k->a, "%s + %s", a, b);
  case OP_SUB: return arena_printf(k->a, "%s - %s", a, b);
  case OP_MUL: return arena_printf(k->a, "%s * %s", a, b);
  case OP_DIV: return arena_printf(k->a, "%s / %s", a, b);
  case OP_MAXIMUM: return arena_printf(k->a, "sk::fmaxv(%s, %s)", a, b);
  case OP_MINIMUM: return arena_printf(k->a, "sk::fminv(%s, %s)", a, b);
  case OP_NEG: return arena_printf(k->a, "-%s", a);
  case OP_SCALE: return arena_printf(k->a, "%s * %s", ck_fl(k, o->scalar), a);
  case OP_ADD_SCALAR: return arena_printf(k->a, "%s + %s", a, ck_fl(k, o->scalar));
  case OP_EXP: return arena_printf(k->a, "expf(%s)", a);
  case OP_LOG: return arena_printf(k->a, "logf(%s)", a);
  case OP_SQRT: return arena_printf(k->a, "sqrtf(%s)", a);
  case OP_RSQRT: return arena_printf(k->a, "1.0f / sqrtf(%s)", a);
  case OP_TANH: return arena_printf(k->a, "tanhf(%s)", a);
  case OP_SIGMOID: return arena_printf(k->a, "sk::sigmoid(%s)", a);
  case OP_RELU: return arena_printf(k->a, "sk::relu(%s)", a);
  case OP_GELU: return arena_printf(k->a, "sk::gelu(%s)", a);
  case OP_SILU: return arena_printf(k->a, "sk::silu(%s)", a);
  case OP_GELU_BWD: return arena_printf(k->a, "sk::gelu_bwd(%s, %s)", a, b);
  case OP_SILU_BWD: return arena_printf(k->a, "sk::silu_bwd(%s, %s)", a, b);
  case OP_CAST: return arena_printf(k->a, "%s", a);
  case OP_CONST: return ck_fl(k, o->scalar);
  default: die("cuda_kernels: %s is not an elementwise op", ir_ops[o->op].name);
  }
}

/* The chain's ops, one `float tJ = ...;` line each over inputs xI and earlier tJ (indent: the lines' prefix). */
static const char *ew_ops(CuK *k, const CuEwChain *c, const char *indent) {
  const char *body = "";
  for (int j = 0; j < c->nops; j++) {
    const CuEwOp *o = &c->ops[j];
    const char *a[2] = {"0.0f", "0.0f"};
    for (int q = 0; q < 2; q++) {
      int r = o->in[q];
      if (o->op == OP_CONST) break;
      if (q == 1 && !(o->op == OP_ADD || o->op == OP_SUB || o->op == OP_MUL || o->op == OP_DIV || o->op == OP_MAXIMUM ||
                      o->op == OP_MINIMUM || o->op == OP_GELU_BWD || o->op == OP_SILU_BWD))
        break;
      if (r >= j) die("cuda_kernels: chain op %d reads op %d", j, r);
      a[q] = r >= 0 ? arena_printf(k->a, "t%d", r) : arena_printf(k->a, "x%d", -1 - r);
      if (r < 0 && -1 - r >= c->nin) die("cuda_kernels: chain op %d reads input %d", j, -1 - r);
    }
    const char *e = op_expr(k, o, a[0], a[1]);
    if (o->dt == DT_BF16) e = arena_printf(k->a, "sk::rbf(%s)", e);
    else if (o->dt == DT_I32) e = arena_printf(k->a, "rintf(%s)", e);
    else if (o->dt != DT_F32) die("cuda_kernels: chain op of dtype %s", ir_dtype_name(o->dt));
    body = arena_printf(k->a, "%s%sfloat t%d = %s;\n", body, indent, j, e);
  }
  return body;
}

const char *cuk_elementwise(CuK *k, const CuEwChain *c) {
  const Shape *s = &c->shape;
  int64_t n = ir_numel(s);
  /* every chain CuEwChain holds is emitted: one pointer argument per input and output (CUK_MAX_PTR_ARGS) */
  if (c->nin < 0 || c->nin > CUK_MAX_EW || c->nops < 1 || c->nops > CUK_MAX_EW || c->nout < 1 || c->nout > CUK_MAX_EW)
    die("cuda_kernels: elementwise chain with %d inputs, %d ops, %d outputs", c->nin, c->nops, c->nout);
  for (int i = 0; i < c->nout; i++)
    if (c->out_op[i] < 0 || c->out_op[i] >= c->nops) die("cuda_kernels: output %d stores op %d", i, c->out_op[i]);
  Args g = {0};
  for (int i = 0; i < c->nin; i++) g.p[g.np++] = c->in[i].ptr;
  for (int i = 0; i < c->nout; i++) g.p[g.np++] = c->out_ptr[i];
  int id = ck_begin(k, &g, 256);
  /* coordinates, when an input broadcasts */
  int coords = 0;
  for (int i = 0; i < c->nin; i++) coords |= ir_numel(&c->in[i].shape) != n;
  /* no broadcast, 8 elements a thread where every pointer is 16-byte aligned: 16-byte loads and stores (bf16) */
  int vec = !coords && n % 8 == 0;
  for (int i = 0; i < c->nin; i++) vec &= c->in[i].dt == DT_BF16 || c->in[i].dt == DT_F32;
  for (int i = 0; i < c->nout; i++) vec &= c->ops[c->out_op[i]].dt == DT_BF16 || c->ops[c->out_op[i]].dt == DT_F32;
  if (vec) {
    ck_out(k, "  if (((0");
    for (int i = 0; i < g.np; i++) ck_out(k, " | (unsigned long long)p%d", i);
    ck_out(k, ") & 15) == 0) {\n");
    ck_out(k, "    for (long long v = (long long)blockIdx.x * 256 + threadIdx.x; v < %lldLL; v += (long long)gridDim.x * 256) {\n",
        (long long)(n / 8));
    for (int i = 0; i < c->nin; i++)
      ck_out(k, "      float xv%d[8];\n      sk::ld8(xv%d, (const %s *)p%d + 8 * v);\n", i, i, ck_ctype(c->in[i].dt), i);
    for (int i = 0; i < c->nout; i++) ck_out(k, "      float ov%d[8];\n", i);
    ck_out(k, "#pragma unroll\n      for (int e = 0; e < 8; e++) {\n");
    for (int i = 0; i < c->nin; i++) ck_out(k, "        float x%d = xv%d[e];\n", i, i);
    ck_out(k, "%s", ew_ops(k, c, "        "));
    for (int i = 0; i < c->nout; i++) ck_out(k, "        ov%d[e] = t%d;\n", i, c->out_op[i]);
    ck_out(k, "      }\n");
    for (int i = 0; i < c->nout; i++)
      ck_out(k, "      sk::st8((%s *)p%d + 8 * v, ov%d);\n", ck_ctype(c->ops[c->out_op[i]].dt), c->nin + i, i);
    ck_out(k, "    }\n    return;\n  }\n");
  }
  ck_out(k, "  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < %lldLL; i += (long long)gridDim.x * 256) {\n",
      (long long)n);
  if (coords) {
    int used[IR_MAX_RANK] = {0}, lo = s->rank;
    for (int i = 0; i < c->nin; i++) {
      const Shape *is = &c->in[i].shape;
      if (ir_numel(is) == n) continue;
      for (int d = 0; d < is->rank; d++)
        if (is->dim[d] != 1) used[s->rank - is->rank + d] = 1;
    }
    for (int d = 0; d < s->rank; d++)
      if (used[d] && d < lo) lo = d;
    if (lo < s->rank) ck_out(k, "    long long r = i;\n");
    for (int d = s->rank - 1; d >= lo; d--) {
      if (used[d]) ck_out(k, "    long long c%d = r %% %lldLL;\n", d, (long long)s->dim[d]);
      if (d > lo) ck_out(k, "    r /= %lldLL;\n", (long long)s->dim[d]);
    }
  }
  for (int i = 0; i < c->nin; i++) {
    const Shape *is = &c->in[i].shape;
    const char *idx = "i";
    if (ir_numel(is) != n) {
      if (is->rank > s->rank) die("cuda_kernels: input %d of rank %d in a chain of rank %d", i, is->rank, s->rank);
      idx = "0";
      int64_t stride = 1;
      for (int d = is->rank - 1; d >= 0; d--) {
        int sd = s->rank - is->rank + d;
        if (is->dim[d] != 1) {
          if (is->dim[d] != s->dim[sd]) die("cuda_kernels: input %d does not broadcast", i);
          idx = arena_printf(k->a, "%s + c%d * %lldLL", idx, sd, (long long)stride);
        }
        stride *= is->dim[d];
      }
    }
    ck_out(k, "    float x%d = sk::ld((const %s *)p%d + (%s));\n", i, ck_ctype(c->in[i].dt), i, idx);
  }
  ck_out(k, "%s", ew_ops(k, c, "    "));
  for (int i = 0; i < c->nout; i++)
    ck_out(k, "    sk::st((%s *)p%d + i, t%d);\n", ck_ctype(c->ops[c->out_op[i]].dt), c->nin + i, c->out_op[i]);
  ck_out(k, "  }\n");
  return ck_end(k, id, &g, ck_stride_grid(vec ? n / 8 : n), 1, 1, 256, 1, 1);
}

/* ---- data movement ------------------------------------------------------------------------ */

const char *cuk_iota(CuK *k, const char *y, int64_t n, int64_t start) {
  Args g = {.np = 1, .p = {y}};
  return ck_simple(k, &g, ck_stride_grid(n), 1, 1, 256, 1,
                arena_printf(k->a, "sk::iota<%lldLL>((int *)p0, %lldLL);", (long long)n, (long long)start));
}

const char *cuk_transpose(CuK *k, const char *y, const char *x, DType dt, int64_t batch, int64_t rows, int64_t cols) {
  Args g = {.np = 2, .p = {y, x}};
  const char *t = ck_ctype(dt);
  const char *one = k->variant == CUK_VAR_ONE ? ck_transpose_vec(k, y, x, dt, batch, rows, cols) : NULL;
  if (one) return one;
  /* (over 65535 tiles of rows, e.g. a stacked layer gradient's 2M rows: the blocks loop over them, grid y capped) */
  return ck_simple(k, &g, cdiv(cols, 32), imin(cdiv(rows, 32), k->grid_y_max), imin(batch, 65535), 32, 8,
                arena_printf(k->a, "sk::transpose<%s, %lldLL, %lldLL, %lldLL>((%s *)p0, (const %s *)p1);", t,
                             (long long)batch, (long long)rows, (long long)cols, t, t));
}

/* A run of adjacent dims of x seen as one: its combined size and the innermost dim's stride (x is
 * row-major, so the combined index times that stride is the run's offset). */
typedef struct {
  int64_t size, stride;
} Axis;

/* ds[0..n) ascending -> runs of adjacent dims in out; returns their count */
static int merge_axes(const Shape *xs, const int64_t *xstr, const int *ds, int n, Axis *out) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    int d = ds[i];
    if (m > 0 && ds[i - 1] == d - 1) {
      out[m - 1].size *= xs->dim[d];
      out[m - 1].stride = xstr[d];
    } else {
      out[m++] = (Axis){xs->dim[d], xstr[d]};
    }
  }
  return m;
}

/* A colsum launch (shardk.cuh): y [P, cols] (P = 1: y [cols]) = the column sums of x [rows, cols] (rows ld apart)
 * over P chunks of rows. */
const char *ck_colsum_call(CuK *k, DType ydt, DType xdt, int64_t rows, int64_t cols, int64_t ld, int64_t P, int ry,
                           double scale, const char *yarg, const char *xarg) {
  return arena_printf(k->a, "sk::colsum<%s, %s, %lldLL, %lldLL, %lldLL, %d, %d>((%s *)%s, (const %s *)%s, %s);",
                      ck_ctype(ydt), ck_ctype(xdt), (long long)rows, (long long)cols, (long long)ld, (int)P, ry, ck_ctype(ydt),
                      yarg, ck_ctype(xdt), xarg, ck_fl(k, scale));
}
/* (ry: the block's row slices: 8 for many rows, 32 for the few rows of partial sums) */
const char *ck_colsum_launch(CuK *k, const char *y, DType ydt, const char *x, DType xdt, int64_t rows, int64_t cols,
                             int64_t ld, int64_t P, double scale) {
  int vw = xdt == DT_BF16 ? 8 : 4, ry = P > 1 || rows >= 1024 ? 8 : 32;
  Args g = {.np = 2, .p = {y, x}};
  return ck_simple(k, &g, cdiv(cols / vw, 256 / ry), P, 1, 256 / ry, ry,
                   ck_colsum_call(k, ydt, xdt, rows, cols, ld, P, ry, scale, "p0", "p1"));
}

/* y [cols] = scale * the column sums of x [rows, cols] (rows ld apart; cols a multiple of 16 / sizeof(x), x 16-byte
 * aligned): chunks of rows (enough threads in flight, chunks of at least 64 rows) summed into partials in the
 * workspace, then the partials' column sums in chunk order. In one launch (shardk.cuh colsum_tree: the last block of
 * each group of 16 chunks sums the group, the last group the groups) where its counters fit, else (and in
 * CUK_VAR_MAIN) in two. Deterministic: fixed orders throughout. Bytes at [8192, 768] bf16: 12.6 MB read once, the
 * partials 0.4 MB written and read back from L2. */
static const char *colsum_sum(CuK *k, const char *y, DType ydt, const char *x, DType xdt, int64_t rows, int64_t cols,
                              int64_t ld, double scale) {
  int vw = xdt == DT_BF16 ? 8 : 4;
  int64_t P = imax(1, imin(cdiv(rows, 64), cdiv(131072, cdiv(cols / vw, 32) * 256)));
  if (P == 1) return ck_colsum_launch(k, y, ydt, x, xdt, rows, cols, ld, 1, scale);
  const char *one = k->variant == CUK_VAR_ONE ? ck_colsum_flat(k, y, ydt, x, xdt, rows, cols, ld, scale) : NULL;
  if (one) return one;
  const int G = 16, ry = 8, cx = 256 / ry;
  const int64_t tiles = cdiv(cols / vw, cx), m = (int64_t)cx * vw, ng = cdiv(P, G);
  const int nc = (int)(P <= G ? 1 : ng + 1);
  if (k->variant != CUK_VAR_MAIN && tiles * nc <= CUK_MAX_COUNTERS) {
    ck_need_ws(k, tiles * (P + ng) * m * 4);
    Args g = {.np = 5, .p = {y, x, ck_ws_at(k, 0), ck_ws_at(k, tiles * P * m * 4), ck_counters(k, (int)(tiles * nc))}};
    return ck_simple(k, &g, tiles, P, 1, cx, ry,
                     arena_printf(k->a,
                                  "sk::colsum_tree<%s, %s, %lldLL, %lldLL, %lldLL, %d, %d, %d>((%s *)p0, (const %s *)p1, %s, "
                                  "(float *)p2, (float *)p3, (int *)p4);",
                                  ck_ctype(ydt), ck_ctype(xdt), (long long)rows, (long long)cols, (long long)ld, (int)P,
                                  ry, G, ck_ctype(ydt), ck_ctype(xdt), ck_fl(k, scale)));
  }
  ck_need_ws(k, P * cols * 4);
  return ck_cat(k, ck_colsum_launch(k, ck_ws_at(k, 0), DT_F32, x, xdt, rows, cols, ld, P, 1.0),
                ck_colsum_launch(k, y, ydt, ck_ws_at(k, 0), DT_F32, P, cols, cols, 1, scale));
}

const char *cuk_reduce_to(CuK *k, const char *y, DType ydt, const Shape *ys, const char *x, DType xdt, const Shape *xs) {
  /* align ys to xs on the right; kept dims (equal) and summed dims (1 or missing in ys) */
  int r = xs->rank;
  int64_t xstr[IR_MAX_RANK] = {0}, ny = 1, nr = 1;
  int kept[IR_MAX_RANK] = {0}, nk = 0, summed[IR_MAX_RANK] = {0}, ns = 0;
  int64_t st = 1;
  for (int d = r - 1; d >= 0; d--) {
    xstr[d] = st;
    st *= xs->dim[d];
  }
  if (ys->rank > r) die("cuda_kernels: reduce_to of rank %d to rank %d", r, ys->rank);
  for (int d = 0; d < r; d++) {
    int yd = d - (r - ys->rank);
    int64_t yv = yd >= 0 ? ys->dim[yd] : 1;
    if (yv == xs->dim[d]) {
      kept[nk++] = d;
      ny *= yv;
    } else if (yv == 1) {
      summed[ns++] = d;
      nr *= xs->dim[d];
    } else {
      die("cuda_kernels: reduce_to: dim %d of %lld does not reduce to %lld", d, (long long)xs->dim[d], (long long)yv);
    }
  }
  /* adjacent dims of one kind merge into one (row-major: their combined index times the inner stride), so the
   * usual bias gradient (rows summed, columns kept) reads x at base + j * cols, without a division per term */
  Axis ka[IR_MAX_RANK], sa[IR_MAX_RANK];
  nk = merge_axes(xs, xstr, kept, nk, ka);
  ns = merge_axes(xs, xstr, summed, ns, sa);
  if (nk == 1 && ns == 1 && ka[0].stride == 1 && sa[0].stride == ka[0].size && (xdt == DT_BF16 || xdt == DT_F32) &&
      ny % (xdt == DT_BF16 ? 8 : 4) == 0) /* x [nr, ny] summed over its rows (a bias gradient): 16-byte loads */
    return colsum_sum(k, y, ydt, x, xdt, nr, ny, ny, 1.0);
  /* P chunks of the summed index: enough threads, at least 32 terms a chunk */
  int64_t P = imax(1, imin(4096, imin(cdiv(65536, ny), cdiv(nr, 32))));
  int64_t chunk = cdiv(nr, P);
  P = cdiv(nr, chunk);
  Args g = {.np = 2, .p = {P > 1 ? ck_ws_at(k, 0) : y, x}};
  const char *yt = P > 1 ? "float" : ck_ctype(ydt);
  int id = ck_begin(k, &g, 256);
  ck_out(k, "  long long o = (long long)blockIdx.x * 256 + threadIdx.x, p = blockIdx.y;\n");
  ck_out(k, "  if (o >= %lldLL) return;\n  long long base = 0;\n", (long long)ny);
  if (nk) ck_out(k, "  long long r = o;\n");
  for (int i = nk - 1; i >= 0; i--) {
    ck_out(k, "  base += (r %% %lldLL) * %lldLL;\n", (long long)ka[i].size, (long long)ka[i].stride);
    if (i) ck_out(k, "  r /= %lldLL;\n", (long long)ka[i].size);
  }
  ck_out(k, "  float acc = 0.0f;\n");
  ck_out(k, "#pragma unroll 8\n  for (long long j = p * %lldLL; j < (p + 1) * %lldLL && j < %lldLL; j++) {\n",
      (long long)chunk, (long long)chunk, (long long)nr);
  ck_out(k, "    long long off = base;\n");
  if (ns == 1) ck_out(k, "    off += j * %lldLL;\n", (long long)sa[0].stride);
  if (ns > 1) ck_out(k, "    long long q = j;\n");
  for (int i = ns - 1; i >= 0 && ns > 1; i--) {
    ck_out(k, "    off += (q %% %lldLL) * %lldLL;\n", (long long)sa[i].size, (long long)sa[i].stride);
    if (i) ck_out(k, "    q /= %lldLL;\n", (long long)sa[i].size);
  }
  ck_out(k, "    acc += sk::ld((const %s *)p1 + off);\n  }\n", ck_ctype(xdt));
  ck_out(k, "  sk::st((%s *)p0 + p * %lldLL + o, acc);\n", yt, (long long)ny);
  const char *l1 = ck_end(k, id, &g, cdiv(ny, 256), P, 1, 256, 1, 1);
  if (P == 1) return l1;
  ck_need_ws(k, P * ny * 4);
  Args g2 = {.np = 2, .p = {y, ck_ws_at(k, 0)}};
  return ck_cat(k, l1,
             ck_simple(k, &g2, cdiv(ny, 256), 1, 1, 256, 1,
                    arena_printf(k->a, "sk::sum_parts<%s, %lldLL, %lldLL>((%s *)p0, (const float *)p1, 1.0f);",
                                 ck_ctype(ydt), (long long)ny, (long long)P, ck_ctype(ydt))));
}

/* ---- embeddings ------------------------------------------------------------------------------ */

const char *cuk_embed(CuK *k, const char *y, DType ydt, const char *table, DType tdt, const char *idx, int64_t n,
                      int64_t d, int64_t V, const char *row0) {
  int check = strcmp(row0, "0") == 0;
  const char *one = k->variant == CUK_VAR_ONE ? ck_embed_vec(k, y, ydt, table, tdt, idx, n, d, V, row0) : NULL;
  if (one) return one;
  Args g = {.np = 4, .nl = 1, .p = {y, table, idx, "WS"}, .l = {row0}};
  int nt = (int)imin(256, imax(32, cdiv(d, 32) * 32));
  return ck_simple(k, &g, n, 1, 1, nt, 1,
                arena_printf(k->a,
                             "sk::embed<%s, %s, %lldLL, %lldLL, %d, %s>((%s *)p0, (const %s *)p1, (const int *)p2, l0, "
                             "(int *)p3);",
                             ck_ctype(ydt), ck_ctype(tdt), (long long)d, (long long)V, nt, check ? "true" : "false",
                             ck_ctype(ydt), ck_ctype(tdt)));
}

const char *cuk_embed_bwd(CuK *k, const char *dtable, DType tdt, const char *idx, const char *dy, DType dydt,
                          int64_t n, int64_t d, int64_t V, const char *row0) {
  const char *one = k->variant == CUK_VAR_ONE ? ck_embed_bwd_own(k, dtable, tdt, idx, dy, dydt, n, d, V, row0) : NULL;
  if (one) return one;
  int64_t Rb = imax(64, cdiv(V, 4096)), NB = cdiv(V, Rb);
  if (d % 8 == 0 && (tdt == DT_BF16 || tdt == DT_F32) && (dydt == DT_BF16 || dydt == DT_F32) && Rb * n < (1LL << 31)) {
    /* by buckets of Rb rows (shardk.cuh embed_bucket, embed_bwd_rows): the bucket starts at 0, the keys after */
    int64_t kat = cdiv((NB + 1) * 4, 64) * 64;
    ck_need_ws(k, kat + n * 4);
    /* a block per bucket, its rows in turn. Measured on an H200 (8192 / 16384 ids, V 50304, d 768): this, 47.4 /
     * 63.5 us; 4 groups of rows a block (binary search for each row's keys) 55.5 / 74.5; buckets of 32 rows with
     * the ids loaded 8 a thread at once 51.2 / 66.1 */
    int nt = (int)imin(256, cdiv(d / 8, 32) * 32);
    Args g1 = {.np = 3, .nl = 1, .p = {ck_ws_at(k, 0), ck_ws_at(k, kat), idx}, .l = {row0}};
    Args g2 = {.np = 4, .p = {dtable, ck_ws_at(k, kat), ck_ws_at(k, 0), dy}};
    return ck_cat(k,
               ck_simple(k, &g1, 1, 1, 1, 1024, 1,
                      arena_printf(k->a, "sk::embed_bucket<%lldLL, %lldLL, %d, %d>((int *)p0, (int *)p1, (const int *)p2, l0);",
                                   (long long)n, (long long)V, (int)Rb, (int)NB)),
               ck_simple(k, &g2, NB, 1, 1, nt, 1,
                      arena_printf(k->a,
                                   "sk::embed_bwd_rows<%s, %s, %lldLL, %lldLL, %lldLL, %d, %d, 2048>((%s *)p0, (int *)p1, "
                                   "(const int *)p2, (const %s *)p3);",
                                   ck_ctype(tdt), ck_ctype(dydt), (long long)n, (long long)d, (long long)V, (int)Rb, nt,
                                   ck_ctype(tdt), ck_ctype(dydt))));
  }
  int64_t dc = imin(d, 8192), R = imax(1, imin(32, 8192 / dc));
  Args g = {.np = 3, .nl = 1, .p = {dtable, idx, dy}, .l = {row0}};
  return ck_simple(k, &g, cdiv(V, R), cdiv(d, dc), 1, 256, 1,
                arena_printf(k->a,
                             "sk::embed_bwd<%s, %s, %lldLL, %lldLL, %lldLL, %d, %d, 256>((%s *)p0, (const int *)p1, "
                             "(const %s *)p2, l0);",
                             ck_ctype(tdt), ck_ctype(dydt), (long long)n, (long long)d, (long long)V, (int)R, (int)dc,
                             ck_ctype(tdt), ck_ctype(dydt)));
}

/* ---- rotary embedding ---------------------------------------------------------------------------- */

const char *cuk_rope_at(CuK *k, const char *y, const char *x, const char *pos, DType dt, int64_t B, int64_t S,
                        int64_t H, int64_t hd, double theta, int64_t start, int inverse) {
  Args g = {.np = pos ? 3 : 2, .p = {y, x, pos}};
  const char *t = ck_ctype(dt);
  const int vw = dt == DT_BF16 ? 8 : 4;
  /* rows of 16-byte vector pairs, the angles once a block (shardk.cuh rope_vec): up to 16 rows a block, at most 3 vector
   * pairs a thread (GPT-2's H 12, hd 64: 16 rows; hd 128, H 16: 6) */
  const int R = (int)imax(1, imin(16, 768 / imax(1, H * (hd / 2 / vw))));
  if (k->variant != CUK_VAR_MAIN && (dt == DT_BF16 || dt == DT_F32) && hd % (2 * vw) == 0 && cdiv(B * S, R) <= 0x7fffffffLL)
    return ck_simple(k, &g, cdiv(B * S, R), 1, 1, 256, 1,
                     arena_printf(k->a,
                                  "sk::rope_vec<%s, %lldLL, %lldLL, %lldLL, %lldLL, %s, %d>((%s *)p0, (const %s *)p1, %.17g, "
                                  "%lldLL%s);",
                                  t, (long long)B, (long long)S, (long long)H, (long long)hd, inverse ? "true" : "false", R, t,
                                  t, theta, (long long)start, pos ? ", (const int *)p2" : ""));
  return ck_simple(k, &g, ck_stride_grid(B * S * (hd / 2)), 1, 1, 256, 1,
                arena_printf(k->a, "sk::rope<%s, %lldLL, %lldLL, %lldLL, %lldLL, %s>((%s *)p0, (const %s *)p1, %.17g, %lldLL%s);",
                             t, (long long)B, (long long)S, (long long)H, (long long)hd, inverse ? "true" : "false", t,
                             t, theta, (long long)start, pos ? ", (const int *)p2" : ""));
}

const char *cuk_rope(CuK *k, const char *y, const char *x, DType dt, int64_t B, int64_t S, int64_t H, int64_t hd,
                     double theta, int64_t start, int inverse) {
  return cuk_rope_at(k, y, x, NULL, dt, B, S, H, hd, theta, start, inverse);
}

/* ---- reductions -------------------------------------------------------------------------------------- */

/* the chunks (blocks) of a reduction over n elements */
static int64_t reduce_chunks(int64_t n) { return imax(1, imin(1024, cdiv(n, 4096))); }

static const char *reduce(CuK *k, const char *y, const char *x, DType xdt, int64_t n, int sq, double scale) {
  int64_t P = reduce_chunks(n);
  ck_need_ws(k, P * 4);
  const char *t = ck_ctype(xdt);
  Args g1 = {.np = 2, .p = {ck_ws_at(k, 0), x}};
  const char *l1 = ck_simple(k, &g1, P, 1, 1, 256, 1,
                          arena_printf(k->a, "sk::reduce_parts<%s, %lldLL, %d, 256, %s>((float *)p0, (const %s *)p1);",
                                       t, (long long)n, (int)P, sq ? "true" : "false", t));
  Args g2 = {.np = 2, .p = {y, ck_ws_at(k, 0)}};
  const char *l2 = ck_simple(k, &g2, 1, 1, 1, 256, 1,
                          arena_printf(k->a, "sk::reduce_final<%d, 256>((float *)p0, (const float *)p1, %s);", (int)P,
                                       ck_fl(k, scale)));
  return ck_cat(k, l1, l2);
}

const char *cuk_sum(CuK *k, const char *y, const char *x, DType xdt, int64_t n) { return reduce(k, y, x, xdt, n, 0, 1.0); }
const char *cuk_mean(CuK *k, const char *y, const char *x, DType xdt, int64_t n) {
  return reduce(k, y, x, xdt, n, 0, n > 0 ? 1.0 / (double)n : 0.0);
}
const char *cuk_sumsq(CuK *k, const char *y, const char *x, DType xdt, int64_t n) {
  return reduce(k, y, x, xdt, n, 1, 1.0);
}

/* Up to CUK_SUMSQ_MULTI tensors in one launch: p0 y, p1 the parts (at WS), p2 the arrival counters, p3.. the tensors;
 * the blocks of tensor i follow those of tensor i - 1, and a chain of comparisons (uniform over a block) finds its. */
_Static_assert(CUK_SUMSQ_MULTI <= CUK_MAX_COUNTERS, "a counter a tensor");
_Static_assert(3 + CUK_SUMSQ_MULTI <= (int)(sizeof(((Args *)0)->p) / sizeof(char *)), "the pointers fit Args");

static const char *sumsq_launch(CuK *k, const char *y, int n, const CuSumsqIn *in) {
  Args g = {.np = 3 + n, .p = {y, ck_ws_at(k, 0), ck_counters(k, n)}};
  for (int i = 0; i < n; i++) g.p[3 + i] = in[i].x;
  int id = ck_begin(k, &g, 256);
  ck_out(k, "  __shared__ float red[64];\n  const int b = (int)blockIdx.x;\n");
  int64_t b0 = 0;
  for (int i = 0; i < n; i++) {
    int64_t P = reduce_chunks(in[i].n);
    const char *t = ck_ctype(in[i].xdt);
    if (in[i].xdt != DT_F32 && in[i].xdt != DT_BF16) die("cuda_kernels: sumsq of %s", ir_dtype_name(in[i].xdt));
    ck_out(k, "  %sif (b < %lld) sk::sumsq_multi_part<%s, %lldLL, %d, 256>((float *)p0 + %lld, (float *)p1 + %lld, "
              "(int *)p2 + %d, (const %s *)p%d, b - %lld, red);\n",
           i ? "else " : "", (long long)(b0 + P), t, (long long)in[i].n, (int)P, (long long)in[i].at, (long long)b0, i, t,
           3 + i, (long long)b0);
    b0 += P;
  }
  ck_need_ws(k, b0 * 4);
  return ck_end(k, id, &g, b0, 1, 1, 256, 1, 1);
}

const char *cuk_sumsq_multi(CuK *k, const char *y, int n, const CuSumsqIn *in) {
  if (n < 1) die("cuda_kernels: a multi-tensor sum of squares of %d tensors", n);
  const char *s = NULL;
  for (int i = 0; i < n; i += CUK_SUMSQ_MULTI) {
    const char *l = sumsq_launch(k, y, (int)imin(CUK_SUMSQ_MULTI, n - i), in + i);
    s = s ? ck_cat(k, s, l) : l;
  }
  return s;
}

/* ---- optimizers ---------------------------------------------------------------------------------------- */

const char *cuk_adamw(CuK *k, const char *p, const char *g, DType gdt, const char *m, const char *v, const char *hyper,
                      int64_t n, double beta1, double beta2, double eps, double wd, const char *copy) {
  Args a = {.np = copy ? 6 : 5, .p = {p, g, m, v, hyper, copy}};
  return ck_simple(k, &a, ck_stride_grid(n), 1, 1, 256, 1,
                arena_printf(k->a,
                             "sk::adamw<%s, %lldLL>((float *)p0, (const %s *)p1, (float *)p2, (float *)p3, "
                             "(const float *)p4, %s, %s, %s, %s%s);",
                             ck_ctype(gdt), (long long)n, ck_ctype(gdt), ck_fl(k, beta1), ck_fl(k, beta2), ck_fl(k, eps),
                             ck_fl(k, wd), copy ? ", (sk::bf16 *)p5" : ""));
}

const char *cuk_sgd(CuK *k, const char *p, const char *g, DType gdt, const char *m, const char *hyper, int64_t n,
                    double momentum, double wd, const char *copy) {
  Args a = {.np = copy ? 5 : 4, .p = {p, g, m, hyper, copy}};
  return ck_simple(k, &a, ck_stride_grid(n), 1, 1, 256, 1,
                arena_printf(k->a,
                             "sk::sgd<%s, %lldLL>((float *)p0, (const %s *)p1, (float *)p2, (const float *)p3, %s, %s%s);",
                             ck_ctype(gdt), (long long)n, ck_ctype(gdt), ck_fl(k, momentum), ck_fl(k, wd),
                             copy ? ", (sk::bf16 *)p4" : ""));
}
