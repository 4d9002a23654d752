/* passes/zero_master.c — ZeRO-1/2 under bf16 with persistent weight copies: the f32 master weights
 * stored split, and the bf16 copy what is gathered (Megatron-LM's distributed optimizer).
 *
 * Under `precision bf16` on the CUDA target with `weight_copy persistent` (passes/wshadow.c), compute
 * reads only the parameters' bf16 copies (STATE "bf16:<param>"); the f32 parameter is read by its
 * update alone. passes/zero.c's ZeRO-1/2 would still keep the whole f32 parameter on every rank,
 * update a slice of it, all-gather the updated f32 shard (4 B x P (g-1)/g per rank, g the group) and
 * cast the whole gathered parameter into the copy. Here, for such a parameter, instead:
 *     p                                 PARAM stored split S(g)@d: the rank's master shard (4 B x P / g)
 *     ps', m', v' = adamw_update(p, gs, m, v)   in place on the shard: next:<param> is the shard
 *     c  = cast(ps') -> bf16            the shard's bf16 copy (the update's own kernel writes it:
 *                                       codegen/target_cuda.c's copy_cast)
 *     y  = all_gather(c) over g along d the whole bf16 copy, written into the copy's own bytes
 *                                       (passes/memplan.c): result "next:bf16:<param>"
 * The same bits as the gathered f32 path: the cast is elementwise, so the cast of the shard gathered
 * is the cast of the gathered parameter. It saves 4 B x P (g-1)/g per rank (Module.wcopy.master_saved,
 * printed by `shardc plan` with the memory) and halves the gather's bytes (2 B x P (g-1)/g). The
 * group is zero.c's ZeroGroup (dp, or dp x cp under context parallelism).
 *
 * The master is a sharded PARAM like ZeRO-3's: checkpoints gather it whole (runtime/train/dist.c), so a
 * checkpoint of any stage resumes under any other; the copies are derived from the gathered
 * parameter at start, on resume and after loading weights (ir/interp.c, runtime/train/tensors.c).
 *
 * Where it applies (decided once, zero_master_wanted and zero_master_split): ZeRO 1 / 2 over a group of
 * more than one rank, for each parameter with a persistent copy, not with `offload` (the update runs on the host; its copies are the
 * offload path's). A parameter that another node reads in f32, or whose updated value anything but
 * the copy's cast reads, keeps zero.c's gathered f32 path (exact, only without the saving). Without
 * the persistent copies (f32 precision, the CPU target, `weight_copy per_layer`: compute casts the f32
 * parameter where it reads it) there is no copy to gather and the f32 parameter stays whole.
 */
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "zero.h"

/* (the persistent copies themselves are read off the IR, zero_master_split's copy_cast: the STATE
 * "bf16:<param>" that passes/wshadow.c made, so a pass replayed on the textual IR decides the same) */
bool zero_master_wanted(const Module *m) {
  if (m->plan.offload || m->plan.zero < 1 || m->plan.zero > 2) return false;
  const Graph *g = m->graph;
  for (int i = 0; i < g->nnodes; i++) /* (one walk: a plan without copies asks nothing per update) */
    if (g->nodes[i]->op == OP_STATE && ir_copy_source(g->nodes[i]->a.name)) return true;
  return false;
}

/* The cast of u's updated parameter into its persistent bf16 copy (result "next:bf16:<param>"). */
static Node *copy_cast(const Graph *g, const Node *u) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *c = g->nodes[i];
    if (c->op == OP_CAST && c->in[0] == u->out[0] && c->out[0]->dtype == DT_BF16 && ir_copy_written(g, c->out[0]))
      return c;
  }
  return NULL;
}

bool zero_master_split(Graph *g, Node *u, int d, ZeroGroup z, int64_t *saved) {
  Value *p = u->in[0];
  if (p->def->op != OP_PARAM || p->dtype != DT_F32 || ir_is_result(g, p) || ir_count_uses_deep(g, p) != 1) return false;
  if (!copy_cast(g, u) || ir_count_uses_deep(g, u->out[0]) != 1) return false;
  Value whole = *p;
  zero_split_type(p, &whole, d, z); /* the master shard: memplan allots 1/deg */
  *saved += (ir_numel(&whole.shape) - ir_numel(&p->shape)) * ir_dtype_size(DT_F32);
  return true;
}

void zero_master_gather_copy(Graph *g, Node *u, int d, ZeroGroup z) {
  Node *c = copy_cast(g, u);
  if (!c) die("zero_master: the copy's cast of %s is gone", u->in[0]->def->a.name);
  Value *y = c->out[0], whole = *y;
  zero_split_type(y, &whole, d, z); /* the cast of the updated shard */
  Value *ag = zero_gather_new(g, y, &whole, d, z, c->loc);
  int at = 0;
  while (g->nodes[at] != c) at++;
  ir_move_last(g, at + 1);
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == y) g->results[i] = ag; /* next:bf16:<param>: the gathered copy */
}
