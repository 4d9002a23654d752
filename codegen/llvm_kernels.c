/* codegen/llvm_kernels.c — the CPU kernels as LLVM IR (llvm_kernels.h): built through the LLVM C
 * API, optimised by the new pass manager (default<O3>) and compiled for the host CPU.
 *
 * Each kernel is `void name(i64 lo, i64 hi, ptr p)`. Its loop over items is written in vectors of
 * the host's SIMD width W (16 floats with AVX-512, 8 with AVX, else 4) followed by a scalar tail,
 * the same body emitted twice: for <W x float> and for float. Loads and stores are by index, so
 * an output that is one of the inputs (an update in place) vectorises too; outputs never overlap
 * inputs otherwise (the memory plan, passes/memplan.c, makes a group safe as one kernel).
 *
 * The math is the runtime's (runtime/kernels/fastmath.h): e^x by range reduction and a degree-6
 * polynomial with 2^k in the exponent bits, tanh and sigmoid through it, GELU in its tanh form.
 */
#include "llvm_kernels.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"

typedef enum { K_EW, K_ADAMW, K_NORM, K_NSTATS, K_NPARAM, K_NDX, K_XENT } KernelKind; /* K_N*: a norm backward's */

typedef struct {
  KernelKind kind;
  LlkEw ew;       /* K_EW */
  LlkAdamW adamw; /* K_ADAMW */
  LlkNorm norm;   /* K_NORM */
  LlkNormBwd nb;  /* K_NSTATS, K_NPARAM, K_NDX */
  LlkXent xent;   /* K_XENT */
  char name[32];  /* its symbol */
} Kernel;

struct Llk {
  Kernel **k;    /* the kernels asked for, in order (each its own allocation: names stay put) */
  int n, cap;    /* used, allocated */
};

Llk *llk_new(void) {
  Llk *k = calloc(1, sizeof *k);
  if (!k) die("out of memory");
  return k;
}

void llk_free(Llk *k) {
  if (!k) return;
  for (int i = 0; i < k->n; i++) free(k->k[i]);
  free(k->k);
  free(k);
}

int llk_count(const Llk *k) { return k->n; }

static bool ew_eq(const LlkEw *a, const LlkEw *b) {
  if (a->nin != b->nin || a->nops != b->nops || a->nout != b->nout || a->inner != b->inner) return false;
  for (int i = 0; i < a->nin; i++)
    if (a->idx[i] != b->idx[i]) return false;
  for (int i = 0; i < a->nops; i++)
    if (a->ops[i].op != b->ops[i].op || a->ops[i].in[0] != b->ops[i].in[0] || a->ops[i].in[1] != b->ops[i].in[1] ||
        a->ops[i].scalar != b->ops[i].scalar)
      return false;
  for (int i = 0; i < a->nout; i++)
    if (a->out_op[i] != b->out_op[i]) return false;
  return true;
}

static Kernel *add(Llk *k, KernelKind kind) {
  if (k->n == k->cap) {
    k->cap = k->cap ? 2 * k->cap : 16;
    k->k = realloc(k->k, (size_t)k->cap * sizeof *k->k);
    if (!k->k) die("out of memory");
  }
  Kernel *e = calloc(1, sizeof *e);
  if (!e) die("out of memory");
  k->k[k->n] = e;
  e->kind = kind;
  snprintf(e->name, sizeof e->name, "shardc_llk%d", k->n);
  k->n++;
  return e;
}

const char *llk_ew(Llk *k, const LlkEw *e) {
  if (e->nops < 1 || e->nops > LLK_MAX_EW || e->nin > LLK_MAX_EW || e->nout < 1 || e->nout > LLK_MAX_EW)
    die("llvm kernels: an elementwise chain of %d ops, %d inputs, %d outputs", e->nops, e->nin, e->nout);
  for (int i = 0; i < k->n; i++)
    if (k->k[i]->kind == K_EW && ew_eq(&k->k[i]->ew, e)) return k->k[i]->name;
  Kernel *n = add(k, K_EW);
  n->ew = *e;
  return n->name;
}

const char *llk_adamw(Llk *k, const LlkAdamW *a) {
  for (int i = 0; i < k->n; i++)
    if (k->k[i]->kind == K_ADAMW && memcmp(&k->k[i]->adamw, a, sizeof *a) == 0) return k->k[i]->name;
  Kernel *n = add(k, K_ADAMW);
  n->adamw = *a;
  return n->name;
}

const char *llk_norm(Llk *k, const LlkNorm *a) {
  for (int i = 0; i < k->n; i++)
    if (k->k[i]->kind == K_NORM && k->k[i]->norm.d == a->d && k->k[i]->norm.eps == a->eps && k->k[i]->norm.rms == a->rms)
      return k->k[i]->name;
  Kernel *n = add(k, K_NORM);
  n->norm = *a;
  return n->name;
}

void llk_norm_bwd(Llk *k, const LlkNormBwd *a, const char *names[3]) {
  for (int part = 0; part < 3; part++) {
    KernelKind kind = (KernelKind)(K_NSTATS + part);
    names[part] = NULL;
    for (int i = 0; i < k->n && !names[part]; i++) {
      const LlkNormBwd *b = &k->k[i]->nb;
      if (k->k[i]->kind == kind && b->d == a->d && b->rows == a->rows && b->eps == a->eps && b->rms == a->rms)
        names[part] = k->k[i]->name;
    }
    if (names[part]) continue;
    Kernel *n = add(k, kind);
    n->nb = *a;
    names[part] = n->name;
  }
}

const char *llk_xent(Llk *k, const LlkXent *x) {
  for (int i = 0; i < k->n; i++) {
    const LlkXent *y = &k->k[i]->xent;
    if (k->k[i]->kind == K_XENT && y->V == x->V && y->len == x->len && y->bwd == x->bwd) return k->k[i]->name;
  }
  Kernel *n = add(k, K_XENT);
  n->xent = *x;
  return n->name;
}

/* ---- building IR ---------------------------------------------------------------------------- */

typedef struct {
  LLVMContextRef cx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMValueRef fn;                     /* the kernel being built */
  LLVMTypeRef f32, f64, i32, i64, ptr; /* scalar types */
  int W;                               /* the host's vector width in floats */
  int w;                               /* the width of the body being emitted: W or 1 */
} Bld;

static LLVMTypeRef ftype(const Bld *B) { return B->w == 1 ? B->f32 : LLVMVectorType(B->f32, (unsigned)B->w); }
static LLVMTypeRef itype(const Bld *B) { return B->w == 1 ? B->i32 : LLVMVectorType(B->i32, (unsigned)B->w); }

/* A scalar value as the body's width. */
static LLVMValueRef splat(Bld *B, LLVMValueRef s) {
  if (B->w == 1) return s;
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)B->w);
  LLVMValueRef v = LLVMBuildInsertElement(B->b, LLVMGetPoison(vt), s, LLVMConstInt(B->i32, 0, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(B->i32, (unsigned)B->w));
  return LLVMBuildShuffleVector(B->b, v, LLVMGetPoison(vt), zeros, "");
}

static LLVMValueRef cst(Bld *B, float x) {
  LLVMValueRef s = LLVMConstReal(B->f32, x);
  if (B->w == 1) return s;
  LLVMValueRef e[64];
  for (int i = 0; i < B->w; i++) e[i] = s;
  return LLVMConstVector(e, (unsigned)B->w);
}

static LLVMValueRef icst(Bld *B, int x) {
  LLVMValueRef s = LLVMConstInt(B->i32, (unsigned long long)(long long)x, 1);
  if (B->w == 1) return s;
  LLVMValueRef e[64];
  for (int i = 0; i < B->w; i++) e[i] = s;
  return LLVMConstVector(e, (unsigned)B->w);
}

static LLVMValueRef i64c(Bld *B, int64_t x) { return LLVMConstInt(B->i64, (unsigned long long)x, 1); }

static LLVMValueRef at(Bld *B, LLVMValueRef base, LLVMValueRef idx) { return LLVMBuildGEP2(B->b, B->f32, base, &idx, 1, ""); }

/* The body's width of floats from base[idx]. */
static LLVMValueRef load(Bld *B, LLVMValueRef base, LLVMValueRef idx) {
  LLVMValueRef v = LLVMBuildLoad2(B->b, ftype(B), at(B, base, idx), "");
  LLVMSetAlignment(v, 4);
  return v;
}

static void store(Bld *B, LLVMValueRef x, LLVMValueRef base, LLVMValueRef idx) {
  LLVMValueRef s = LLVMBuildStore(B->b, x, at(B, base, idx));
  LLVMSetAlignment(s, 4);
}

/* One float (not widened) from base[idx]. */
static LLVMValueRef load1(Bld *B, LLVMValueRef base, LLVMValueRef idx) {
  LLVMValueRef v = LLVMBuildLoad2(B->b, B->f32, at(B, base, idx), "");
  LLVMSetAlignment(v, 4);
  return v;
}

static LLVMValueRef intrinsic(Bld *B, const char *name, LLVMValueRef x) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(B->mod, id, &t, 1);
  return LLVMBuildCall2(B->b, LLVMIntrinsicGetType(B->cx, id, &t, 1), f, &x, 1, "");
}

/* a*b+c may become one FMA (fast-math `contract` only), as -ffp-contract=fast lets the C kernels */
static LLVMValueRef contract(LLVMValueRef v) {
  if (LLVMIsAInstruction(v)) LLVMSetFastMathFlags(v, LLVMFastMathAllowContract);
  return v;
}
static LLVMValueRef add_(Bld *B, LLVMValueRef a, LLVMValueRef b) { return contract(LLVMBuildFAdd(B->b, a, b, "")); }
static LLVMValueRef sub_(Bld *B, LLVMValueRef a, LLVMValueRef b) { return contract(LLVMBuildFSub(B->b, a, b, "")); }
static LLVMValueRef mul_(Bld *B, LLVMValueRef a, LLVMValueRef b) { return contract(LLVMBuildFMul(B->b, a, b, "")); }
static LLVMValueRef div_(Bld *B, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFDiv(B->b, a, b, ""); }
/* a <op> b ? a : b, as the C kernels write max and min (NaN handling included) */
static LLVMValueRef pick(Bld *B, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(B->b, LLVMBuildFCmp(B->b, p, a, b, ""), a, b, "");
}

/* rt_fexp (runtime/kernels/fastmath.h) */
static LLVMValueRef fexp(Bld *B, LLVMValueRef x) {
  /* x < -87.3 ? -87.3 : x and x > 88 ? 88 : x as in C: the unordered compares keep a NaN (a loss
     or gradient must stay NaN for the trainer's non-finite check) */
  x = pick(B, LLVMRealUGE, x, cst(B, -87.3f));
  x = pick(B, LLVMRealULE, x, cst(B, 88.0f));
  LLVMValueRef kf = sub_(B, add_(B, mul_(B, x, cst(B, 1.44269504088896341f)), cst(B, 12582912.0f)), cst(B, 12582912.0f));
  LLVMValueRef r = sub_(B, x, mul_(B, kf, cst(B, 0.693145751953125f)));
  r = sub_(B, r, mul_(B, kf, cst(B, 1.42860682030941723212e-6f)));
  static const float c[] = {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};
  LLVMValueRef p = cst(B, 1.0f / 720.0f);
  for (int i = 0; i < 6; i++) p = add_(B, mul_(B, p, r), cst(B, c[i]));
  LLVMValueRef k = LLVMBuildFPToSI(B->b, kf, itype(B), "");
  LLVMValueRef bits = LLVMBuildShl(B->b, LLVMBuildAdd(B->b, k, icst(B, 127), ""), icst(B, 23), "");
  return mul_(B, p, LLVMBuildBitCast(B->b, bits, ftype(B), ""));
}

static LLVMValueRef ftanh(Bld *B, LLVMValueRef x) {
  return sub_(B, cst(B, 1.0f), div_(B, cst(B, 2.0f), add_(B, fexp(B, mul_(B, cst(B, 2.0f), x)), cst(B, 1.0f))));
}

static LLVMValueRef fsigmoid(Bld *B, LLVMValueRef x) {
  return div_(B, cst(B, 1.0f), add_(B, cst(B, 1.0f), fexp(B, LLVMBuildFNeg(B->b, x, ""))));
}

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* tanh(GELU_C (v + GELU_A v^3)) */
static LLVMValueRef gelu_t(Bld *B, LLVMValueRef v) {
  LLVMValueRef v3 = mul_(B, mul_(B, mul_(B, cst(B, GELU_A), v), v), v);
  return ftanh(B, mul_(B, cst(B, GELU_C), add_(B, v, v3)));
}

/* One member of an elementwise chain on operands a, b. */
static LLVMValueRef ew_op(Bld *B, const LlkOp *o, LLVMValueRef a, LLVMValueRef b) {
  switch (o->op) {
  case OP_ADD: return add_(B, a, b);
  case OP_SUB: return sub_(B, a, b);
  case OP_MUL: return mul_(B, a, b);
  case OP_DIV: return div_(B, a, b);
  case OP_MAXIMUM: return pick(B, LLVMRealOGT, a, b);
  case OP_MINIMUM: return pick(B, LLVMRealOLT, a, b);
  case OP_NEG: return LLVMBuildFNeg(B->b, a, "");
  case OP_SCALE: return mul_(B, cst(B, (float)o->scalar), a);
  case OP_ADD_SCALAR: return add_(B, a, cst(B, (float)o->scalar));
  case OP_EXP: return fexp(B, a);
  case OP_LOG: return intrinsic(B, "llvm.log", a);
  case OP_SQRT: return intrinsic(B, "llvm.sqrt", a);
  case OP_RSQRT: return div_(B, cst(B, 1.0f), intrinsic(B, "llvm.sqrt", a));
  case OP_TANH: return ftanh(B, a);
  case OP_SIGMOID: return fsigmoid(B, a);
  case OP_RELU: return pick(B, LLVMRealOGT, a, cst(B, 0.0f));
  case OP_GELU: return mul_(B, mul_(B, cst(B, 0.5f), a), add_(B, cst(B, 1.0f), gelu_t(B, a)));
  case OP_SILU: return mul_(B, a, fsigmoid(B, a));
  case OP_GELU_BWD: { /* a = x, b = dy */
    LLVMValueRef t = gelu_t(B, a);
    LLVMValueRef du = mul_(B, cst(B, GELU_C), add_(B, cst(B, 1.0f), mul_(B, mul_(B, cst(B, 3.0f * GELU_A), a), a)));
    LLVMValueRef l = mul_(B, cst(B, 0.5f), add_(B, cst(B, 1.0f), t));
    LLVMValueRef r = mul_(B, mul_(B, mul_(B, cst(B, 0.5f), a), sub_(B, cst(B, 1.0f), mul_(B, t, t))), du);
    return mul_(B, b, add_(B, l, r));
  }
  case OP_SILU_BWD: { /* dy s (1 + x (1 - s)) */
    LLVMValueRef s = fsigmoid(B, a);
    return mul_(B, mul_(B, b, s), add_(B, cst(B, 1.0f), mul_(B, a, sub_(B, cst(B, 1.0f), s))));
  }
  case OP_CAST: case OP_BROADCAST_TO: return a; /* same dtype; the broadcast is the indexing */
  case OP_CONST: return cst(B, (float)o->scalar);
  default: die("llvm kernels: %s is not elementwise", ir_ops[o->op].name);
  }
}

/* Where a body is in its loops: the element (flat index), its row and column. */
typedef struct {
  const Kernel *k;
  LLVMValueRef *base;     /* the kernel's pointers: inputs, then outputs */
  LLVMValueRef row_base;  /* r * inner (flat kernels: 0) */
  LLVMValueRef *per_row;  /* K_EW: the value of each LLK_SCALAR / LLK_COL input for this row, as a float */
  LLVMValueRef *scalars;  /* K_ADAMW: lr, gscale, bc1, bc2; K_NORM: the row's mean and rstd */
  int phase;              /* K_NORM, K_NSTATS: NORM_SUM, NORM_SQ or NORM_OUT; K_NDX: DX_* */
} Ctx;

enum { NORM_SUM, NORM_SQ, NORM_OUT }; /* a norm's passes over its row: sum x, sum (x - mean)^2, y */

static void ew_body(Bld *B, const Ctx *c, LLVMValueRef j) {
  const LlkEw *e = &c->k->ew;
  LLVMValueRef flat = LLVMBuildAdd(B->b, c->row_base, j, ""), in[LLK_MAX_EW] = {0}, val[LLK_MAX_EW];
  for (int i = 0; i < e->nops; i++) {
    LLVMValueRef opnd[2] = {NULL, NULL};
    int arity = ir_ops[e->ops[i].op].nin;
    for (int s = 0; s < arity && s < 2; s++) {
      int x = e->ops[i].in[s];
      if (x >= 0) {
        opnd[s] = val[x];
        continue;
      }
      x = -1 - x;
      if (!in[x]) switch (e->idx[x]) {
        case LLK_FULL: in[x] = load(B, c->base[x], flat); break;
        case LLK_ROW: in[x] = load(B, c->base[x], j); break;
        case LLK_SCALAR: case LLK_COL: in[x] = splat(B, c->per_row[x]); break;
        }
      opnd[s] = in[x];
    }
    val[i] = ew_op(B, &e->ops[i], opnd[0], opnd[1]);
  }
  for (int o = 0; o < e->nout; o++) store(B, val[e->out_op[o]], c->base[e->nin + o], flat);
}

static void adamw_body(Bld *B, const Ctx *c, LLVMValueRef i) {
  const LlkAdamW *a = &c->k->adamw;
  LLVMValueRef p = load(B, c->base[0], i), g = load(B, c->base[1], i), m = load(B, c->base[2], i),
               v = load(B, c->base[3], i);
  LLVMValueRef lr = splat(B, c->scalars[0]), gs = splat(B, c->scalars[1]), bc1 = splat(B, c->scalars[2]),
               bc2 = splat(B, c->scalars[3]);
  LLVMValueRef gi = mul_(B, gs, g);
  LLVMValueRef mi = add_(B, mul_(B, cst(B, a->beta1), m), mul_(B, cst(B, 1.0f - a->beta1), gi));
  LLVMValueRef vi = add_(B, mul_(B, cst(B, a->beta2), v), mul_(B, mul_(B, cst(B, 1.0f - a->beta2), gi), gi));
  store(B, mi, c->base[2], i);
  store(B, vi, c->base[3], i);
  LLVMValueRef den = add_(B, intrinsic(B, "llvm.sqrt", mul_(B, vi, bc2)), cst(B, a->eps));
  LLVMValueRef upd = add_(B, div_(B, mul_(B, mi, bc1), den), mul_(B, cst(B, a->weight_decay), p));
  store(B, sub_(B, p, mul_(B, lr, upd)), c->base[0], i);
}

static bool is_rms(const Kernel *k) { return k->kind == K_NORM ? k->norm.rms : k->nb.rms; }

/* A norm's pass at row element j: returns what the pass sums (NULL for the output pass). */
static LLVMValueRef norm_body(Bld *B, const Ctx *c, LLVMValueRef j) {
  const LlkNorm *n = &c->k->norm;
  LLVMValueRef flat = LLVMBuildAdd(B->b, c->row_base, j, ""), x = load(B, c->base[0], flat);
  if (c->phase == NORM_SUM) return x;
  LLVMValueRef xm = is_rms(c->k) ? x : sub_(B, x, splat(B, c->scalars[0]));
  if (c->phase == NORM_SQ) return mul_(B, xm, xm);
  LLVMValueRef y = mul_(B, mul_(B, xm, splat(B, c->scalars[1])), load(B, c->base[1], j));
  if (!n->rms) y = add_(B, y, load(B, c->base[2], j));
  store(B, y, c->base[n->rms ? 2 : 3], flat);
  return NULL;
}

/* A norm backward's dx pass at row element j (p = {x, w, dy, mean, rstd, dx}; scalars: mean, rstd,
 * mean(g), mean(g xhat)): sums g = dy w (DX_G), g xhat (DX_GX), or stores dx (DX_OUT). */
enum { DX_G = NORM_OUT + 1, DX_GX, DX_OUT };
static LLVMValueRef ndx_body(Bld *B, const Ctx *c, LLVMValueRef j) {
  LLVMValueRef flat = LLVMBuildAdd(B->b, c->row_base, j, "");
  /* g rounded on its own (no FMA into g - mean(g)): the passes see the same g, so a row whose g are
   * all equal (d = 1) gives dx = 0 exactly, as the C kernel does */
  LLVMValueRef g = LLVMBuildFMul(B->b, load(B, c->base[2], flat), load(B, c->base[1], j), "");
  if (c->phase == DX_G) return g;
  LLVMValueRef xm = sub_(B, load(B, c->base[0], flat), splat(B, c->scalars[0])), rs = splat(B, c->scalars[1]);
  if (c->phase == DX_GX) return mul_(B, mul_(B, g, xm), rs);
  LLVMValueRef t = sub_(B, sub_(B, g, splat(B, c->scalars[2])), mul_(B, mul_(B, xm, rs), splat(B, c->scalars[3])));
  store(B, mul_(B, rs, t), c->base[5], flat);
  return NULL;
}

/* A norm backward's parameter gradients at columns j.. (p = {x, dy, mean, rstd, dw, db}): for r in
 * order, aw += dy (x - mean[r]) rstd[r], ab += dy; then dw = aw, db = ab. */
static void nparam_body(Bld *B, const Ctx *c, LLVMValueRef j) {
  const LlkNormBwd *n = &c->k->nb;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(B->b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(B->cx, B->fn, "ph"), bb = LLVMAppendBasicBlockInContext(B->cx, B->fn, "pb"),
                    out = LLVMAppendBasicBlockInContext(B->cx, B->fn, "px");
  LLVMBuildBr(B->b, head);
  LLVMPositionBuilderAtEnd(B->b, head);
  LLVMValueRef r = LLVMBuildPhi(B->b, B->i64, "pr"), aw = LLVMBuildPhi(B->b, ftype(B), "aw"), ab = LLVMBuildPhi(B->b, ftype(B), "ab");
  LLVMBuildCondBr(B->b, LLVMBuildICmp(B->b, LLVMIntSLT, r, i64c(B, n->rows), ""), bb, out);
  LLVMPositionBuilderAtEnd(B->b, bb);
  LLVMValueRef flat = LLVMBuildAdd(B->b, LLVMBuildMul(B->b, r, i64c(B, n->d), ""), j, "");
  LLVMValueRef dy = load(B, c->base[1], flat), x = load(B, c->base[0], flat);
  LLVMValueRef m = splat(B, load1(B, c->base[2], r)), rs = splat(B, load1(B, c->base[3], r));
  LLVMValueRef awn = add_(B, aw, mul_(B, mul_(B, dy, sub_(B, x, m)), rs)), abn = add_(B, ab, dy);
  LLVMValueRef rn = LLVMBuildAdd(B->b, r, i64c(B, 1), "");
  LLVMBasicBlockRef from[2] = {pre, LLVMGetInsertBlock(B->b)};
  LLVMBuildBr(B->b, head);
  LLVMValueRef rv[2] = {i64c(B, 0), rn}, awv[2] = {cst(B, 0.0f), awn}, abv[2] = {cst(B, 0.0f), abn};
  LLVMAddIncoming(r, rv, from, 2);
  LLVMAddIncoming(aw, awv, from, 2);
  LLVMAddIncoming(ab, abv, from, 2);
  LLVMPositionBuilderAtEnd(B->b, out);
  store(B, aw, c->base[4], j);
  if (!n->rms) store(B, ab, c->base[5], j);
}

/* A cross-entropy row's pass at element j (p = {logits, targets, rowloss, dlogits, g}; scalars: the
 * row's max, log-sum-exp, g): gives x (XE_MAX) or e^(x - max) (XE_SUM), or stores dlogits (XE_GRAD:
 * g e^(x - lse); XE_ZERO: 0). */
enum { XE_MAX = DX_OUT + 1, XE_SUM, XE_GRAD, XE_ZERO };
static LLVMValueRef xent_body(Bld *B, const Ctx *c, LLVMValueRef j) {
  LLVMValueRef flat = LLVMBuildAdd(B->b, c->row_base, j, "");
  if (c->phase == XE_ZERO) return store(B, cst(B, 0.0f), c->base[3], flat), NULL;
  LLVMValueRef x = load(B, c->base[0], flat);
  if (c->phase == XE_MAX) return x;
  if (c->phase == XE_SUM) return fexp(B, sub_(B, x, splat(B, c->scalars[0])));
  store(B, mul_(B, splat(B, c->scalars[2]), fexp(B, sub_(B, x, splat(B, c->scalars[1])))), c->base[3], flat);
  return NULL;
}

/* The body at item i; a value to reduce for a norm's or a cross-entropy's reductions, else NULL. */
static LLVMValueRef body(Bld *B, const Ctx *c, LLVMValueRef i) {
  if (c->k->kind == K_XENT) return xent_body(B, c, i);
  if (c->k->kind == K_NORM || c->k->kind == K_NSTATS) return norm_body(B, c, i);
  if (c->k->kind == K_NDX) return ndx_body(B, c, i);
  if (c->k->kind == K_NPARAM) return nparam_body(B, c, i), NULL;
  if (c->k->kind == K_EW) ew_body(B, c, i);
  else adamw_body(B, c, i);
  return NULL;
}

/* Ends a loop's body: back to head; the index phi i gets (first from `from`) and (next from the body),
 * the accumulator phi acc (when there is one) acc0 and accn likewise. */
static void loop_back(Bld *B, LLVMBasicBlockRef head, LLVMBasicBlockRef from, LLVMValueRef i, LLVMValueRef first,
                      LLVMValueRef next, LLVMValueRef acc, LLVMValueRef acc0, LLVMValueRef accn) {
  LLVMBasicBlockRef blocks[2] = {from, LLVMGetInsertBlock(B->b)};
  LLVMBuildBr(B->b, head);
  LLVMValueRef iv[2] = {first, next}, av[2] = {acc0, accn};
  LLVMAddIncoming(i, iv, blocks, 2);
  if (acc) LLVMAddIncoming(acc, av, blocks, 2);
}

enum { VR_NONE, VR_ADD, VR_MAX }; /* what vec_loop makes of its body's values */

/* acc + v, or max(acc, v) as the C kernels write it (v > acc ? v : acc) */
static LLVMValueRef reduce2(Bld *B, int red, LLVMValueRef acc, LLVMValueRef v) {
  return red == VR_MAX ? pick(B, LLVMRealOGT, v, acc) : add_(B, acc, v);
}

/* for (i = start; i + W <= end; i += W) body<W>(i); for (; i < end; i++) body<1>(i); and when the
 * body gives values (red), their sum or max: W lanes, reduced, then the tail's taken in order. */
static LLVMValueRef vec_loop(Bld *B, const Ctx *c, LLVMValueRef start, LLVMValueRef end, int red) {
  bool sum = red != VR_NONE;
  float id = red == VR_MAX ? -INFINITY : 0.0f;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(B->b);
  LLVMBasicBlockRef vh = LLVMAppendBasicBlockInContext(B->cx, B->fn, "vh"), vb = LLVMAppendBasicBlockInContext(B->cx, B->fn, "vb");
  LLVMBasicBlockRef sh = LLVMAppendBasicBlockInContext(B->cx, B->fn, "sh"), sb = LLVMAppendBasicBlockInContext(B->cx, B->fn, "sb");
  LLVMBasicBlockRef vx = LLVMAppendBasicBlockInContext(B->cx, B->fn, "vx");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(B->cx, B->fn, "done");
  LLVMBuildBr(B->b, vh);

  LLVMPositionBuilderAtEnd(B->b, vh);
  B->w = B->W;
  LLVMValueRef i = LLVMBuildPhi(B->b, B->i64, "i"), vacc = sum ? LLVMBuildPhi(B->b, ftype(B), "vacc") : NULL;
  LLVMValueRef inext = LLVMBuildAdd(B->b, i, i64c(B, B->W), "");
  LLVMBuildCondBr(B->b, LLVMBuildICmp(B->b, LLVMIntSLE, inext, end, ""), vb, vx);

  LLVMPositionBuilderAtEnd(B->b, vb);
  LLVMValueRef v = body(B, c, i);
  loop_back(B, vh, pre, i, start, inext, vacc, sum ? cst(B, id) : NULL, sum ? reduce2(B, red, vacc, v) : NULL);

  LLVMPositionBuilderAtEnd(B->b, vx); /* after the vectors: their lanes' sum starts the tail's */
  LLVMValueRef lanes = NULL;
  if (sum) {
    LLVMTypeRef vt = LLVMVectorType(B->f32, (unsigned)B->W);
    if (red == VR_MAX) { /* the lanes' max: no NaN among them where the C kernel's max is defined */
      unsigned fid = LLVMLookupIntrinsicID("llvm.vector.reduce.fmax", 23);
      lanes = LLVMBuildCall2(B->b, LLVMIntrinsicGetType(B->cx, fid, &vt, 1), LLVMGetIntrinsicDeclaration(B->mod, fid, &vt, 1),
                             &vacc, 1, "");
    } else {
      unsigned aid = LLVMLookupIntrinsicID("llvm.vector.reduce.fadd", 23);
      LLVMValueRef args[2] = {LLVMConstReal(B->f32, 0.0), vacc};
      lanes = LLVMBuildCall2(B->b, LLVMIntrinsicGetType(B->cx, aid, &vt, 1), LLVMGetIntrinsicDeclaration(B->mod, aid, &vt, 1),
                             args, 2, "");
      LLVMSetFastMathFlags(lanes, LLVMFastMathAllowReassoc); /* a tree over the lanes */
    }
  }
  LLVMBuildBr(B->b, sh);

  LLVMPositionBuilderAtEnd(B->b, sh);
  B->w = 1;
  LLVMValueRef k = LLVMBuildPhi(B->b, B->i64, "k"), sacc = sum ? LLVMBuildPhi(B->b, B->f32, "sacc") : NULL;
  LLVMBuildCondBr(B->b, LLVMBuildICmp(B->b, LLVMIntSLT, k, end, ""), sb, done);

  LLVMPositionBuilderAtEnd(B->b, sb);
  LLVMValueRef s = body(B, c, k);
  loop_back(B, sh, vx, k, i, LLVMBuildAdd(B->b, k, i64c(B, 1), ""), sacc, lanes, sum ? reduce2(B, red, sacc, s) : NULL);
  LLVMPositionBuilderAtEnd(B->b, done);
  return sacc;
}

/* for (r = lo; r < hi; r++) { row(r) }: opens the row loop's body (returns r), row_end closes it. */
typedef struct {
  LLVMBasicBlockRef pre, head, out;
  LLVMValueRef r;
} RowLoop;

static LLVMValueRef row_begin(Bld *B, RowLoop *L, LLVMValueRef lo, LLVMValueRef hi) {
  L->pre = LLVMGetInsertBlock(B->b);
  L->head = LLVMAppendBasicBlockInContext(B->cx, B->fn, "rh");
  LLVMBasicBlockRef rb = LLVMAppendBasicBlockInContext(B->cx, B->fn, "rb");
  L->out = LLVMAppendBasicBlockInContext(B->cx, B->fn, "out");
  LLVMBuildBr(B->b, L->head);
  LLVMPositionBuilderAtEnd(B->b, L->head);
  L->r = LLVMBuildPhi(B->b, B->i64, "r");
  LLVMBuildCondBr(B->b, LLVMBuildICmp(B->b, LLVMIntSLT, L->r, hi, ""), rb, L->out);
  LLVMPositionBuilderAtEnd(B->b, rb);
  LLVMAddIncoming(L->r, &lo, &L->pre, 1);
  return L->r;
}

static void row_end(Bld *B, RowLoop *L) {
  LLVMValueRef rnext = LLVMBuildAdd(B->b, L->r, i64c(B, 1), "");
  LLVMBasicBlockRef end = LLVMGetInsertBlock(B->b);
  LLVMBuildBr(B->b, L->head);
  LLVMAddIncoming(L->r, &rnext, &end, 1);
  LLVMPositionBuilderAtEnd(B->b, L->out);
}

/* A norm's row statistics at c->row_base (two passes): scalars[0] = the mean (RMSNorm: 0),
 * scalars[1] = 1 / sqrt(mean square about it + eps). */
static void row_stats(Bld *B, Ctx *c, int64_t d, float eps) {
  LLVMValueRef dfl = LLVMConstReal(B->f32, (float)d);
  c->phase = NORM_SUM;
  LLVMValueRef s = vec_loop(B, c, i64c(B, 0), i64c(B, d), VR_ADD);
  c->scalars[0] = is_rms(c->k) ? LLVMConstReal(B->f32, 0.0) : LLVMBuildFDiv(B->b, s, dfl, "");
  c->phase = NORM_SQ;
  LLVMValueRef ss = vec_loop(B, c, i64c(B, 0), i64c(B, d), VR_ADD);
  LLVMValueRef var = LLVMBuildFAdd(B->b, LLVMBuildFDiv(B->b, ss, dfl, ""), LLVMConstReal(B->f32, eps), "");
  c->scalars[1] = LLVMBuildFDiv(B->b, LLVMConstReal(B->f32, 1.0), intrinsic(B, "llvm.sqrt", var), "");
}

/* A cross-entropy's rows [lo, hi) (LlkXent): each row's loss and, with bwd, its dlogits, in the
 * order of runtime/kernels/xent.c (max, sum of e^(x - max), lse; dlogits after x[t] is read). */
static void xent_rows(Bld *B, Ctx *c, LLVMValueRef lo, LLVMValueRef hi) {
  const LlkXent *x = &c->k->xent;
  LLVMValueRef *p = c->base, *sc = c->scalars, g = x->bwd ? load1(B, p[4], i64c(B, 0)) : NULL;
  RowLoop L;
  LLVMValueRef r = row_begin(B, &L, lo, hi), zero = i64c(B, 0), len = i64c(B, x->len);
  c->row_base = LLVMBuildMul(B->b, r, i64c(B, x->V), "");
  LLVMValueRef ti = LLVMBuildLoad2(B->b, B->i32, LLVMBuildGEP2(B->b, B->i32, p[1], &r, 1, ""), "");
  LLVMSetAlignment(ti, 4);
  LLVMValueRef t = LLVMBuildSExt(B->b, ti, B->i64, ""), lossp = LLVMBuildGEP2(B->b, B->f64, p[2], &r, 1, "");
  LLVMBasicBlockRef skip = LLVMAppendBasicBlockInContext(B->cx, B->fn, "xskip"),
                    row = LLVMAppendBasicBlockInContext(B->cx, B->fn, "xrow"),
                    next = LLVMAppendBasicBlockInContext(B->cx, B->fn, "xnext");
  LLVMBuildCondBr(B->b, LLVMBuildICmp(B->b, LLVMIntSLT, t, zero, ""), skip, row);
  LLVMPositionBuilderAtEnd(B->b, skip); /* an ignored target: loss 0, dlogits 0 */
  LLVMBuildStore(B->b, LLVMConstReal(B->f64, 0.0), lossp);
  if (x->bwd) c->phase = XE_ZERO, vec_loop(B, c, zero, i64c(B, x->V), VR_NONE);
  LLVMBuildBr(B->b, next);
  LLVMPositionBuilderAtEnd(B->b, row);
  c->phase = XE_MAX;
  sc[0] = vec_loop(B, c, zero, len, VR_MAX);
  c->phase = XE_SUM;
  sc[1] = LLVMBuildFAdd(B->b, sc[0], intrinsic(B, "llvm.log", vec_loop(B, c, zero, len, VR_ADD)), ""); /* lse */
  LLVMValueRef at_t = LLVMBuildAdd(B->b, c->row_base, t, ""), xt = load1(B, p[0], at_t);
  LLVMBuildStore(B->b, LLVMBuildFSub(B->b, LLVMBuildFPExt(B->b, sc[1], B->f64, ""), LLVMBuildFPExt(B->b, xt, B->f64, ""), ""),
                 lossp);
  if (x->bwd) {
    sc[2] = g, c->phase = XE_GRAD;
    vec_loop(B, c, zero, len, VR_NONE);
    store(B, mul_(B, g, sub_(B, fexp(B, sub_(B, xt, sc[1])), cst(B, 1.0f))), p[3], at_t); /* B->w is 1 here */
    if (x->len < x->V) c->phase = XE_ZERO, vec_loop(B, c, len, i64c(B, x->V), VR_NONE);
  }
  LLVMBuildBr(B->b, next);
  LLVMPositionBuilderAtEnd(B->b, next);
  row_end(B, &L);
}

/* How many pointers a kernel takes. */
static int nptrs(const Kernel *k) {
  switch (k->kind) {
  case K_EW: return k->ew.nin + k->ew.nout;
  case K_ADAMW: return 5;
  case K_NORM: return k->norm.rms ? 3 : 4;
  case K_NSTATS: return 3;
  case K_NPARAM: return k->nb.rms ? 5 : 6;
  case K_XENT: return 5;
  default: return 6; /* K_NDX */
  }
}

static void build_kernel(Bld *B, const Kernel *k) {
  LLVMTypeRef params[3] = {B->i64, B->i64, B->ptr};
  B->fn = LLVMAddFunction(B->mod, k->name, LLVMFunctionType(LLVMVoidTypeInContext(B->cx), params, 3, 0));
  LLVMPositionBuilderAtEnd(B->b, LLVMAppendBasicBlockInContext(B->cx, B->fn, "entry"));
  LLVMValueRef lo = LLVMGetParam(B->fn, 0), hi = LLVMGetParam(B->fn, 1), pp = LLVMGetParam(B->fn, 2);
  int nptr = nptrs(k);
  LLVMValueRef base[2 * LLK_MAX_EW], per_row[LLK_MAX_EW] = {0}, scalars[4] = {0};
  for (int i = 0; i < nptr; i++) {
    LLVMValueRef idx = i64c(B, i);
    base[i] = LLVMBuildLoad2(B->b, B->ptr, LLVMBuildGEP2(B->b, B->ptr, pp, &idx, 1, ""), "");
  }
  Ctx c = {.k = k, .base = base, .row_base = i64c(B, 0), .per_row = per_row, .scalars = scalars};
  B->w = 1;
  if (k->kind == K_ADAMW) { /* lr, grad scale, and the bias corrections 1 / (1 - beta^step) in double */
    LLVMValueRef h[3];
    for (int i = 0; i < 3; i++) h[i] = load1(B, base[4], i64c(B, i));
    /* gscale NaN / Inf: a skipped step, nothing changes (ops.def): gscale - gscale == 0 only when finite */
    LLVMValueRef fin = LLVMBuildFCmp(B->b, LLVMRealOEQ, LLVMBuildFSub(B->b, h[1], h[1], ""), LLVMConstReal(B->f32, 0.0), "");
    LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(B->cx, B->fn, "upd"), skip = LLVMAppendBasicBlockInContext(B->cx, B->fn, "skip");
    LLVMBuildCondBr(B->b, fin, run, skip);
    LLVMPositionBuilderAtEnd(B->b, skip);
    LLVMBuildRetVoid(B->b);
    LLVMPositionBuilderAtEnd(B->b, run);
    LLVMValueRef step = LLVMBuildFPExt(B->b, h[2], B->f64, "");
    const float beta[2] = {k->adamw.beta1, k->adamw.beta2};
    for (int b = 0; b < 2; b++) {
      LLVMValueRef args[2] = {LLVMConstReal(B->f64, (double)beta[b]), step};
      LLVMTypeRef t = B->f64;
      unsigned id = LLVMLookupIntrinsicID("llvm.pow", 8);
      LLVMValueRef pw = LLVMBuildCall2(B->b, LLVMIntrinsicGetType(B->cx, id, &t, 1), LLVMGetIntrinsicDeclaration(B->mod, id, &t, 1),
                                       args, 2, "");
      LLVMValueRef bc = LLVMBuildFDiv(B->b, LLVMConstReal(B->f64, 1.0), LLVMBuildFSub(B->b, LLVMConstReal(B->f64, 1.0), pw, ""), "");
      scalars[2 + b] = LLVMBuildFPTrunc(B->b, bc, B->f32, "");
    }
    scalars[0] = h[0];
    scalars[1] = h[1];
    vec_loop(B, &c, lo, hi, VR_NONE);
  } else if (k->kind == K_NORM || k->kind == K_NSTATS) { /* per row: the mean, the mean square about it, the output */
    int64_t d = k->kind == K_NORM ? k->norm.d : k->nb.d;
    RowLoop L;
    LLVMValueRef r = row_begin(B, &L, lo, hi);
    c.row_base = LLVMBuildMul(B->b, r, i64c(B, d), "");
    row_stats(B, &c, d, k->kind == K_NORM ? k->norm.eps : k->nb.eps);
    if (k->kind == K_NSTATS) {
      LLVMBuildStore(B->b, scalars[0], at(B, base[1], r));
      LLVMBuildStore(B->b, scalars[1], at(B, base[2], r));
    } else {
      c.phase = NORM_OUT;
      vec_loop(B, &c, i64c(B, 0), i64c(B, d), VR_NONE);
    }
    row_end(B, &L);
  } else if (k->kind == K_NDX) { /* per row: mean(g), mean(g xhat), dx */
    const LlkNormBwd *n = &k->nb;
    RowLoop L;
    LLVMValueRef r = row_begin(B, &L, lo, hi), d = i64c(B, n->d), dfl = LLVMConstReal(B->f32, (float)n->d);
    c.row_base = LLVMBuildMul(B->b, r, d, "");
    scalars[0] = load1(B, base[3], r), scalars[1] = load1(B, base[4], r);
    c.phase = DX_G;
    scalars[2] = n->rms ? LLVMConstReal(B->f32, 0.0) : LLVMBuildFDiv(B->b, vec_loop(B, &c, i64c(B, 0), d, VR_ADD), dfl, "");
    c.phase = DX_GX;
    scalars[3] = LLVMBuildFDiv(B->b, vec_loop(B, &c, i64c(B, 0), d, VR_ADD), dfl, "");
    c.phase = DX_OUT;
    vec_loop(B, &c, i64c(B, 0), d, VR_NONE);
    row_end(B, &L);
  } else if (k->kind == K_XENT) { /* items are rows */
    xent_rows(B, &c, lo, hi);
  } else if (k->kind == K_NPARAM) { /* items are columns */
    vec_loop(B, &c, lo, hi, VR_NONE);
  } else if (k->ew.inner == 0) { /* items are elements */
    for (int x = 0; x < k->ew.nin; x++)
      if (k->ew.idx[x] == LLK_SCALAR) per_row[x] = load1(B, base[x], i64c(B, 0));
    vec_loop(B, &c, lo, hi, VR_NONE);
  } else { /* items are rows: for (r = lo; r < hi; r++) the row's elements */
    RowLoop L;
    LLVMValueRef r = row_begin(B, &L, lo, hi);
    B->w = 1;
    for (int x = 0; x < k->ew.nin; x++) {
      if (k->ew.idx[x] == LLK_SCALAR) per_row[x] = load1(B, base[x], i64c(B, 0));
      if (k->ew.idx[x] == LLK_COL) per_row[x] = load1(B, base[x], r);
    }
    c.row_base = LLVMBuildMul(B->b, r, i64c(B, k->ew.inner), "");
    vec_loop(B, &c, i64c(B, 0), i64c(B, k->ew.inner), VR_NONE);
    row_end(B, &L);
  }
  LLVMBuildRetVoid(B->b);
}

/* ---- compiling ------------------------------------------------------------------------------ */

/* *err = "what: msg" (malloc'd); disposes of msg, an LLVM message. */
static void fail(char **err, const char *what, char *msg) {
  size_t n = strlen(what) + (msg ? strlen(msg) : 0) + 4;
  *err = malloc(n);
  if (*err) snprintf(*err, n, "%s: %s", what, msg ? msg : "?");
  if (msg) LLVMDisposeMessage(msg);
}

bool llk_host_ok(char **why) {
  *why = NULL;
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  char *triple = LLVMGetDefaultTargetTriple(), *msg = NULL;
  LLVMTargetRef target;
  bool ok = !LLVMGetTargetFromTriple(triple, &target, &msg);
  if (!ok) fail(why, triple, msg);
  else if (msg) LLVMDisposeMessage(msg);
  LLVMDisposeMessage(triple);
  return ok;
}

bool llk_compile(Llk *k, const char *path, char **err) {
  *err = NULL;
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  char *triple = LLVMGetDefaultTargetTriple(), *cpu = LLVMGetHostCPUName(), *feat = LLVMGetHostCPUFeatures(), *msg = NULL;
  LLVMTargetRef target;
  bool ok = false;
  if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
    fail(err, "no LLVM target for the host", msg);
    LLVMDisposeMessage(triple), LLVMDisposeMessage(cpu), LLVMDisposeMessage(feat);
    return false;
  }
  LLVMTargetMachineRef tm =
      LLVMCreateTargetMachine(target, triple, cpu, feat, LLVMCodeGenLevelAggressive, LLVMRelocPIC, LLVMCodeModelDefault);
  Bld B = {.cx = LLVMContextCreate()};
  B.mod = LLVMModuleCreateWithNameInContext("shardc_kernels", B.cx);
  LLVMSetTarget(B.mod, triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(B.mod, td);
  B.b = LLVMCreateBuilderInContext(B.cx);
  B.f32 = LLVMFloatTypeInContext(B.cx), B.f64 = LLVMDoubleTypeInContext(B.cx);
  B.i32 = LLVMInt32TypeInContext(B.cx), B.i64 = LLVMInt64TypeInContext(B.cx);
  B.ptr = LLVMPointerTypeInContext(B.cx, 0);
  B.W = strstr(feat, "+avx512f") ? 16 : strstr(feat, "+avx") ? 8 : 4;
  for (int i = 0; i < k->n; i++) build_kernel(&B, k->k[i]);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e;
  if (LLVMVerifyModule(B.mod, LLVMReturnStatusAction, &msg)) {
    fail(err, "the kernels' IR does not verify", msg);
  } else if ((e = LLVMRunPasses(B.mod, "default<O3>", tm, po))) {
    char *m = LLVMGetErrorMessage(e);
    fail(err, "LLVM's optimiser failed", LLVMCreateMessage(m));
    LLVMDisposeErrorMessage(m);
  } else if (LLVMTargetMachineEmitToFile(tm, B.mod, (char *)path, LLVMObjectFile, &msg)) {
    fail(err, "cannot write the kernels' object file", msg);
  } else {
    if (msg) LLVMDisposeMessage(msg);
    ok = true;
  }
  LLVMDisposePassBuilderOptions(po);
  LLVMDisposeBuilder(B.b);
  LLVMDisposeTargetData(td);
  LLVMDisposeModule(B.mod);
  LLVMContextDispose(B.cx);
  LLVMDisposeTargetMachine(tm);
  LLVMDisposeMessage(triple), LLVMDisposeMessage(cpu), LLVMDisposeMessage(feat);
  return ok;
}
