/* passes/cost.c — the cost model (see cost.h): collective times, the timeline of one rank (its ops' times: cost_op.c)
 * with its communication channels, the pipeline, and the report. */
#include "cost.h"
#include "cost_op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "cost_llvm.h"
#include "diag.h"
#include "kernels/kernels.h" /* rt_attn_scores: the CPU attention's blocks */
#include "memplan.h"
#include "memplan_views.h"
#include "mesh.h"
#include "offload_sched.h"
#include "passes.h" /* fuse_sumsq_* */
#include "pipe_sched.h"
#include "print.h"
#include "ptrmap.h"

double cost_copy_time(const CostDevice *d, double bytes) {
  return bytes > 0 ? d->host_link.latency_s + bytes / d->host_link.bytes_per_s : 0;
}

double cost_host_time(const CostDevice *d, double bytes) { return bytes / d->host_bytes_per_s; }


/* ---- the timeline ------------------------------------------------------------------- */

typedef struct {
  double t;       /* the compute stream */
  double chan[2]; /* when each communication channel (in node, across nodes) is free */
  double host;    /* plan offload: where the host thread is (device nodes start no earlier: it enqueues them) */
  double link[2]; /* plan offload: when the host link is free, device -> host [0] and host -> device [1] */
} Clock;

/* A download of plan offload (a to_host of the top graph) and where passes/offload_sched.c starts it. */
typedef struct {
  const Node *n;
  OffloadIssue at;
  int own;        /* the to_host's position (where it stands: started there, sim_offload) */
} Download;

typedef struct {
  const Module *m;
  const CostDevice *d;
  CommVolumes v;
  int stage;      /* the pipeline stage simulated (nodes predicated on another are skipped); -1: none */
  PtrMap pending; /* Value* -> index into ends: an asynchronous collective's output and when it is done */
  double *ends;
  int nends, capends;
  double mult;    /* the product of the enclosing repeat counts (for the sums below) */
  CostReport *r;
  /* the pipeline's timeline (sim_rank of a stage, pt set): each instruction's time and what precedes it */
  PipeTimes *pt;
  const int *pos; /* [norder]: program-order instruction -> its index in its stage's list */
  int at;         /* the node simulated: its position in its graph (sim_graph; -1: not known) */
  bool copy_in_update; /* the node simulated is the cast the update before it stores (sim_graph) */
  bool host_copy_cast; /* ... the host's cast its host update stores (ir_host_update_casts_copy) */
  int cur;        /* the instruction (Node.instr) whose nodes ran last on this stage; 0: none yet */
  double gap;     /* time on other nodes since then (the next instruction's pre) */
  double rlat, rcopy; /* a pipeline receive's transfer, for the instruction that follows it */
  double last_end; /* the stage's clock when its last instruction ended */
  uint64_t *rstage; /* [top graph value id]: the stages reading it (ir_reader_stages' masks); NULL without pp */
  /* under pp, per top-level node (by position), found once for every stage's walk: the stages it
   * runs on (ir_node_stages; 0: every one) and the bytes the others zero-fill (zero_fill_bytes) */
  uint64_t *top_stages;
  double *top_zero;
  Download *dl;   /* plan offload: the top graph's downloads (NULL: none) */
  int ndl;
  PtrMap uses;    /* CUDA fusion groups: cost_cuda_group_uses, counted when first needed (counted) */
  bool counted;
  bool first;     /* the body simulated runs its loop's first iteration */
  const Node **carried; /* deferred scatters whose loop's last iteration is waited in the next loop's first
                           (Node.defer_last): simulated, their loop continues */
  int ncarried, capcarried;
  bool full;      /* every iteration of a loop simulated, not two extrapolated (cost_nodes_clock's check) */
} Sim;

static void set_pending(Sim *s, const Value *v, double end) {
  intptr_t i;
  if (ptrmap_get(&s->pending, v, &i)) {
    s->ends[i] = end;
    return;
  }
  if (s->nends == s->capends) {
    s->capends = s->capends ? 2 * s->capends : 64;
    s->ends = realloc(s->ends, (size_t)s->capends * sizeof *s->ends);
    if (!s->ends) die("cost: out of memory");
  }
  s->ends[s->nends] = end;
  ptrmap_put(&s->pending, v, s->nends++);
}

static void wait_for(Sim *s, const Value *v, Clock *c) {
  intptr_t i;
  if (ptrmap_get(&s->pending, v, &i) && s->ends[i] > c->t) c->t = s->ends[i];
}

/* The link a collective of n's group crosses (*side: 0 in node, 1 across nodes) and the share of
 * its bandwidth that one of the node's rings gets; NULL when the group is one rank. */
static const CostLink *link_of(const Sim *s, const Node *n, int *side, double *share) {
  int ax = ir_comm_row(n);
  *side = 0;
  *share = 1;
  if (ax < 0 || ax >= IR_COMM_ROWS) return NULL;
  int gs = s->v.group_size[ax];
  if (gs <= 1) return NULL;
  *side = s->v.across_nodes[ax];
  *share = ir_comm_link_share(s->m->mesh ? s->m->mesh->devices_per_node : 0, s->v.across_nodes[ax], s->v.members_per_node[ax]);
  return &s->d->link[*side];
}

/* Seconds of one collective over its group's link; *side: the channel. */
static double coll_time(const Sim *s, const Node *n, int *side) {
  double share;
  const CostLink *l = link_of(s, n, side, &share);
  if (!l || n->op == OP_RECV) return 0;
  int gs = s->v.group_size[ir_comm_row(n)];
  double bus = (double)ir_comm_node_bytes(n) * ir_comm_bus_factor(n->op, gs);
  return ir_comm_ring_steps(n->op, gs) * l->latency_s + bus * share / l->bytes_per_s;
}

/* A pipeline transfer (send / recv over pp, passes/pipe.c's): on the sender a copy of what it sends
 * (the runtime sends from a copy and goes on: rt_coll_send); on the wire the link's latency; on the
 * receiver its bytes over the link's bandwidth (what its receive waits for once the data is there). */
static bool pipe_p2p(const Node *n) { return (n->op == OP_SEND || n->op == OP_RECV) && n->stage && n->a.mesh_axis == RT_AX_PP; }

static void p2p_times(const Sim *s, const Node *n, double *lat, double *copy) {
  const MeshMap *mm = s->m->mesh;
  *lat = *copy = 0;
  if (!mm || s->stage < 0) return;
  /* the link between this stage's ranks and the peer stage's (pp is the outermost axis: rank i of
   * stage st is st x rps + i); across nodes, the stage's ranks on a node share its network */
  int rps = mm->world / mm->dim[RT_AX_PP], peer = s->stage + (int)n->a.start, across = 0;
  for (int i = 0; i < rps; i++)
    across += rt_mesh_node(mm, s->stage * rps + i) != rt_mesh_node(mm, peer * rps + i);
  const CostLink *l = &s->d->link[across > 0];
  double share = across ? fmin(across, mm->devices_per_node) : 1;
  *lat = l->latency_s;
  *copy = (double)ir_comm_node_bytes(n) * share / l->bytes_per_s;
}

static bool runs_here(const Sim *s, const Node *n) { return s->stage < 0 || ir_runs_on(n, s->stage); }

/* Whether node i of g, a fusion group's member, runs inside the LLVM kernel of the elementwise run an earlier
 * member starts, with no call of its own (Module.cpu_llvm_kernels): the run as codegen/cg.c's cg_group_run cuts it
 * (the group's members from the first that runs here after one that does not, while they run here; node by
 * node where a member reads one before that start) and the kernel as codegen/target_llvm.c's ew_run makes it,
 * where passes/cost_llvm.c says one kernel runs it (else each member is a call). */
static bool llvm_in_run(const Sim *s, const Graph *g, int i) {
  int id = g->nodes[i]->group;
  if (!id || i == 0 || g->nodes[i - 1]->group != id || !runs_here(s, g->nodes[i - 1])) return false;
  int p = i - 1, e = i + 1;
  while (p > 0 && g->nodes[p - 1]->group == id && runs_here(s, g->nodes[p - 1])) p--;
  while (e < g->nnodes && g->nodes[e]->group == id && runs_here(s, g->nodes[e])) e++;
  if (e - p > LLK_MAX_EW) return false;
  for (int k = p; p > 0 && g->nodes[p - 1]->group == id && k < e; k++) /* (after a member that does not run here) */
    for (int j = 0; j < g->nodes[k]->nin; j++)
      for (int q = p - 1; q >= 0 && g->nodes[q]->group == id; q--)
        if (g->nodes[q] == g->nodes[k]->in[j]->def) return false;
  const Node *mem[LLK_MAX_EW];
  const Value *ext[LLK_MAX_EW];
  int next = 0;
  for (int k = p; k < e; k++) {
    const Node *n = mem[k - p] = g->nodes[k];
    for (int j = 0; j < n->nin && j < 2; j++) {
      const Value *v = n->in[j];
      bool seen = false;
      for (int q = p; q < k && !seen; q++) seen = g->nodes[q]->out[0] == v;
      for (int x = 0; x < next && !seen; x++) seen = ext[x] == v;
      if (seen) continue;
      if (next == LLK_MAX_EW) return false;
      ext[next++] = v;
    }
  }
  return llk_ew_run_ok(mem, e - p, ext, next, NULL, NULL);
}

static bool has_async(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (ir_comm_async(g->nodes[i]) || (g->nodes[i]->body && has_async(g->nodes[i]->body))) return true;
  return false;
}

static void sim_graph(Sim *s, const Graph *g, Clock *c);

/* ---- plan offload (passes/zero_offload.c puts the copies in, passes/offload_sched.c says when) ---- */

/* A node the host runs: one that makes a host value from host values (the update, the casts). */
static bool host_node(const Node *n) {
  return n->nout > 0 && n->out[0]->host && n->op != OP_TO_HOST && !(ir_ops[n->op].flags & F_SOURCE);
}

/* A copy of `bytes` on the host link, direction dir (0: to the host, 1: to the device), that may start
 * at `ready`: its end. Under offload_sync the device and the host wait for it where it starts. */
static double copy_on(Sim *s, Clock *c, int dir, double ready, double bytes) {
  double dt = cost_copy_time(s->d, bytes);
  s->r->d2h_s += dir ? 0 : s->mult * dt;
  s->r->h2d_s += dir ? s->mult * dt : 0;
  s->r->d2h_bytes += dir ? 0 : s->mult * bytes;
  s->r->h2d_bytes += dir ? s->mult * bytes : 0;
  s->r->d2h_copies += dir ? 0 : s->mult;
  s->r->h2d_copies += dir ? s->mult : 0;
  double start = fmax(ready, c->link[dir]);
  if (s->d->offload_sync) start = fmax(start, fmax(c->t, c->host));
  c->link[dir] = start + dt;
  if (s->d->offload_sync) c->t = c->host = c->link[dir];
  return c->link[dir];
}

/* The downloads offload_sched starts after top-graph node `after` (-1: at the step's start), the
 * compute stream at c->t (the copies follow the device work enqueued before them); t0: when node
 * `after` started. A stacked gradient's rows start at the end of each iteration of the loop that
 * makes them (its iterations taken as equal), the rows of every such gradient of the loop in turn. */
static void issue_downloads(Sim *s, Clock *c, int after, double t0) {
  const Node *loop = NULL;
  for (int k = 0; k < s->ndl; k++) {
    const Download *w = &s->dl[k];
    if (w->at.after != after || w->at.after == w->own || !runs_here(s, w->n)) continue;
    if (w->at.rows) loop = w->at.rows;
    else set_pending(s, w->n->out[0], copy_on(s, c, 0, after < 0 ? 0 : c->t, cost_value_bytes(w->n->in[0])));
  }
  if (!loop) return;
  int64_t count = loop->a.count;
  double *end = calloc((size_t)s->ndl + 1, sizeof *end);
  if (!end) die("cost: out of memory");
  double t1 = c->t;
  for (int64_t i = 0; i < count; i++)
    for (int k = 0; k < s->ndl; k++) {
      const Download *w = &s->dl[k];
      if (w->at.after == after && w->at.rows == loop && runs_here(s, w->n))
        end[k] = copy_on(s, c, 0, t0 + (t1 - t0) * (double)(i + 1) / (double)count, cost_value_bytes(w->n->in[0]) / (double)count);
    }
  for (int k = 0; k < s->ndl; k++)
    if (s->dl[k].at.after == after && s->dl[k].at.rows == loop && runs_here(s, s->dl[k].n))
      set_pending(s, s->dl[k].n->out[0], end[k]);
  free(end);
}

/* A host wait on value v's copy (where a to_host or a host node reads it). */
static void host_wait(Sim *s, const Value *v, Clock *c) {
  intptr_t i;
  if (ptrmap_get(&s->pending, v, &i) && s->ends[i] > c->host) c->host = s->ends[i];
}

/* n, a to_host, a to_device or a host node of plan offload: advances the host, the link, the pending
 * copies; false for any other node. copy_cast: n is the cast the host update before it stores. */
static bool sim_offload(Sim *s, const Node *n, Clock *c, bool copy_cast) {
  if (n->op == OP_TO_HOST) {
    intptr_t i;
    if (!ptrmap_get(&s->pending, n->out[0], &i)) /* started where it stands */
      set_pending(s, n->out[0], copy_on(s, c, 0, c->t, cost_value_bytes(n->in[0])));
    host_wait(s, n->out[0], c);
    return true;
  }
  if (n->op == OP_TO_DEVICE) { /* issued by the host once there; the device waits at its first reader */
    host_wait(s, n->in[0], c);
    set_pending(s, n->out[0], copy_on(s, c, 1, fmax(c->host, c->t), cost_value_bytes(n->in[0])));
    return true;
  }
  if (!host_node(n)) return false;
  double bytes = 0;
  for (int j = 0; j < n->nin && !copy_cast; j++) {
    host_wait(s, n->in[j], c);
    bytes += cost_value_bytes(n->in[j]);
  }
  for (int j = 0; j < n->nout; j++) bytes += cost_value_bytes(n->out[j]);
  double dt = cost_host_time(s->d, bytes);
  c->host += dt;
  s->r->host_s += s->mult * dt;
  return true;
}

/* launch: false for a member of a CUDA fusion group after its first (one kernel runs the group) */
static void sim_node(Sim *s, const Node *n, Clock *c, bool launch) {
  if (sim_offload(s, n, c, s->host_copy_cast)) return;
  for (int j = 0; j < n->nin; j++) wait_for(s, n->in[j], c);
  if (c->host > c->t) c->t = c->host; /* enqueued once the host got here */
  if (n->op == OP_REPEAT || n->op == OP_CALL) {
    int64_t count = n->op == OP_REPEAT ? n->a.count : 1;
    double outer = s->mult;
    s->mult = outer * (double)count;
    /* iterations reach a steady state at once (the same body each time): simulate two, extrapolate
     * the second's increments; the sums above are taken once with the repeat's multiplier */
    CostReport *keep = s->r, scratch;
    Clock c1 = *c;
    bool was_first = s->first;
    s->first = true;
    sim_graph(s, n->body, c);
    s->first = false;
    if (count > 1 && s->full) { /* (cost_nodes_clock's check: every iteration simulated) */
      memset(&scratch, 0, sizeof scratch);
      s->r = &scratch;
      for (int64_t i = 1; i < count; i++) sim_graph(s, n->body, c);
      s->r = keep;
    } else if (count > 1) {
      c1 = *c;
      memset(&scratch, 0, sizeof scratch);
      s->r = &scratch; /* the second iteration is timed, not summed again */
      sim_graph(s, n->body, c);
      s->r = keep;
      double k = (double)(count - 2), dt = c->t - c1.t;
      c->t += k * dt;
      /* a channel idle at both iterations' ends (behind the compute) starts each iteration afresh: it keeps
       * the second's lag behind the compute (extrapolating its own increment there, which holds the first
       * iteration's different lag, ran a sync channel ahead of the compute: Llama-3-405B dp 32 tp 8+sp pp 8
       * z2 `defer_waits off`, a phantom 215 ms backlog of the last stage's B loop on its tp channel, which
       * its next F's first tp collective waited for); one ahead carries its backlog on */
      for (int i = 0; i < 2; i++)
        c->chan[i] += k * (c->chan[i] <= c->t - k * dt && c1.chan[i] <= c1.t ? dt : c->chan[i] - c1.chan[i]);
    }
    s->mult = outer;
    s->first = was_first;
    if (has_async(n->body)) /* stacked gradients reduced in place: waited after the loop */
      for (int j = n->a.ncarry; j < n->nout; j++) set_pending(s, n->out[j], fmax(c->chan[0], c->chan[1]));
    for (int j = 0; j < n->body->nnodes; j++) /* ... or in the next loop's first iteration */
      if (n->body->nodes[j]->defer_last) {
        set_pending(s, n->body->nodes[j]->out[0], fmax(c->chan[0], c->chan[1]));
        if (s->ncarried == s->capcarried) {
          s->capcarried = s->capcarried ? 2 * s->capcarried : 16;
          if (!(s->carried = realloc(s->carried, (size_t)s->capcarried * sizeof *s->carried))) die("cost: out of memory");
        }
        s->carried[s->ncarried++] = n->body->nodes[j];
      }
    return;
  }
  if (ir_ops[n->op].flags & F_COLL) {
    int side;
    double dt = coll_time(s, n, &side);
    const Node *loop = n->graph->owner; /* an all_gather `skiplast` runs on count - 1 of its loop's iterations */
    if (n->a.skiplast && loop && loop->op == OP_REPEAT && loop->a.count > 0)
      dt *= (double)(loop->a.count - 1) / (double)loop->a.count;
    s->r->comm_s[side] += s->mult * dt;
    if (pipe_p2p(n)) { /* the sender copies and goes on; the wire and the receiver's copy: the timeline's */
      s->r->comm_async_s += s->mult * dt;
      if (n->op == OP_SEND) c->t += 2 * (double)ir_comm_node_bytes(n) / s->d->bytes_per_s + s->d->op_overhead_s;
      return;
    }
    bool async = ir_comm_async(n);
    if (!async) {
      double start = fmax(c->t, c->chan[side]);
      c->t = c->chan[side] = start + dt;
      return;
    }
    s->r->comm_async_s += s->mult * dt;
    double hidden = s->d->overlap * dt;
    c->t += dt - hidden; /* the part the computing core does itself */
    double start = fmax(c->t, c->chan[side]);
    c->chan[side] = start + hidden;
    for (int j = 0; j < n->nout; j++) set_pending(s, n->out[j], c->chan[side]);
    return;
  }
  TimeKind kind;
  double extra = 0;
  int kernels = launch ? 1 : 0;
  if (s->m->target == TARGET_CPU && s->m->cpu_llvm_kernels && launch && llk_node_calls(n) > 0)
    kernels = llk_node_calls(n); /* (a norm's backward: three) */
  if (s->m->target == TARGET_CUDA && launch) {
    kernels = cost_cuda_kernels(n, s->at, &extra);
    if (!kernels) return; /* computed in another node's kernel */
    if (kernels < 0) kernels = 0; /* copies, no kernel: its bytes' time only (a sibling GEMM: its FLOPs) */
  }
  if (s->m->target == TARGET_CUDA && n->group > 0 && n->op != OP_MATMUL) {
    if (!s->counted) cost_cuda_group_uses(s->m, &s->uses);
    s->counted = true;
    extra -= cost_cuda_group_unmoved(n, s->at, &s->uses);
  }
  double dt = cost_op_time(s->m, s->d, n, s->copy_in_update, extra, &kind);
  if (kind == T_FREE) return;
  double oh = kernels * s->d->op_overhead_s;
  c->t += dt + oh;
  double w = s->mult;
  if (kind == T_GEMM)
    s->r->gemm_s += w * dt, s->r->gemm_flop += w * cost_gemm_flop(n), s->r->gemm_calls += cost_gemm_launches(s->m, n) ? w : 0;
  else if (kind == T_ATTN) s->r->attn_s += w * dt;
  else s->r->mem_s += w * dt;
  s->r->overhead_s += w * oh;
  s->r->kernels += (int64_t)w * kernels;
  s->r->kernels_by[kind - T_GEMM] += (int64_t)w * kernels;
}

/* The pipeline's timeline, one top-level node of a stage at a time: an instruction's nodes
 * (Node.instr) add to its time, a receive's transfer goes to the instruction after it, anything
 * else (the sums of finished micro-batches, the step's start) is the next instruction's pre. */
static void record(Sim *s, const Node *n, double dt, double t_end) {
  if (n->instr > 0 && s->m->pipe->order_stage[n->instr - 1] == s->stage) {
    int k = s->pos[n->instr - 1];
    if (s->cur != n->instr) { /* the instruction starts */
      s->pt->pre[s->stage][k] += s->gap;
      s->pt->lat[s->stage][k] += s->rlat;
      s->pt->recv[s->stage][k] += s->rcopy;
      s->gap = s->rlat = s->rcopy = 0;
      s->cur = n->instr;
    }
    s->pt->dur[s->stage][k] += dt + s->gap; /* (a node between two of its own: counted in it) */
    s->gap = 0;
    s->last_end = t_end;
  } else if (pipe_p2p(n) && n->op == OP_RECV) {
    p2p_times(s, n, &s->rlat, &s->rcopy);
    s->cur = 0;
  } else {
    s->gap += dt; /* before the next instruction, or inside this one when its nodes follow */
  }
}

/* Bytes another stage's node n makes that this stage zero-fills (codegen: the outputs a node
 * outside n's stage reads, for the sums over pp). */
static double zero_fill_bytes(const Sim *s, const Node *n) {
  double b = 0;
  if (!s->rstage || n->graph != s->m->graph || n->op == OP_SEND || n->op == OP_RECV) return 0;
  for (int k = 0; k < n->nout; k++) {
    if (s->rstage[n->out[k]->id] & ~ir_node_stages(n)) b += cost_value_bytes(n->out[k]); /* codegen's read_elsewhere */
  }
  return b;
}

static void sim_graph(Sim *s, const Graph *g, Clock *c) {
  bool cuda = s->m->target == TARGET_CUDA, top = s->pt && g == s->m->graph, offload = s->dl && g == s->m->graph;
  bool known = s->top_stages && g == s->m->graph && s->stage >= 0 && s->stage < 64; /* the top level's masks found once */
  uint64_t bit = known ? 1ull << s->stage : 0;
  if (offload) issue_downloads(s, c, -1, 0);
  /* a body's deferred reduce-scatters (Node.defer_wait, passes/memplan_defer.c): the previous iteration's
   * waited before the node that writes the scatter's input again (codegen/emit.c: before its fusion group) */
  int nd = 0, cap = g->parent ? g->nnodes + (s->first ? s->ncarried : 0) : 0;
  const Node **dn = cap ? malloc((size_t)cap * sizeof *dn) : NULL;
  int *dpos = cap ? malloc((size_t)cap * sizeof *dpos) : NULL;
  if (cap && (!dn || !dpos)) die("cost: out of memory");
  for (int i = 0; g->parent && i < g->nnodes; i++) {
    const Node *w = g->nodes[i]->defer_wait;
    if (!w) continue;
    int p = 0;
    while (p < g->nnodes && g->nodes[p] != w) p++;
    while (p > 0 && p < g->nnodes && g->nodes[p]->group && g->nodes[p - 1]->group == g->nodes[p]->group) p--;
    dn[nd] = g->nodes[i], dpos[nd++] = p;
  }
  /* the previous loop's last iteration's (Node.defer_last: this loop continues it), in the first iteration */
  for (int k = 0; g->parent && s->first && k < s->ncarried; k++) {
    const Node *w = s->carried[k]->defer_last;
    if (w->graph != g) continue;
    int p = 0;
    while (p < g->nnodes && g->nodes[p] != w) p++;
    while (p > 0 && p < g->nnodes && g->nodes[p]->group && g->nodes[p - 1]->group == g->nodes[p]->group) p--;
    dn[nd] = s->carried[k], dpos[nd++] = p;
    s->carried[k--] = s->carried[--s->ncarried];
  }
  for (int i = 0; i < g->nnodes; i++) {
    for (int k = 0; k < nd; k++)
      if (dpos[k] == i) wait_for(s, dn[k]->out[0], c);
    if (known && s->top_stages[i] && !(s->top_stages[i] & bit) && !(s->top_zero[i] > 0)) continue;
    const Node *n = g->nodes[i];
    if (!runs_here(s, n)) {
      double z = known ? s->top_zero[i] : zero_fill_bytes(s, n);
      if (z > 0) { /* a memset, between this stage's instructions */
        double dt = z / s->d->bytes_per_s + s->d->op_overhead_s;
        c->t += dt;
        s->r->mem_s += s->mult * dt;
        if (top) record(s, n, dt, c->t);
      }
      continue;
    }
    s->copy_in_update = cuda && ir_update_casts_copy(g, i); /* one kernel with the update */
    s->host_copy_cast = cuda && ir_host_update_casts_copy(g, i);
    bool launch = !(cuda && n->group > 0 && i > 0 && g->nodes[i - 1]->group == n->group) && !s->copy_in_update;
    if (!cuda && s->m->cpu_llvm_kernels && llvm_in_run(s, g, i)) launch = false;
    double t0 = c->t;
    s->at = i;
    sim_node(s, n, c, launch);
    s->copy_in_update = s->host_copy_cast = false;
    if (top) record(s, n, c->t - t0, c->t);
    if (offload) issue_downloads(s, c, i, t0);
  }
  free(dn);
  free(dpos);
}

/* One stage's (or, without pp, the rank's) step: the timeline's end, every async collective waited. */
static double sim_rank(Sim *s, int stage, CostReport *r) {
  s->stage = stage;
  s->r = r;
  s->mult = 1;
  s->ncarried = 0;
  Clock c = {0};
  const Graph *g = s->m->graph;
  s->ndl = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_TO_HOST) {
      if (!s->dl && !(s->dl = calloc((size_t)g->nnodes, sizeof *s->dl))) die("cost: out of memory");
      s->dl[s->ndl++] = (Download){g->nodes[i], offload_issue(g, g->nodes[i]), offload_slot(g, g->nodes[i])};
    }
  sim_graph(s, g, &c);
  ptrmap_free(&s->pending);
  memset(&s->pending, 0, sizeof s->pending);
  s->nends = 0;
  free(s->dl);
  s->dl = NULL;
  return fmax(fmax(c.t, c.host), fmax(fmax(c.chan[0], c.chan[1]), fmax(c.link[0], c.link[1])));
}

/* Every stage simulated (or the rank, without pp); with cp, the pipeline's timeline recorded and
 * played (cp->sched, cp->t). *busy_max / *busy_sum: the stages' own times; r: the busiest's parts. */
static void sim_stages(const Module *m, const CostDevice *d, CostReport *r, CostPipe *cp, double *busy_max,
                       double *busy_sum, int64_t (*kstage)[RT_KC_COUNT], double *fstage) {
  Sim s = {.m = m, .d = d};
  ir_comm_groups(m, &s.v); /* (the groups alone: the sim times collectives by them, never reads the volumes) */
  memplan_views_hold(); /* (the IR as it is throughout: each graph's reads indexed once, cost_op_time's views) */
  const PipePlan *p = m->pipe;
  int nst = p ? p->pp : 1;
  int *pos = NULL;
  if (p) {
    s.rstage = calloc((size_t)m->graph->next_value_id + 1, sizeof(uint64_t));
    if (!s.rstage) die("cost: out of memory");
    ir_reader_stages(m->graph, s.rstage, m->graph->next_value_id);
    const Graph *g = m->graph;
    s.top_stages = calloc((size_t)g->nnodes + 1, sizeof *s.top_stages);
    s.top_zero = calloc((size_t)g->nnodes + 1, sizeof *s.top_zero);
    if (!s.top_stages || !s.top_zero) die("cost: out of memory");
    for (int i = 0; i < g->nnodes; i++) {
      s.top_stages[i] = ir_node_stages(g->nodes[i]);
      s.top_zero[i] = zero_fill_bytes(&s, g->nodes[i]);
    }
  }
  if (cp) { /* program-order instruction -> its place in its stage's list (each stage's order is its list's) */
    memset(cp, 0, sizeof *cp);
    cp->sched = pipe_sched_make_timed(p->kind, p->pp, p->nmb, p->v, p->times);
    cp->t = pipe_times_new(&cp->sched, true);
    cp->tail = calloc((size_t)nst, sizeof(double));
    cp->stage_end = calloc((size_t)nst, sizeof(double));
    cp->start = calloc((size_t)nst, sizeof(double *));
    pos = calloc((size_t)p->norder + 1, sizeof(int));
    int *seen = calloc((size_t)nst, sizeof(int));
    if (!cp->tail || !cp->stage_end || !cp->start || !pos || !seen) die("cost: out of memory");
    for (int k = 0; k < p->norder; k++) pos[k] = seen[p->order_stage[k]]++;
    for (int st = 0; st < nst; st++) {
      if (seen[st] != cp->sched.len[st]) die("cost: stage %d runs %d instructions, its list has %d", st, seen[st], cp->sched.len[st]);
      if (!(cp->start[st] = calloc((size_t)cp->sched.len[st] + 1, sizeof(double)))) die("cost: out of memory");
    }
    free(seen);
    s.pt = &cp->t;
    s.pos = pos;
  }
  *busy_max = *busy_sum = 0;
  CostReport last = {0};
  for (int st = 0; st < nst; st++) {
    CostReport one;
    memset(&one, 0, sizeof one);
    s.cur = 0;
    s.gap = s.rlat = s.rcopy = s.last_end = 0;
    double busy = sim_rank(&s, p ? st : -1, &one);
    if (cp) cp->tail[st] = busy - s.last_end;
    *busy_sum += busy;
    if (st == 0 || busy > *busy_max) {
      *busy_max = busy;
      *r = one; /* the busiest stage's parts */
    }
    if (st == nst - 1) last = one;
    if (kstage) memcpy(kstage[st], one.kernels_by, sizeof one.kernels_by);
    if (fstage) fstage[st] = one.gemm_flop;
  }
  r->last_s[0] = last.gemm_s, r->last_s[1] = last.attn_s, r->last_s[2] = last.mem_s, r->last_s[3] = last.overhead_s;
  r->last_gemm_calls = last.gemm_calls;
  memplan_views_release();
  free(s.ends);
  free(s.carried);
  ptrmap_free(&s.uses);
  free(s.rstage);
  free(s.top_stages);
  free(s.top_zero);
  free(pos);
  if (cp) {
    cp->span = pipe_sched_play(&cp->sched, &cp->t, &cp->bubble, cp->start, cp->stage_end);
    cp->bubble_steady = cp->bubble;
    for (int st = 0; st < nst; st++)
      if (cp->stage_end[st] + cp->tail[st] > cp->step_s) cp->step_s = cp->stage_end[st] + cp->tail[st];
    if (d->time_spread > 0 && d->time_spread_s > 0) { /* the machine's spread: the median of 101 plays */
      cp->spread = d->time_spread, cp->spread_s = d->time_spread_s;
      double span = pipe_sched_play_spread(&cp->sched, &cp->t, cp->spread, cp->spread_s, 101, &cp->bubble);
      cp->step_s += span - cp->span;
    }
  }
}

static Clock nodes_clock(const Module *m, const CostDevice *d, const Node *const *nodes, int n, bool full) {
  Sim s = {.m = m, .d = d, .stage = -1, .mult = 1, .at = -1, .full = full};
  CostReport r;
  memset(&r, 0, sizeof r);
  s.r = &r;
  ir_comm_groups(m, &s.v); /* (the groups alone: the sim times collectives by them, never reads the volumes) */
  Clock c = {0};
  memplan_views_hold();
  for (int i = 0; i < n; i++) sim_node(&s, nodes[i], &c, true);
  memplan_views_release();
  ptrmap_free(&s.pending);
  ptrmap_free(&s.uses);
  free(s.ends);
  free(s.carried);
  return c;
}

double cost_nodes_time(const Module *m, const CostDevice *d, const Node *const *nodes, int n) {
  Clock c = nodes_clock(m, d, nodes, n, false);
  return fmax(fmax(c.t, c.host), fmax(fmax(c.chan[0], c.chan[1]), fmax(c.link[0], c.link[1])));
}

void cost_nodes_clock(const Module *m, const CostDevice *d, const Node *const *nodes, int n, bool full, CostClock *out) {
  Clock c = nodes_clock(m, d, nodes, n, full);
  out->t = c.t;
  out->chan[0] = c.chan[0];
  out->chan[1] = c.chan[1];
}

bool cost_pipe(const Module *m, const CostDevice *d, CostPipe *cp) {
  if (!m->pipe || !m->pipe->norder) return false;
  CostReport r;
  double bmax, bsum;
  sim_stages(m, d, &r, cp, &bmax, &bsum, NULL, NULL);
  return true;
}

void cost_pipe_free(CostPipe *cp) {
  for (int st = 0; cp->start && st < cp->sched.pp; st++) free(cp->start[st]);
  free(cp->start);
  free(cp->tail);
  free(cp->stage_end);
  pipe_times_free(&cp->sched, &cp->t);
  pipe_sched_free(&cp->sched);
  memset(cp, 0, sizeof *cp);
}

void cost_stage_kernels(const Module *m, const CostDevice *d, int64_t (*out)[RT_KC_COUNT], double *gemm_flop) {
  CostReport r;
  double bmax, bsum;
  memset(&r, 0, sizeof r);
  sim_stages(m, d, &r, NULL, &bmax, &bsum, out, gemm_flop);
}

void cost_estimate(const Module *m, const CostDevice *d, CostReport *r) {
  memset(r, 0, sizeof *r);
  const PipePlan *p = m->pipe;
  CostPipe cp;
  bool piped = p && p->norder;
  double busy_max, busy_sum;
  sim_stages(m, d, r, piped ? &cp : NULL, &busy_max, &busy_sum, NULL, NULL);
  r->compute_s = r->gemm_s + r->attn_s + r->mem_s + r->overhead_s;
  double step = busy_max;
  if (piped) { /* the stages' timeline: each its own start, its instructions played with the transfers, its end */
    r->bubble = cp.bubble;
    step = fmax(busy_max, cp.step_s);
    r->bubble_s = step - busy_sum / p->pp;
    cost_pipe_free(&cp);
  }
  if (r->d2h_s + r->h2d_s + r->host_s > 0) { /* plan offload: the same step with free copies and host work */
    CostDevice free_copies = *d;
    free_copies.host_link = (CostLink){0, INFINITY};
    free_copies.host_bytes_per_s = INFINITY;
    free_copies.offload_sync = 0;
    CostReport r0;
    double free_max, free_sum;
    memset(&r0, 0, sizeof r0);
    sim_stages(m, &free_copies, &r0, NULL, &free_max, &free_sum, NULL, NULL);
    r->offload_exposed_s = busy_max > free_max ? busy_max - free_max : 0;
    busy_max = free_max; /* (the communication exposed: that step's) */
  }
  r->exposed_comm_s = busy_max - r->compute_s > 1e-9 * busy_max ? busy_max - r->compute_s : 0;
  r->step_s = step;
  double flops = ir_training_flops(m, &r->tokens); /* per token; one walk for both */
  r->tokens_per_s = step > 0 ? (double)r->tokens / step : 0;
  int world = m->mesh ? m->mesh->world : 1;
  r->mfu = step > 0 && d->peak_flops > 0 ? flops * r->tokens_per_s / (world * d->peak_flops) : 0;
}

const char *cost_human_time(char *buf, size_t size, double s) {
  if (s >= 1) snprintf(buf, size, "%.3g s", s);
  else if (s >= 1e-3) snprintf(buf, size, "%.3g ms", s * 1e3);
  else snprintf(buf, size, "%.3g us", s * 1e6);
  return buf;
}

const char *cost_human_rate(char *buf, size_t size, double x) {
  if (x >= 1e9) snprintf(buf, size, "%.4g G", x * 1e-9);
  else if (x >= 1e6) snprintf(buf, size, "%.4g M", x * 1e-6);
  else if (x >= 1e3) snprintf(buf, size, "%.4g k", x * 1e-3);
  else snprintf(buf, size, "%.4g", x);
  return buf;
}

void cost_print(FILE *f, const Module *m, const CostDevice *d, const CostReport *r) {
  char a[32], b[32], c[32], e[32];
  fprintf(f, "# predicted step per rank (cost model, passes/cost.c; device: %s)\n", d->source);
  fprintf(f, "#   device: GEMM %.4g GFLOP/s, attention %.4g GFLOP/s, bandwidth %.4g GB/s, %s per kernel; links: in node "
             "%.4g GB/s + %s, across nodes %.4g GB/s + %s; async overlap %.0f%%\n",
          d->gemm_flops * 1e-9, d->attn_flops * 1e-9, d->bytes_per_s * 1e-9, cost_human_time(a, sizeof a, d->op_overhead_s),
          d->link[0].bytes_per_s * 1e-9, cost_human_time(b, sizeof b, d->link[0].latency_s), d->link[1].bytes_per_s * 1e-9,
          cost_human_time(c, sizeof c, d->link[1].latency_s), 100 * d->overlap);
  fprintf(f, "#   compute        %10s  GEMM %s, attention %s, bandwidth-bound %s, %lld kernel calls %s\n",
          cost_human_time(a, sizeof a, r->compute_s), cost_human_time(b, sizeof b, r->gemm_s),
          cost_human_time(c, sizeof c, r->attn_s), cost_human_time(e, sizeof e, r->mem_s), (long long)r->kernels,
          cost_human_time((char[32]){0}, 32, r->overhead_s));
  fprintf(f, "#   kernel calls   %s %lld, %s %lld, %s %lld (the trainer checks its own against each stage's)\n",
          rt_kern_class_names[RT_KC_GEMM], (long long)r->kernels_by[RT_KC_GEMM], rt_kern_class_names[RT_KC_ATTN],
          (long long)r->kernels_by[RT_KC_ATTN], rt_kern_class_names[RT_KC_MEM], (long long)r->kernels_by[RT_KC_MEM]);
  fprintf(f, "#   communication  %10s  in node %s, across nodes %s; asynchronous %s; exposed %s\n",
          cost_human_time(a, sizeof a, r->comm_s[0] + r->comm_s[1]), cost_human_time(b, sizeof b, r->comm_s[0]),
          cost_human_time(c, sizeof c, r->comm_s[1]), cost_human_time(e, sizeof e, r->comm_async_s),
          cost_human_time((char[32]){0}, 32, r->exposed_comm_s));
  if (r->d2h_bytes + r->h2d_bytes + r->host_s > 0) {
    fprintf(f, "#   offload        %10s  exposed: host update %s (%.4g GB/s), copies D2H %s (%.4g MB), H2D %s (%.4g MB) "
               "over %.4g GB/s + %s a copy, %s\n",
            cost_human_time(a, sizeof a, r->offload_exposed_s), cost_human_time(b, sizeof b, r->host_s),
            d->host_bytes_per_s * 1e-9, cost_human_time(c, sizeof c, r->d2h_s), r->d2h_bytes * 1e-6,
            cost_human_time(e, sizeof e, r->h2d_s), r->h2d_bytes * 1e-6, d->host_link.bytes_per_s * 1e-9,
            cost_human_time((char[32]){0}, 32, d->host_link.latency_s),
            d->offload_sync ? "synchronous (offload_sync)" : "overlapped (passes/offload_sched.c)");
  }
  if (m->pipe)
    fprintf(f, "#   pipeline bubble %9s  %.1f%% of the step idle (schedule %s)\n", cost_human_time(a, sizeof a, r->bubble_s),
            100 * r->bubble, pipe_sched_name(m->pipe->kind));
  fprintf(f, "#   step           %10s  %lld tokens: %s tokens/s, MFU %.1f%%\n", cost_human_time(a, sizeof a, r->step_s),
          (long long)r->tokens, cost_human_rate(b, sizeof b, r->tokens_per_s), 100 * r->mfu);
}
