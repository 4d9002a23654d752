/* ir/read_header.c — the IR reader's module header: the `topology`, `plan:` and `recipe:`
 * lines ir_print_module_header (ir/print.c) writes, back into Module.topo, .plan, .recipe.
 * Fields the printer leaves out keep their defaults; the plan line also takes
 * `bucket_bytes N` and `cross_node_tp on|off`, which the printer does not print.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "plan_options.h"
#include "read_impl.h"

static const char *const on_off[] = {"off", "on"};

static bool on_off_value(Reader *r, bool *out) {
  int k;
  if (!rd_choice(r, &k, on_off, 2, "on or off")) return false;
  *out = k == 1;
  return true;
}

/* `, intra|inter KIND [Nx] B GB/s` */
static bool parse_link(Reader *r, Topology *t) {
  static const char *const which[] = {"intra", "inter"};
  int w, kind;
  if (!rd_choice(r, &w, which, 2, "intra or inter") ||
      !rd_choice(r, &kind, ir_link_names, LINK_COUNT, "a link kind (nvlink, pcie, efa, infiniband, ethernet, shm)"))
    return false;
  Link *l = w == 0 ? &t->intra : &t->inter;
  l->kind = (LinkKind)kind;
  l->count = 1;
  rd_ws(r);
  size_t digits = strspn(r->p, "0123456789");
  if (digits && r->p[digits] == 'x') { /* `4x 12.5 GB/s`: four links */
    if (!rd_int(r, &l->count, 1, 1 << 16, "a link count")) return false;
    r->p++;
  }
  double gbs;
  if (!rd_f64(r, &gbs, "a bandwidth in GB/s")) return false;
  l->bytes_per_s = gbs * 1e9;
  rd_ws(r);
  const char *at = r->p;
  const char *u = rd_token(r, ",");
  if (!u || strcmp(u, "GB/s") != 0) return rd_fail(r, at, "expected GB/s, found %s", u ? u : "end of line");
  return true;
}

/* topology NAME: N node[s] x D (cpu ranks | DEVICE) [(G GiB)] [, intra ...] [, inter ...] */
static bool parse_topology(Reader *r) {
  Topology *t = &r->m->topo;
  rd_ws(r);
  const char *at = r->p;
  t->name = rd_token(r, ":");
  if (!t->name) return rd_fail(r, at, "expected the topology's name");
  if (!rd_expect(r, ':') || !rd_int(r, &t->nodes, 1, 1 << 20, "a node count")) return false;
  if (!rd_keyword(r, "nodes") && !rd_keyword(r, "node")) return rd_fail(r, r->p, "expected 'nodes', found %s", rd_found(r));
  if (!rd_keyword(r, "x")) return rd_fail(r, r->p, "expected 'x', found %s", rd_found(r));
  if (!rd_int(r, &t->devices_per_node, 1, 1 << 20, "devices per node")) return false;
  rd_ws(r);
  at = r->p;
  if (rd_keyword(r, "cpu") && rd_keyword(r, "ranks")) {
    t->cpu_only = true;
    t->device = "cpu";
  } else {
    r->p = at;
    t->device = rd_token(r, ",(");
    if (!t->device) return rd_fail(r, at, "expected a device name or 'cpu ranks', found %s", rd_found(r));
  }
  if (rd_eat(r, '(')) {
    double gib;
    if (!rd_f64(r, &gib, "device memory in GiB")) return false;
    if (!rd_keyword(r, "GiB")) return rd_fail(r, r->p, "expected GiB, found %s", rd_found(r));
    if (!rd_expect(r, ')')) return false;
    t->device_memory = gib * 1024.0 * 1024 * 1024;
  }
  while (rd_eat(r, ','))
    if (!parse_link(r, t)) return false;
  r->m->has_topology = true;
  return true;
}

static bool parse_plan(Reader *r) {
  static const char *const keys[] = {"dp", "tp", "pp", "cp", "sp", "zero", "offload", "microbatches",
                                     "schedule", "recompute", "bucket_bytes", "cross_node_tp", "cp_mode",
                                     "weight_copy", "coalesce", "defer_waits", "zb_w"};
  static const char *const scheds[] = {"gpipe", "1f1b", "interleaved", "zb"};
  static const char *const recs[] = {"none", "full", "selective"};
  Plan *p = &r->m->plan;
  if (!rd_expect(r, ':')) return false;
  while (!rd_eol(r)) {
    int k, v;
    rd_ws(r);
    const char *at = r->p;
    if (!rd_choice(r, &k, keys, 17, "a plan field")) return false;
    PlanOpt opt = ir_plan_opt_of_key(keys[k]);
    if (opt < PLAN_OPT_COUNT) p->opt_loc[opt] = rd_loc(r, at); /* refused below unless applied */
    bool ok = true;
    switch (k) {
    case 0:
      if (rd_keyword(r, "auto")) p->dp = 0;
      else ok = rd_int(r, &p->dp, 1, 1 << 20, "dp");
      break;
    case 1: ok = rd_int(r, &p->tp, 1, 1 << 20, "tp"); break;
    case 2: ok = rd_int(r, &p->pp, 1, 1 << 20, "pp"); break;
    case 3: ok = rd_int(r, &p->cp, 1, 1 << 20, "cp"); break;
    case 4: ok = on_off_value(r, &p->sp); break;
    case 5: ok = rd_int(r, &p->zero, 0, 3, "zero"); break;
    case 6:
      p->offload = true;
      p->opt_loc[PLAN_OPT_OFFLOAD] = p->loc;
      break;
    case 7: ok = rd_int(r, &p->microbatches, 1, 1 << 20, "microbatches"); break;
    case 8: {
      rd_ws(r);
      /* `1f1b` starts with a digit: match the names by hand */
      const char *at = r->p;
      v = -1;
      for (int i = 0; i < 4; i++)
        if (strncmp(at, scheds[i], strlen(scheds[i])) == 0 && (at[strlen(scheds[i])] == ' ' ||
            at[strlen(scheds[i])] == '(' || at[strlen(scheds[i])] == '\n' || !at[strlen(scheds[i])]))
          v = i;
      if (v < 0) return rd_fail(r, at, "expected a schedule (gpipe, 1f1b, interleaved, zb), found %s", rd_found(r));
      r->p += strlen(scheds[v]);
      p->schedule = (PipeSchedule)v;
      if (v == SCHED_INTERLEAVED && *r->p == '(')
        ok = rd_expect(r, '(') && rd_keyword(r, "v") && rd_expect(r, ':') &&
             rd_int(r, &p->interleave, 1, 1 << 10, "virtual stages") && rd_expect(r, ')');
      if (!ok && diag_errors() == 0) return rd_fail(r, r->p, "expected (v: N) after interleaved");
      if (v == SCHED_ZB && *r->p == '(') { /* (times: F of each stage, then B, then W: Plan.sched_times) */
        if (p->pp < 2) return rd_fail(r, r->p, "zb's stage times need pp (>= 2) before the schedule");
        double *t = ARENA_ARRAY(r->arena, double, 3 * p->pp);
        ok = rd_expect(r, '(') && rd_keyword(r, "times") && rd_expect(r, ':');
        for (int i = 0; ok && i < 3 * p->pp; i++) ok = rd_f64(r, &t[i], "a stage time");
        ok = ok && rd_expect(r, ')');
        if (!ok) return diag_errors() ? false : rd_fail(r, r->p, "expected (times: 3 x pp numbers) after zb");
        p->sched_times = t;
      }
      break;
    }
    case 9:
      ok = rd_choice(r, &v, recs, 3, "none, full or selective");
      p->recompute = (RecomputeKind)v;
      break;
    case 10: ok = rd_i64(r, &p->bucket_bytes, 1, (int64_t)1 << 50, "bucket_bytes"); break;
    case 11: ok = on_off_value(r, &p->allow_cross_node_tp); break;
    case 12:
      ok = rd_choice(r, &v, ir_cp_mode_names, 2, "ring or all2all");
      p->cp_mode = (CpMode)v;
      break;
    case 13:
      ok = rd_choice(r, &v, ir_weight_copy_names, 3, "auto, persistent or per_layer");
      p->weight_copy = (WeightCopy)v;
      break;
    case 14:
      ok = rd_choice(r, &v, ir_coalesce_names, 3, "auto, on or off");
      p->coalesce = v;
      break;
    case 15:
      ok = rd_choice(r, &v, ir_defer_waits_names, 3, "auto, on or off");
      p->defer_waits = v;
      break;
    case 16:
      ok = rd_choice(r, &v, ir_zb_w_names, 3, "auto, hold or recompute");
      p->zb_w = v;
      if (ok && v == ZBW_HOLD && *r->p == '(') /* hold(N): Plan.zb_w_layers */
        ok = rd_expect(r, '(') && rd_int(r, &p->zb_w_layers, 1, 1 << 20, "held layers") && rd_expect(r, ')');
      break;
    }
    if (!ok) return false;
  }
  r->m->has_plan = true;
  return ir_plan_check_applied(p); /* as the front end: an option no pass applies is refused */
}

static bool parse_recipe(Reader *r) {
  static const char *const keys[] = {"batch", "micro_batch", "seq", "adamw", "sgd", "lr", "betas", "eps",
                                     "momentum", "weight_decay", "schedule", "warmup", "grad_clip",
                                     "precision", "steps", "seed", "on_nonfinite", "max_skips"};
  static const char *const nonfinite[] = {"stop", "skip"};
  static const char *const lrs[] = {"constant", "linear", "cosine"};
  static const char *const precs[] = {"f32", "bf16"};
  Recipe *c = &r->m->recipe;
  const int64_t BIG = (int64_t)1 << 50;
  if (!rd_expect(r, ':')) return false;
  while (!rd_eol(r)) {
    int k, v;
    if (!rd_choice(r, &k, keys, 18, "a recipe field")) return false;
    bool ok = true;
    switch (k) {
    case 0: ok = rd_i64(r, &c->batch, 0, BIG, "batch"); break;
    case 1: ok = rd_i64(r, &c->micro_batch, 1, BIG, "micro_batch"); break;
    case 2: ok = rd_i64(r, &c->seq, 0, BIG, "seq"); break;
    case 3: c->optimizer = OPT_ADAMW; break;
    case 4: c->optimizer = OPT_SGD; break;
    case 5: ok = rd_f64(r, &c->lr, "lr"); break;
    case 6:
      ok = rd_expect(r, '(') && rd_f64(r, &c->beta1, "beta1") && rd_expect(r, ',') && rd_f64(r, &c->beta2, "beta2") &&
           rd_expect(r, ')');
      break;
    case 7: ok = rd_f64(r, &c->eps, "eps"); break;
    case 8: ok = rd_f64(r, &c->momentum, "momentum"); break;
    case 9: ok = rd_f64(r, &c->weight_decay, "weight_decay"); break;
    case 10:
      ok = rd_choice(r, &v, lrs, 3, "constant, linear or cosine");
      c->lr_schedule = (LrScheduleKind)v;
      break;
    case 11: ok = rd_i64(r, &c->warmup, 0, BIG, "warmup"); break;
    case 12: ok = rd_f64(r, &c->grad_clip, "grad_clip"); break;
    case 13:
      ok = rd_choice(r, &v, precs, 2, "f32 or bf16");
      c->precision = (Precision)v;
      break;
    case 14: ok = rd_i64(r, &c->steps, 0, BIG, "steps"); break;
    case 15: { /* printed as an unsigned 64-bit number */
      rd_ws(r);
      const char *at = r->p;
      char *e;
      errno = 0;
      unsigned long long u = *at >= '0' && *at <= '9' ? strtoull(at, &e, 10) : 0;
      if (*at < '0' || *at > '9' || errno == ERANGE) return rd_fail(r, at, "expected a seed (0..2^64-1), found %s", rd_found(r));
      r->p = e;
      c->seed = (uint64_t)u;
      break;
    }
    case 16:
      ok = rd_choice(r, &v, nonfinite, 2, "stop or skip");
      c->on_nonfinite = (NonfiniteAction)v;
      break;
    case 17:
      ok = rd_i64(r, &c->max_skips, 1, BIG, "max_skips");
      c->max_skips_set = true;
      break;
    }
    if (!ok) return false;
  }
  r->m->has_recipe = true;
  return true;
}

bool rd_header_line(Reader *r, const char *at) {
  SrcLoc loc = rd_loc(r, at);
  bool ok;
  if (strncmp(at, "topology", 8) == 0) {
    r->m->topo.loc = loc;
    ok = parse_topology(r);
  } else if (strncmp(at, "plan", 4) == 0) {
    r->m->plan.loc = loc;
    ok = parse_plan(r);
  } else {
    r->m->recipe.loc = loc;
    ok = parse_recipe(r);
  }
  return ok && rd_end_line(r, NULL);
}
