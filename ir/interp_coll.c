/* ir/interp_coll.c — the reference interpreter's simulated collectives: all-reduce,
 * all-gather, reduce-scatter, all-to-all, broadcast and shard-slice over each group of a mesh axis (every
 * rank's input at once, in lockstep), and SEND/RECV through a mailbox. Ranks and groups are
 * the trainer's (rt_mesh_coords / rt_mesh_rank, runtime/mesh.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "interp_internal.h"

/* Rank with rank r's coordinates except coordinate c along ax. */
static int rank_with(const Interp *it, int r, int ax, int c) {
  int co[RT_AX_COUNT];
  rt_mesh_coords(&it->mesh, r, co);
  co[ax] = c;
  return rt_mesh_rank(&it->mesh, co);
}

/* ---- collectives --------------------------------------------------------------- */

/* in: Tensor[nranks] of input k; out: Tensor[nranks] of output k. Each rank's group is the
 * node's mesh axis, or the combined group of several (Attrs.mesh_with: the gradients' all-reduce
 * over dp x cp, ZeRO's shards over dp x cp), its members in rank order. */
bool interp_eval_coll(Interp *it, const Node *n, int k, const Tensor *in, Tensor *out) {
  int ax = n->a.mesh_axis, R = it->nranks, me = 0;
  int deg = interp_group(it, n, 0, &me, NULL);
  const Tensor **grp = interp_xcalloc((size_t)deg, sizeof(Tensor *));
  int *mem = interp_xcalloc((size_t)deg, sizeof *mem);
  bool ok = true;
  for (int r = 0; r < R && ok; r++) {
    interp_group(it, n, r, &me, mem);
    for (int c = 0; c < deg; c++) {
      grp[c] = &in[mem[c]];
      if (!ir_shape_eq(&grp[c]->shape, &grp[0]->shape)) {
        ok = interp_error(n, "group members' shapes differ along %s", rt_mesh_axis_name(ax));
        break;
      }
    }
    if (!ok) break;
    const Tensor *x = &in[r];
    int64_t cnt = ir_numel(&x->shape);
    switch (n->op) {
    case OP_ALL_REDUCE:
    case OP_REDUCE_SCATTER: {
      Tensor sum = tensor_new(n->out[k]->dtype, x->shape);
      for (int64_t i = 0; i < cnt; i++) {
        double acc = grp[0]->data[i];
        for (int c = 1; c < deg; c++) {
          double v = grp[c]->data[i];
          if (n->op == OP_ALL_REDUCE && n->a.reduce == RED_MAX) acc = v > acc ? v : acc;
          else acc += v;
        }
        if (n->op == OP_ALL_REDUCE && n->a.reduce == RED_AVG) acc /= deg;
        sum.data[i] = acc;
      }
      if (n->op == OP_ALL_REDUCE) {
        out[r] = sum;
        break;
      }
      int64_t len = x->shape.dim[n->a.axis];
      if (len % deg != 0) {
        tensor_free(&sum);
        ok = interp_error(n, "axis %d of size %lld does not split %d ways", n->a.axis, (long long)len, deg);
        break;
      }
      out[r] = interp_chunk_of(&sum, n->a.axis, deg, me, n->a.blocks, n->out[k]->dtype);
      tensor_free(&sum);
      break;
    }
    case OP_ALL_GATHER: out[r] = interp_unchunk_of(grp, deg, n->a.axis, n->a.blocks, n->out[k]->dtype); break;
    case OP_ALL_TO_ALL: { /* member c's chunk `me` of split_axis, gathered along axis */
      int64_t len = x->shape.dim[n->a.split_axis];
      if (len % deg != 0) {
        ok = interp_error(n, "axis %d of size %lld does not split %d ways", n->a.split_axis, (long long)len, deg);
        break;
      }
      Tensor *parts = interp_xcalloc((size_t)deg, sizeof(Tensor));
      const Tensor **pp = interp_xcalloc((size_t)deg, sizeof(Tensor *));
      for (int c = 0; c < deg; c++) {
        parts[c] = interp_chunk_of(grp[c], n->a.split_axis, deg, me, n->a.split_blocks, n->out[k]->dtype);
        pp[c] = &parts[c];
      }
      out[r] = interp_unchunk_of(pp, deg, n->a.axis, n->a.blocks, n->out[k]->dtype);
      for (int c = 0; c < deg; c++) tensor_free(&parts[c]);
      free(parts);
      free(pp);
      break;
    }
    case OP_BROADCAST:
      if (n->a.start < 0 || n->a.start >= deg) {
        ok = interp_error(n, "root %lld outside the %s group of %d", (long long)n->a.start, rt_mesh_axis_name(ax), deg);
        break;
      }
      out[r] = tensor_copy(grp[n->a.start]);
      break;
    default: unreachable();
    }
  }
  free(grp);
  free(mem);
  return ok;
}

static int peer(const Interp *it, int r, int ax, int64_t off) {
  int deg = it->mesh.dim[ax];
  int c = (int)(((interp_coord(it, r, (MeshAxis)ax) + off) % deg + deg) % deg);
  return rank_with(it, r, ax, c);
}

void interp_eval_send(Interp *it, const Node *n, const Tensor *in) {
  for (int r = 0; r < it->nranks; r++) {
    if (!interp_on_stage(it, n, r)) continue;
    if (it->nmail == it->capmail) {
      it->capmail = it->capmail ? it->capmail * 2 : 16;
      Message *m = realloc(it->mail, sizeof(Message) * (size_t)it->capmail);
      if (!m) die("interp: out of memory");
      it->mail = m;
    }
    it->mail[it->nmail++] = (Message){r, peer(it, r, n->a.mesh_axis, n->a.start), n->a.tag, tensor_copy(&in[r])};
  }
}

bool interp_eval_recv(Interp *it, const Node *n, Tensor *out) {
  for (int r = 0; r < it->nranks; r++) {
    if (!interp_on_stage(it, n, r)) {
      out[r] = tensor_new(n->out[0]->dtype, n->out[0]->shape);
      continue;
    }
    int src = peer(it, r, n->a.mesh_axis, n->a.start);
    int k = 0;
    while (k < it->nmail && !(it->mail[k].src == src && it->mail[k].dst == r && it->mail[k].tag == n->a.tag)) k++;
    if (k == it->nmail)
      return interp_error(n, "rank %d: nothing was sent from rank %d with tag %d", r, src, n->a.tag);
    out[r] = it->mail[k].t;
    memmove(&it->mail[k], &it->mail[k + 1], sizeof(Message) * (size_t)(it->nmail - k - 1));
    it->nmail--;
  }
  return true;
}

