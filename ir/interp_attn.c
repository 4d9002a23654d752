/* ir/interp_attn.c — the reference interpreter's attention kernels: rope (at row positions or at
 * given positions), sdpa and its backward, and the blocks ring attention is made of (attn_block,
 * its backward, attn_combine; passes/shard_cp.c). One kernel serves sdpa and the blocks: a key is
 * visible to a query unless causal and the key's global position exceeds the query's (sdpa: the
 * positions are the row indices). */
#include <math.h>
#include <stdlib.h>

#include "diag.h"
#include "interp_internal.h"

/* rope (pos NULL: row s at position s) and rope_at (row s at pos[s]), plus start. */
static void ev_rope(const Node *n, const Tensor *a, const double *pos, Tensor *y) {
  int64_t B = a->shape.dim[0], S = a->shape.dim[1], C = a->shape.dim[2];
  int H = n->a.heads;
  int64_t hd = C / H, half = hd / 2;
  double sign = n->a.inverse ? -1.0 : 1.0;
  *y = tensor_new(a->dtype, a->shape);
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++)
      for (int h = 0; h < H; h++) {
        const double *xp = a->data + (b * S + s) * C + h * hd;
        double *yp = y->data + (b * S + s) * C + h * hd;
        double p = pos ? pos[s] : (double)s;
        for (int64_t i = 0; i < half; i++) {
          double ang = sign * (p + (double)n->a.start) * pow(n->a.theta, -2.0 * (double)i / (double)hd);
          double c = cos(ang), sn = sin(ang);
          yp[i] = xp[i] * c - xp[i + half] * sn;
          yp[i + half] = xp[i + half] * c + xp[i] * sn;
        }
      }
}

/* Attention geometry from q and k, and the positions (NULL: row indices). */
typedef struct {
  int64_t B, S, T, H, KV, hd; /* batch, query len, key len, heads, kv heads, head dim */
  double scale;               /* 1 / sqrt(hd) */
  bool causal;
  const double *qpos, *kpos; /* [S], [T] global positions, or NULL */
} Attn;

static Attn attn_of(const Node *n, const Tensor *q, const Tensor *k, const Tensor *qp, const Tensor *kp) {
  Attn g;
  g.B = q->shape.dim[0];
  g.S = q->shape.dim[1];
  g.T = k->shape.dim[1];
  g.H = n->a.heads;
  g.KV = n->a.kv_heads;
  g.hd = q->shape.dim[2] / g.H;
  g.scale = 1.0 / sqrt((double)g.hd);
  g.causal = n->a.causal;
  g.qpos = qp ? qp->data : NULL;
  g.kpos = kp ? kp->data : NULL;
  return g;
}

static bool visible(const Attn *g, int64_t s, int64_t t) {
  if (!g->causal) return true;
  double qs = g->qpos ? g->qpos[s] : (double)s, kt = g->kpos ? g->kpos[t] : (double)t;
  return kt <= qs;
}

static const double *row(const Tensor *t, int64_t b, int64_t s, int64_t h, int64_t hd) {
  return t->data + (b * t->shape.dim[1] + s) * t->shape.dim[2] + h * hd;
}

static double score(const Attn *g, const double *qr, const double *kr) {
  double acc = 0;
  for (int64_t d = 0; d < g->hd; d++) acc += qr[d] * kr[d];
  return acc * g->scale;
}

/* (q, k, v) -> (o, lse) over the visible keys; no visible key: o 0, lse -inf. */
static void attn_fwd(const Attn *g, const Tensor *q, const Tensor *k, const Tensor *v, Tensor *y) {
  y[0] = tensor_new(q->dtype, q->shape);
  y[1] = tensor_new(DT_F32, ir_shape(3, (int64_t[]){g->B, g->H, g->S}));
  double *p = interp_xcalloc((size_t)(g->T ? g->T : 1), sizeof(double));
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->H; h++) {
      int64_t kh = h / (g->H / g->KV);
      for (int64_t s = 0; s < g->S; s++) {
        const double *qr = row(q, b, s, h, g->hd);
        double mx = -INFINITY;
        for (int64_t t = 0; t < g->T; t++) {
          p[t] = visible(g, s, t) ? score(g, qr, row(k, b, t, kh, g->hd)) : -INFINITY;
          if (p[t] > mx) mx = p[t];
        }
        double lse = -INFINITY;
        if (mx > -INFINITY) {
          double sum = 0;
          for (int64_t t = 0; t < g->T; t++) sum += exp(p[t] - mx);
          lse = mx + log(sum);
        }
        y[1].data[(b * g->H + h) * g->S + s] = lse;
        if (lse == -INFINITY) continue;
        double *orow = y[0].data + (b * g->S + s) * q->shape.dim[2] + h * g->hd;
        for (int64_t t = 0; t < g->T; t++) {
          if (p[t] == -INFINITY) continue;
          double w = exp(p[t] - lse);
          const double *vr = row(v, b, t, kh, g->hd);
          for (int64_t d = 0; d < g->hd; d++) orow[d] += w * vr[d];
        }
      }
    }
  free(p);
}

/* inputs (q, k, v, o, lse, do) -> (dq, dk, dv), o and lse of the whole attention. */
static void attn_bwd(const Attn *g, Tensor *const *x, Tensor *y) {
  for (int i = 0; i < 3; i++) y[i] = tensor_new(x[i]->dtype, x[i]->shape);
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->H; h++) {
      int64_t kh = h / (g->H / g->KV);
      for (int64_t s = 0; s < g->S; s++) {
        const double *qr = row(x[0], b, s, h, g->hd), *orow = row(x[3], b, s, h, g->hd),
                     *dor = row(x[5], b, s, h, g->hd);
        double lse = x[4]->data[(b * g->H + h) * g->S + s];
        if (lse == -INFINITY) continue;
        double Dsum = 0;
        for (int64_t d = 0; d < g->hd; d++) Dsum += dor[d] * orow[d];
        double *dq = (double *)row(&y[0], b, s, h, g->hd);
        for (int64_t t = 0; t < g->T; t++) {
          if (!visible(g, s, t)) continue;
          const double *kr = row(x[1], b, t, kh, g->hd), *vr = row(x[2], b, t, kh, g->hd);
          double P = exp(score(g, qr, kr) - lse);
          double dP = 0;
          for (int64_t d = 0; d < g->hd; d++) dP += dor[d] * vr[d];
          double dS = P * (dP - Dsum) * g->scale;
          double *dk = (double *)row(&y[1], b, t, kh, g->hd), *dv = (double *)row(&y[2], b, t, kh, g->hd);
          for (int64_t d = 0; d < g->hd; d++) {
            dv[d] += P * dor[d];
            dq[d] += dS * kr[d];
            dk[d] += dS * qr[d];
          }
        }
      }
    }
}

/* (o1, lse1, o2, lse2) -> (o, lse): merged by log-sum-exp, per head. */
static void attn_combine(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *o1 = x[0], *l1 = x[1], *o2 = x[2], *l2 = x[3];
  int64_t B = o1->shape.dim[0], S = o1->shape.dim[1], C = o1->shape.dim[2], H = n->a.heads, hd = C / H;
  y[0] = tensor_new(o1->dtype, o1->shape);
  y[1] = tensor_new(DT_F32, l1->shape);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++) {
        int64_t li = (b * H + h) * S + s;
        double a = l1->data[li], c = l2->data[li], m = a > c ? a : c;
        if (m == -INFINITY) {
          y[1].data[li] = -INFINITY;
          continue;
        }
        double lse = m + log(exp(a - m) + exp(c - m)), w1 = exp(a - lse), w2 = exp(c - lse);
        y[1].data[li] = lse;
        int64_t at = (b * S + s) * C + h * hd;
        for (int64_t d = 0; d < hd; d++) y[0].data[at + d] = w1 * o1->data[at + d] + w2 * o2->data[at + d];
      }
}

void interp_eval_attn(const Node *n, Tensor *const *x, Tensor *y) {
  switch (n->op) {
  case OP_ROPE: ev_rope(n, x[0], NULL, y); return;
  case OP_ROPE_AT: ev_rope(n, x[0], x[1]->data, y); return;
  case OP_SDPA: {
    Attn g = attn_of(n, x[0], x[1], NULL, NULL);
    attn_fwd(&g, x[0], x[1], x[2], y);
    return;
  }
  case OP_SDPA_BWD: {
    Attn g = attn_of(n, x[0], x[1], NULL, NULL);
    attn_bwd(&g, x, y);
    return;
  }
  case OP_ATTN_BLOCK: {
    Attn g = attn_of(n, x[0], x[1], x[3], x[4]);
    attn_fwd(&g, x[0], x[1], x[2], y);
    return;
  }
  case OP_ATTN_BLOCK_BWD: {
    Attn g = attn_of(n, x[0], x[1], x[6], x[7]);
    attn_bwd(&g, x, y);
    return;
  }
  case OP_ATTN_COMBINE: attn_combine(n, x, y); return;
  default: die("interp: %s is not an attention op", ir_ops[n->op].name);
  }
}
