/* tests/passes/test_memplan_views.c — the memory plan's column views (passes/memplan_views.c): a
 * last-axis slice read only by stride-taking operands (sdpa's q, k, v) is a view of its source at its
 * first column with the source's row stride; one another op reads stays a copy with bytes of its own;
 * a last-axis concat of sdpa_bwd's dq, dk, dv has them written into its column slots, its buffer live
 * from the producer on and clear of every value live there; a concat whose input is read elsewhere
 * copies.
 *
 * The graph (B 2, S 16, H 2, hd 16: d 32, fused 96 columns):
 *   qkv = tanh(x) [2, 16, 96]; q, k, v = slice(qkv) at columns 0, 32, 64
 *   o, lse = sdpa(q, k, v); kc = slice(qkv) at 32, also read by tanh (a copy)
 *   dout = tanh(o); dq, dk, dv = sdpa_bwd(q, k, v, o, lse, dout); dqkv = concat(dq, dk, dv)
 *   dout2 = tanh(dout); eq, ek, ev = sdpa_bwd(q, k, v, o, lse, dout2); e = concat(eq, ek, ev),
 *   eq also read by tanh (so e copies)
 *   loss = sum(dqkv) + sum(tanh(kc)) + sum(e) + sum(tanh(eq))
 *   fq, fk, fv = sdpa_bwd(..., tanh(dout2)); r = concat(fq, fk, fv), returned (so it copies)
 */
#include <stdio.h>
#include <string.h>

#include "memplan.h"
#include "passes.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static Value *slice_last(Graph *g, Value *x, int64_t start, int64_t len) {
  Attrs a = {0};
  a.axis = x->shape.rank - 1;
  a.start = start;
  a.len = len;
  return tb_op1(g, OP_SLICE, x, &a);
}

static Value *concat_last(Graph *g, Value *const *in) {
  Attrs a = {0};
  a.axis = in[0]->shape.rank - 1;
  return tb_op(g, OP_CONCAT, 3, in, &a);
}

static bool disjoint(const Value *u, const Value *v) {
  return u->offset + tb_bytes_of(u) <= v->offset || v->offset + tb_bytes_of(v) <= u->offset;
}

int main(void) {
  Arena ar;
  arena_init(&ar);
  Module *m = tb_module(&ar, "memplan_views");
  Graph *g = m->graph;
  const int64_t d = 32;
  Value *x = tb_input(g, "x", DT_F32, tb_shape(3, 2, 16, 96));
  Value *qkv = tb_op1(g, OP_TANH, x, NULL);
  Value *q = slice_last(g, qkv, 0, d), *k = slice_last(g, qkv, d, d), *v = slice_last(g, qkv, 2 * d, d);
  Attrs sa = {0};
  sa.heads = 2;
  sa.kv_heads = 2;
  sa.causal = 1;
  Node *fw = tb_node(g, OP_SDPA, 3, (Value *[]){q, k, v}, 2, &sa);
  Value *kc = slice_last(g, qkv, d, d);
  Value *tk = tb_op1(g, OP_TANH, kc, NULL);
  Value *dout = tb_op1(g, OP_TANH, fw->out[0], NULL);
  Node *bw = tb_node(g, OP_SDPA_BWD, 6, (Value *[]){q, k, v, fw->out[0], fw->out[1], dout}, 3, &sa);
  Value *dqkv = concat_last(g, bw->out);
  Value *dout2 = tb_op1(g, OP_TANH, dout, NULL);
  Node *bw2 = tb_node(g, OP_SDPA_BWD, 6, (Value *[]){q, k, v, fw->out[0], fw->out[1], dout2}, 3, &sa);
  Value *e = concat_last(g, bw2->out);
  Value *teq = tb_op1(g, OP_TANH, bw2->out[0], NULL);
  Value *s1 = tb_op1(g, OP_SUM, dqkv, NULL), *s2 = tb_op1(g, OP_SUM, tk, NULL), *s3 = tb_op1(g, OP_SUM, e, NULL),
        *s4 = tb_op1(g, OP_SUM, teq, NULL);
  Value *loss = tb_op2(g, OP_ADD, tb_op2(g, OP_ADD, s1, s2, NULL), tb_op2(g, OP_ADD, s3, s4, NULL), NULL);
  ir_add_result(g, loss, "loss");
  Value *dout3 = tb_op1(g, OP_TANH, dout2, NULL); /* a concat the graph returns: copies */
  Node *bw3 = tb_node(g, OP_SDPA_BWD, 6, (Value *[]){q, k, v, fw->out[0], fw->out[1], dout3}, 3, &sa);
  Value *r = concat_last(g, bw3->out);
  ir_add_result(g, r, "r");
  if (!pass_memplan(m)) {
    fprintf(stderr, "pass_memplan failed\n");
    return 1;
  }
  /* q, k, v: views of qkv's columns, its row stride */
  Value *qv[3] = {q, k, v};
  for (int i = 0; i < 3; i++)
    CHECK(qv[i]->ld == 96 && qv[i]->offset == qkv->offset + i * d * 4,
          "slice %d of qkv: ld %lld (96), at %lld (qkv at %lld + %lld)", i, (long long)qv[i]->ld,
          (long long)qv[i]->offset, (long long)qkv->offset, (long long)(i * d * 4));
  /* a slice another op reads: a copy in bytes of its own */
  CHECK(kc->ld == 0 && disjoint(kc, qkv), "slice read by tanh: ld %lld (0), at %lld (qkv at %lld)", (long long)kc->ld,
        (long long)kc->offset, (long long)qkv->offset);
  /* dq, dk, dv written into dqkv's columns; dqkv clear of everything live at the sdpa_bwd */
  for (int i = 0; i < 3; i++)
    CHECK(bw->out[i]->ld == 96 && bw->out[i]->offset == dqkv->offset + i * d * 4,
          "sdpa_bwd output %d: ld %lld (96), at %lld (dqkv at %lld + %lld)", i, (long long)bw->out[i]->ld,
          (long long)bw->out[i]->offset, (long long)dqkv->offset, (long long)(i * d * 4));
  int at = tb_pos_of(g, bw), checked = 0;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nout; j++) {
      const Value *u = g->nodes[i]->out[j];
      if (u->offset < 0 || u->ld || u == dqkv || i > at || tb_last_use(g, u) < at) continue;
      checked++;
      CHECK(disjoint(dqkv, u), "dqkv [%lld, +%lld) overlaps %%%d [%lld, +%lld), live at its producer",
            (long long)dqkv->offset, (long long)tb_bytes_of(dqkv), u->id, (long long)u->offset, (long long)tb_bytes_of(u));
    }
  CHECK(checked >= 4, "only %d values live at the sdpa_bwd checked (o, lse, dout, tanh(kc))", checked);
  CHECK(disjoint(dqkv, qkv), "dqkv at %lld overlaps qkv at %lld, whose views the sdpa_bwd reads", (long long)dqkv->offset,
        (long long)qkv->offset);
  /* a concat whose input is read elsewhere: copies, its inputs contiguous in their own bytes */
  for (int i = 0; i < 3; i++)
    CHECK(bw2->out[i]->ld == 0 && disjoint(bw2->out[i], e), "second sdpa_bwd output %d: ld %lld (0), at %lld (e at %lld)",
          i, (long long)bw2->out[i]->ld, (long long)bw2->out[i]->offset, (long long)e->offset);
  for (int i = 0; i < 3; i++)
    CHECK(bw3->out[i]->ld == 0 && disjoint(bw3->out[i], r), "a returned concat's input %d: ld %lld (0), at %lld (r at %lld)",
          i, (long long)bw3->out[i]->ld, (long long)bw3->out[i]->offset, (long long)r->offset);
  arena_free(&ar);
  if (failures) fprintf(stderr, "test_memplan_views: %d failures\n", failures);
  else printf("test_memplan_views: ok\n");
  return failures ? 1 : 0;
}
