/* passes/plan_table.c — the plan search's report: the ranked table, why each plan loses to the
 * best, and what the search dropped (see plan_search.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "plan_search.h"
#include "print.h"

static const char *gib(char *buf, size_t cap, double bytes) {
  double g = bytes / (1024.0 * 1024 * 1024);
  if (g >= 1) snprintf(buf, cap, "%.1f GiB", g);
  else snprintf(buf, cap, "%.1f MiB", bytes / (1024.0 * 1024));
  return buf;
}

/* Why c is slower than the best plan b: the part of the step that grew most. */
static void why(const PlanCand *c, const PlanCand *b, char *buf, size_t cap) {
  if (c == b) {
    snprintf(buf, cap, "fastest");
    return;
  }
  double dc = c->cost.compute_s - b->cost.compute_s, de = c->cost.exposed_comm_s - b->cost.exposed_comm_s,
         db = c->cost.bubble_s - b->cost.bubble_s;
  double pct = b->cost.step_s > 0 ? 100 * (c->cost.step_s / b->cost.step_s - 1) : 0;
  char t[32];
  if (dc >= de && dc >= db) {
    const char *what = c->rec != b->rec && c->rec == RECOMPUTE_FULL       ? "recompute full re-runs the forward"
                       : c->rec != b->rec && c->rec == RECOMPUTE_SELECTIVE ? "selective recompute"
                       : c->tp > b->tp                                     ? "smaller GEMMs per rank"
                       : c->mb < b->mb                                     ? "smaller micro-batches, more kernel calls"
                                                                           : "more compute per rank";
    snprintf(buf, cap, "+%.0f%%: compute +%s (%s)", pct, cost_human_time(t, sizeof t, dc), what);
  } else if (de >= db) {
    const char *where = c->cost.comm_s[1] > c->cost.comm_s[0] ? "mostly across nodes" : "mostly in node";
    const char *what = c->zero == 3 && b->zero != 3 ? ", ZeRO-3 gathers" : c->tp > b->tp ? ", tp collectives" : "";
    snprintf(buf, cap, "+%.0f%%: exposed communication +%s (%s%s)", pct, cost_human_time(t, sizeof t, de), where, what);
  } else {
    snprintf(buf, cap, "+%.0f%%: pipeline bubble +%s (%.0f%% idle)", pct, cost_human_time(t, sizeof t, db),
             100 * c->cost.bubble);
  }
}

/* The analytic ranking against the compiled plans: the analytic model's first `top` fitting
 * candidates and every compiled one, in the search's order, with the compiled memory and step beside
 * the analytic ones and their ratios; `!` marks a ratio off by more than the model's tolerance
 * (memory 15 %, step 30 %) or a verdict the compiled plan does not share. */
/* The plan column's width: the longest label among the rows shown (at least 38). */
static int label_width(const SearchResult *r, const bool *shown) {
  char lab[96];
  int w = 38;
  for (int i = 0; i < r->n; i++) {
    if (!shown[i]) continue;
    plan_cand_label(&r->cand[i], lab, sizeof lab);
    int n = (int)strlen(lab);
    w = n > w ? n : w;
  }
  return w;
}

static void print_analytic(FILE *f, const SearchResult *r, int top) {
  char a[32], b[32], c[32], d[32], lab[96];
  bool *row = calloc((size_t)r->n + 1, sizeof *row);
  for (int i = 0, shown = 0, afit = 0; i < r->n && shown < top + 16; i++) { /* the rows shown */
    const PlanCand *p = &r->cand[i];
    bool compiled = p->status == CAND_FITS || p->status == CAND_NOFIT || p->status == CAND_INVALID;
    afit += p->ana_fits;
    shown += row[i] = compiled || (p->ana_fits && afit <= top) || (p->near && shown < top);
  }
  int lw = label_width(r, row);
  fprintf(f, "# analytic ranking vs compiled (memory per rank at the peak, by class; step; !: memory off by over 15 %%, "
             "step by over 30 %%, or another verdict)\n");
  fprintf(f, "# %2s  %-*s %10s %10s %6s %9s %9s %6s  %s\n", "#", lw, "plan", "mem ana", "compiled", "ratio", "step ana",
          "compiled", "ratio", "compiled verdict");
  for (int i = 0; i < r->n; i++) {
    const PlanCand *p = &r->cand[i];
    if (!row[i]) continue;
    plan_cand_label(p, lab, sizeof lab);
    if (p->status == CAND_FITS || p->status == CAND_NOFIT) {
      double peak = 0;
      for (int k = 0; k < MEM_COUNT; k++) peak += (double)p->by_class[k];
      double mr = peak > 0 ? p->ana.total / peak : 0, tr = p->cost.step_s > 0 ? p->ana.step_s / p->cost.step_s : 0;
      bool off = mr < 0.85 || mr > 1.15 || tr < 0.7 || tr > 1.3 || p->ana_fits != (p->status == CAND_FITS);
      fprintf(f, "# %2d%s %-*s %10s %10s %6.2f %9s %9s %6.2f  %s%s%s%s\n", i + 1, off ? "!" : " ", lw, lab,
              gib(a, sizeof a, p->ana.total), gib(b, sizeof b, peak), mr, cost_human_time(c, sizeof c, p->ana.step_s),
              cost_human_time(d, sizeof d, p->cost.step_s), tr, p->status == CAND_FITS ? "fits" : "does not fit",
              p->status == CAND_NOFIT ? ", largest: " : "", p->status == CAND_NOFIT ? memplan_class_labels[p->largest] : "",
              !p->near ? "" : p->status == CAND_FITS ? " (~: over the capacity by the model, confirmed by compiling)"
                                                     : " (~: over the capacity by the model, compiled to check)");
    } else {
      fprintf(f, "# %2d  %-*s %10s %10s %6s %9s %9s %6s  %s%s\n", i + 1, lw, lab, gib(a, sizeof a, p->ana.total), "-", "-",
              cost_human_time(c, sizeof c, p->ana.step_s), "-", "-",
              p->status == CAND_INVALID ? (p->timed_out ? "refused: compile over its time limit" : "refused by the compiler")
                                        : "not compiled",
              p->near ? " (~: over the capacity by the model)" : "");
    }
  }
  free(row);
}

void plan_search_print(FILE *f, const Module *base, const SearchResult *r, int top) {
  const MeshMap *mm = base->mesh;
  char a[32], b[32], c[32], d[32], e1[32], e2[32], lab[96];
  fprintf(f, "# plan search: %s on %s, %d ranks (%d node%s x %d), global batch %lld sequences, %lld tokens per step\n",
          base->name ? base->name : "model", base->has_topology && base->topo.name ? base->topo.name : "no topology",
          mm->world, mm->nodes, mm->nodes == 1 ? "" : "s", mm->devices_per_node, (long long)r->global,
          (long long)(ir_tokens_per_step(base) / base->batch.global * r->global));
  fprintf(f, "# device: %s\n", r->dev.source);
  fprintf(f, "# %d candidates (%d of them with `layers(balanced)` stages, `bal`: where pp (x chunks) does not divide the "
             "layers, or the balanced split beats the even one; %d more dropped: more stages than layers, uneven over 32, or "
             "interleaved micro-batches not a multiple of pp) ranked by the analytic model in "
             "%.2f s (passes/plan_model.c): %d fit, %d over the memory (not compiled; %d of those since their "
             "parameters and optimizer state alone exceed it), %d just over it and faster than its best fit "
             "(~: compiled to confirm, in step order)\n",
          r->n, r->balanced, r->indivisible, r->analytic_s, r->ana_fit, r->ana_over + r->bound, r->bound, r->near);
  fprintf(f, "# %d compiled to confirm in %.2f s (%.2f CPU s, the compiles' included): %d fit, %d do not fit, %d refused by the compiler; %d dropped unseen "
             "(dominated in memory by a compiled one that does not fit); %d not compiled since the compiler refused three "
             "like them with one message (or one of their degrees took over its time limit); %d not compiled (%s)\n",
          r->compiled, r->seconds, r->cpu_seconds, r->nranked, r->nofit, r->invalid, r->dominated, r->slow, r->unseen,
          r->budget_hit ? "the time budget ran out" : "past the confirmation");
  if (r->bound_broken)
    fprintf(f, "# BUG: %d compiled plans need less memory than the search's lower bound (passes/plan_search.c)\n",
            r->bound_broken);
  if (r->closest >= 0) { /* nothing fits, even by the analytic model: the closest, and why */
    const PlanCand *p = &r->cand[r->closest];
    plan_cand_label(p, lab, sizeof lab);
    fprintf(f, "# no candidate fits, even analytically; the closest, %s, needs %s per rank over %s: "
               "parameters %s, gradients %s, optimizer state %s, activations %s (largest: %s)\n",
            lab, gib(a, sizeof a, p->ana.total), gib(b, sizeof b, r->capacity), gib(c, sizeof c, p->ana.cls[MEM_PARAM]),
            gib(d, sizeof d, p->ana.cls[MEM_GRAD]), gib(e1, sizeof e1, p->ana.cls[MEM_OPTIM]),
            gib(e2, sizeof e2, p->ana.cls[MEM_ACT]), memplan_class_labels[p->ana.largest]);
  }
  if (!r->nranked) {
    fprintf(f, "# no candidate fits%s\n", r->ana_fit ? " as compiled (see the analytic rows below)" : "");
  } else {
    bool *row = calloc((size_t)r->n + 1, sizeof *row);
    for (int i = 0; i < r->nranked && i < top; i++)
      row[r->rank[i]] = true;
    int lw = label_width(r, row);
    free(row);
    fprintf(f, "# %2s  %-*s %9s %11s %6s  %-26s %9s %9s %7s  %s\n", "#", lw, "plan", "step", "tokens/s", "MFU",
            "memory/rank (largest)", "compute", "exposed", "bubble", "why");
    const PlanCand *best = &r->cand[r->rank[0]];
    for (int i = 0; i < r->nranked && i < top; i++)
      if (r->cand[r->rank[i]].near) {
        fprintf(f, "# (~: over the capacity by the analytic model, within its error band, and fits as compiled)\n");
        break;
      }
    for (int i = 0; i < r->nranked && i < top; i++) {
      const PlanCand *p = &r->cand[r->rank[i]];
      char mem[40], w[128];
      plan_cand_label(p, lab, sizeof lab);
      snprintf(mem, sizeof mem, "%s (%s %.0f%%)", gib(a, sizeof a, p->mem_total), memplan_class_names[p->largest],
               p->mem_total > 0 ? 100.0 * (double)p->by_class[p->largest] / p->mem_total : 0);
      why(p, best, w, sizeof w);
      fprintf(f, "# %2d  %-*s %9s %11s %5.1f%%  %-26s %9s %9s %6.1f%%  %s%s\n", i + 1, lw, lab,
              cost_human_time(b, sizeof b, p->cost.step_s), cost_human_rate(e1, sizeof e1, p->cost.tokens_per_s),
              100 * p->cost.mfu, mem,
              cost_human_time(c, sizeof c, p->cost.compute_s), cost_human_time(d, sizeof d, p->cost.exposed_comm_s),
              100 * p->cost.bubble, w, p->near ? " ~" : "");
    }
    for (int i = 0; i < r->nranked && i < top; i++) { /* the best `bal` row's split, and how to write it */
      const PlanCand *p = &r->cand[r->rank[i]];
      if (!p->bal) continue;
      fprintf(f, "# row %d's stages: `pp %d layers(balanced)` (-D pp=%d -D pp_layers=balanced) compiled to layers [", i + 1,
              p->pp, p->pp);
      for (int k = 0; k < p->nstages; k++) fprintf(f, "%s%d", k ? ", " : "", p->stage_rows[k]);
      fprintf(f, "]%s\n", p->nstages > p->pp ? " per virtual stage (chunk c of stage s at c x pp + s)" : "");
      if (p->ana.nsplit > 0) { /* (the analytic model's, plan_model_estimate: the split its row's figures are of) */
        fprintf(f, "# row %d's stages by the analytic model: [", i + 1);
        for (int k = 0; k < p->ana.nsplit; k++) fprintf(f, "%s%d", k ? ", " : "", p->ana.split[k]);
        bool same = p->nstages == p->ana.nsplit && !memcmp(p->stage_rows, p->ana.split, (size_t)p->nstages * sizeof(short));
        fprintf(f, "]%s\n", same ? "" : " (not the compiled)");
      }
      break;
    }
  }
  /* what did not make it: the best-estimated candidate that does not fit, and the first refusal */
  for (int i = 0; i < r->n; i++)
    if (r->cand[i].status == CAND_NOFIT) {
      const PlanCand *p = &r->cand[i];
      plan_cand_label(p, lab, sizeof lab);
      fprintf(f, "# does not fit, e.g. %s: %s per rank over %s (largest: %s %s)\n", lab, gib(a, sizeof a, p->mem_total),
              gib(b, sizeof b, p->capacity), memplan_class_labels[p->largest],
              gib(c, sizeof c, (double)p->by_class[p->largest]));
      break;
    }
  for (int i = 0; i < r->n; i++) /* the memory bound: the best-estimated one it dropped */
    if (r->cand[i].status == CAND_BOUND) {
      const PlanCand *p = &r->cand[i];
      plan_cand_label(p, lab, sizeof lab);
      char sh[96] = "";
      if (p->bound_pshare != 1) /* the bf16 copies beside split masters, or the copies alone (offload) */
        snprintf(sh, sizeof sh, " x %.3g on the device (the bf16 copies and the masters%s)", p->bound_pshare,
                 base->plan.offload ? " on the host" : p->zero >= 1 && p->zero < 3 ? " split" : "");
      fprintf(f, "# over the memory bound, e.g. %s: its parameters and optimizer state need at least %s per rank "
                 "(%s of parameters%s and %s of state over tp x pp%s) over %s\n",
              lab, gib(a, sizeof a, p->bound), gib(b, sizeof b, r->param_bytes), sh, gib(c, sizeof c, r->state_bytes),
              p->zero >= 3 ? (p->cp > 1 ? " x dp x cp" : " x dp") : p->zero >= 1 ? (p->cp > 1 ? ", the state x dp x cp" : ", the state x dp") : "",
              gib(d, sizeof d, r->capacity));
      break;
    }
  /* the compiler's refusals, one line per message (the first 6), with how many and one example */
  enum { MSGS = 6 };
  int first[MSGS], count[MSGS], nmsg = 0, more = 0;
  for (int i = 0; i < r->n; i++) {
    if (r->cand[i].status != CAND_INVALID) continue;
    int k = 0;
    while (k < nmsg && strcmp(r->cand[first[k]].err, r->cand[i].err) != 0) k++;
    if (k < nmsg) count[k]++;
    else if (nmsg < MSGS) first[nmsg] = i, count[nmsg++] = 1;
    else more++;
  }
  for (int k = 0; k < nmsg; k++) {
    plan_cand_label(&r->cand[first[k]], lab, sizeof lab);
    fprintf(f, "# refused by the compiler: %d candidate%s, e.g. %s: %s\n", count[k], count[k] == 1 ? "" : "s", lab,
            r->cand[first[k]].err[0] ? r->cand[first[k]].err : "(no message)");
  }
  if (more) fprintf(f, "# refused by the compiler: %d more candidate%s with other messages\n", more, more == 1 ? "" : "s");
  print_analytic(f, r, top);
}
