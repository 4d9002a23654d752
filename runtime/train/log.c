/* runtime/train/log.c — what rank 0 prints (and writes to --log as JSON lines): the start (the
 * model, ranks, data, device, validation, schedule, peak FLOP/s, memory), a line per step and per
 * validation, and the summary. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "../fmt.h" /* rt_fmt_bytes */
#include "../schedule.h"
#include "../ops/coll.h" /* rt_ctx_coord */
#include "files.h" /* rt_tensor_held */
#include "run.h"

static void json_num(FILE *f, const char *key, double v, const char *fmt) {
  fprintf(f, ",\"%s\":", key);
  if (isfinite(v))
    fprintf(f, fmt, v);
  else
    fputs("null", f);
}

static void fmt_eta(char *out, size_t n, double s) {
  if (!isfinite(s) || s < 0) {
    snprintf(out, n, "?");
    return;
  }
  long long t = (long long)(s + 0.5);
  if (t >= 3600)
    snprintf(out, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(out, n, "%lld:%02lld", t / 60, t % 60);
}

double rt_run_mfu(const RtRun *r, double tps) {
  const RtProgram *p = r->p;
  int world = r->ctx.world > 0 ? r->ctx.world : 1;
  return r->peak > 0 ? p->flops_per_token * tps / (r->peak * world) : 0;
}

/* The plan against the measured peak resident size; `base` is the resident size before the
 * allocation (code, libraries, data pages), so the run's own share is visible too. On a GPU the
 * plan is device memory: compared with what the device says is in use. */
static void print_memory(const char *when, RtRun *r, int64_t base) {
  const RtProgram *p = r->p;
  char a[32], b[32], c[32], d[32];
  rt_fmt_bytes(a, sizeof a, (double)p->mem_bytes);
  rt_fmt_bytes(b, sizeof b, (double)p->mem_peak);
  int64_t total = 0, used = r->dev && r->dev->mem_in_use ? r->dev->mem_in_use(&r->ctx, &total) : -1;
  if (used >= 0) {
    rt_fmt_bytes(c, sizeof c, (double)used);
    rt_fmt_bytes(d, sizeof d, (double)total);
    printf("memory %s: planned %s (live peak %s) of device memory; in use on the device %s of %s (cudaMemGetInfo: "
           "the plan, the kernels' workspace, cuBLASLt and the CUDA context) = %.2fx the plan\n",
           when, a, b, c, d, p->mem_bytes > 0 ? (double)used / (double)p->mem_bytes : 0.0);
    return;
  }
  int64_t hwm = rt_vm_hwm();
  rt_fmt_bytes(c, sizeof c, (double)hwm);
  printf("memory %s: planned %s (live peak %s), measured peak resident %s (VmHWM)", when, a, b, c);
  if (hwm > 0 && p->mem_bytes > 0) printf(" = %.2fx the plan", (double)hwm / (double)p->mem_bytes);
  if (base > 0 && hwm > 0) {
    rt_fmt_bytes(d, sizeof d, (double)base);
    printf("; %s resident before the allocation", d);
  }
  /* the local peers' memory this rank reads and writes in place (their gradients, parameters,
   * packed buffers: touched from the first step on) is resident in their VmHWM and again in this
   * one's: shown apart, so the growth after start that is this rank's own is visible */
  int64_t peers = r->ctx.comm ? rt_comm_peer_resident(r->ctx.comm) : 0;
  if (peers > 0 && hwm > 0) {
    rt_fmt_bytes(d, sizeof d, (double)peers);
    printf("; %s of it the local peers' memory mapped here (theirs, counted in their VmHWM too)", d);
  }
  printf("\n");
}

/* The bytes of the tensor table's tensors this rank holds in the plan's allocation, by kind: what the
 * plan's classes "parameters" (with the bf16 copies), "optimizer state" and "inputs" hold at the peak. */
static void print_held(RtRun *r) {
  const RtProgram *p = r->p;
  int64_t by[RT_T_COPY + 1] = {0};
  int pp = p->mesh[RT_AX_PP] > 1 ? rt_ctx_coord(&r->ctx, RT_AX_PP) : 0;
  for (int a = 0; a < RT_AX_COUNT; a++) /* rank 0, and under pp the first rank of each stage */
    if (a != RT_AX_PP && p->mesh[a] > 1 && rt_ctx_coord(&r->ctx, a) != 0) return;
  for (int i = 0; i < p->ntensors; i++) {
    const RtTensor *t = &p->tensors[i];
    if (!t->host && rt_tensor_held(p, t, pp)) by[t->kind] += rt_tensor_bytes(t);
  }
  char st[32] = "";
  if (p->mesh[RT_AX_PP] > 1) snprintf(st, sizeof st, ", stage %d", pp);
  printf("tensors held here (rank %d%s): parameters %lld B (bf16 copies %lld B of them), optimizer state %lld B, inputs "
         "%lld B, results %lld B; the allocation %lld B as planned (+ %lld B kernel workspace)\n",
         r->ctx.rank, st, (long long)(by[RT_T_PARAM] + by[RT_T_COPY]), (long long)by[RT_T_COPY], (long long)by[RT_T_STATE],
         (long long)by[RT_T_INPUT], (long long)by[RT_T_RESULT], (long long)p->mem_bytes,
         (long long)(p->workspace_bytes ? p->workspace_bytes() : 0));
}

void rt_log_init(RtRun *r, const RtLoop *loop) {
  const RtProgram *p = r->p;
  const RtOpts *o = &r->o;
  int training = r->st.step < loop->stop;
  int64_t B = p->batch, T = r->gseq, gbatch = r->gbatch, stop = loop->stop;
  if (o->log && r->ctx.rank == 0) {
    r->log = fopen(o->log, o->resume ? "a" : "w");
    if (!r->log) rt_user_error("--log: cannot open '%s': %s", o->log, strerror(errno));
  }
  const char *how = "measured: FMA loop";
  const char *peak_env = getenv("SHARDRT_PEAK_FLOPS");
  if (peak_env && *peak_env) {
    char *end;
    r->peak = strtod(peak_env, &end);
    if (end == peak_env || *end || !(r->peak > 0))
      rt_user_error("SHARDRT_PEAK_FLOPS='%s' is not a positive number of FLOP/s", peak_env);
    how = "from SHARDRT_PEAK_FLOPS";
  } else if (training && r->dev) {
    r->peak = r->dev->peak_flops(&r->ctx);
    how = "measured by the device: a large bf16 GEMM";
  } else if (training) {
    r->peak = rt_measure_peak_flops(r->ctx.threads, 0.04); /* best of 4 runs of 10 ms: within 2 % of 0.1 s's */
  }

  /* flags that do nothing in this run: a warning (a script's shared flag set may say so), not silence */
  if (r->ctx.rank == 0) fputs(o->twice, stderr); /* and a flag given twice: the first value is not used */
  if (r->ctx.rank == 0 && o->ckpt_every_set && o->ckpt_every > 0 && !o->save_to)
    fprintf(stderr, "warning: --ckpt-every %lld writes nothing: no checkpoint directory (the recipe names none, or "
                    "--save-to '' turned it off)\n",
            (long long)o->ckpt_every);
  if (r->ctx.rank == 0 && o->keep_set && !o->save_to)
    fprintf(stderr, "warning: --keep %lld keeps nothing: no checkpoint directory (the recipe names none, or --save-to '' "
                    "turned it off)\n",
            (long long)o->keep);
  if (r->ctx.rank == 0 && !o->sample && (o->prompt || o->temperature_set))
    fprintf(stderr, "warning: %s shapes the sampling after training, which --sample N asks for: this run samples "
                    "nothing\n",
            o->prompt ? "--prompt" : "--temperature");
  if (!r->multi && o->ckpt_format && !strcmp(o->ckpt_format, "sharded"))
    fprintf(stderr, "warning: --ckpt-format sharded: one process writes whole tensors (the logical format, which "
                    "any layout resumes)\n");
  if (r->ctx.rank == 0 && !r->has_val && (o->val_batches_set || o->eval_every))
    fprintf(stderr, "warning: %s %lld validates nothing: this run has no validation data (%s)\n",
            o->eval_every ? "--eval-every" : "--val-batches", (long long)(o->eval_every ? o->eval_every : o->val_batches),
            p->eval ? "no --val, and --data held none out" : "the program has no eval function");
  if (r->ctx.rank == 0 && r->has_val && o->val_batches_set && rt_run_val_held(r) < o->val_batches) /* (was silent) */
    fprintf(stderr, "note: --val-batches %lld: the validation data holds %lld batch%s of %lld sequences (%lld sequences); "
                    "each validation reads %s\n",
            (long long)o->val_batches, (long long)rt_run_val_held(r), rt_run_val_held(r) == 1 ? "" : "es",
            (long long)gbatch, (long long)r->val.nwin, rt_run_val_held(r) == 1 ? "that one" : "those");
  const char *sel = getenv("SHARDRT_DEVICE"); /* read by a GPU trainer's device only */
  if (r->ctx.rank == 0 && !p->device && sel && *sel)
    fprintf(stderr, "warning: SHARDRT_DEVICE=%s selects a GPU trainer's device; this trainer runs on the CPU (built "
                    "without --target cuda)\n",
            sel);
  if (r->ctx.rank == 0 && o->dump_to && !o->dump_steps)
    fprintf(stderr, "warning: --dump-to %s writes nothing: --dump-steps N dumps the first N steps' tensors there\n",
            o->dump_to);
  if (r->ctx.rank == 0) {
    printf("model %s (%s): %.2fM parameters, vocabulary %lld%s, batch %lld x %lld tokens", p->model ? p->model : "?",
           p->source ? p->source : "?", (double)p->nparams / 1e6, (long long)p->vocab, p->byte_level ? " (bytes)" : "",
           (long long)gbatch, (long long)T);
    if (p->accum > 1 && p->micro_batch > 0) /* each rank's B rows are accum micro-steps of micro_batch */
      printf(" (%d data-parallel rank(s) x %lld %s x %lld)", r->ctx.dp_size, (long long)p->accum,
             r->ctx.pp_size > 1 ? "pipeline micro-batches" : "accumulation micro-steps", (long long)p->micro_batch);
    else if (r->ctx.dp_size > 1) printf(" (%d data-parallel ranks x %lld)", r->ctx.dp_size, (long long)B);
    printf(", seed %llu\n", (unsigned long long)o->seed);
    if (r->ctx.world > 1)
      printf("ranks: %d (dp %d x pp %d x cp %d x tp %d) via %s, %s; %d thread(s) per rank\n", r->ctx.world,
             r->ctx.dp_size, r->ctx.pp_size, r->ctx.cp_size, r->ctx.tp_size, rt_launcher_name(r->dist.boot.launcher),
             rt_comm_provider(r->dist.comm), r->ctx.threads);
    if (o->data)
      printf("data: '%s': %d file(s), %lld tokens, %lld sequences of %lld+1\n", o->data, r->train.nfiles,
             (long long)r->train.ntok, (long long)r->train.nwin, (long long)T);
    if (r->dev) {
      char desc[512];
      r->dev->describe(&r->ctx, desc, sizeof desc);
      printf("device: %s\n", desc);
    }
    printf("validation: %s\n", r->has_val ? r->val_desc
                               : p->eval  ? "none (no held-out data)"
                                          : "none (no eval function)");
    /* a warmup as long as the schedule (a short --steps under the recipe's warmup) never reaches
     * lr nor decays to min_lr: the header says where it ends instead of contradicting the steps */
    char warm[160] = "";
    if (p->recipe.warmup >= o->steps && o->steps > 0)
      snprintf(warm, sizeof warm, ", not shorter than the %lld step%s: the lr only rises, to %.3g at step %lld",
               (long long)o->steps, o->steps == 1 ? "" : "s",
               rt_lr_at(p->recipe.lr_schedule, p->recipe.lr, p->recipe.min_lr, p->recipe.warmup, o->steps,
                        o->steps - 1),
               (long long)o->steps);
    if (training)
      printf(r->dev ? "steps %lld..%lld of %lld, lr %g -> %g (%s, warmup %lld%s); %d thread(s); device peak %.1f "
                      "GFLOP/s (%s)\n"
                    : "steps %lld..%lld of %lld, lr %g -> %g (%s, warmup %lld%s); %d thread(s); fp32 peak %.1f GFLOP/s "
                      "(%s)\n",
             (long long)r->st.step + 1, (long long)stop, (long long)o->steps, p->recipe.lr, p->recipe.min_lr,
             p->recipe.lr_schedule == RT_LR_COSINE   ? "cosine"
             : p->recipe.lr_schedule == RT_LR_LINEAR ? "linear"
                                                     : "constant",
             (long long)p->recipe.warmup, warm, r->ctx.threads, r->peak / 1e9, how);
    print_memory("at start", r, r->base_rss);
  }
  print_held(r);
}

void rt_log_free(RtRun *r) {
  if (r->log && fclose(r->log) != 0) rt_user_error("--log: cannot write '%s'", r->o.log);
  r->log = NULL;
}

void rt_log_step(RtRun *r, const RtStepStats *st) {
  if (r->ctx.rank != 0) return;
  const RtOpts *o = &r->o;
  int width = snprintf(NULL, 0, "%lld", (long long)o->steps);
  double dt = st->seconds, dcomm = st->comm_seconds;
  char mem_s[32], eta_s[32];
  rt_fmt_bytes(mem_s, sizeof mem_s, (double)st->rss);
  fmt_eta(eta_s, sizeof eta_s, st->eta_s);
  printf("step %*lld/%lld | loss %.4f | lr %.2e", width, (long long)st->step, (long long)o->steps, st->loss, st->lr);
  if (r->gnorm) printf(" | norm %.3f", st->gnorm);
  if (st->skipped) printf(" | skipped");
  printf(" | %.1f ms", dt * 1e3);
  if (r->ctx.world > 1) printf(" (comm %.0f%%)", dt > 0 ? 100 * dcomm / dt : 0.0);
  printf(" | %.0f tok/s | MFU %.1f%% | mem %s | ETA %s\n", st->tokens_per_s, 100 * st->mfu, mem_s, eta_s);
  if (r->log) {
    fprintf(r->log, "{\"step\":%lld,\"steps\":%lld", (long long)st->step, (long long)o->steps);
    json_num(r->log, "loss", st->loss, "%.9g");
    json_num(r->log, "lr", st->lr, "%.9g");
    if (r->gnorm) json_num(r->log, "grad_norm", st->gnorm, "%.9g");
    if (st->skipped) fprintf(r->log, ",\"skipped\":true,\"skipped_steps\":%lld", (long long)r->st.skipped);
    json_num(r->log, "ms", dt * 1e3, "%.3f");
    if (r->ctx.world > 1) json_num(r->log, "comm_ms", dcomm * 1e3, "%.3f");
    json_num(r->log, "tokens_per_s", st->tokens_per_s, "%.1f");
    json_num(r->log, "mfu", st->mfu, "%.6f");
    fprintf(r->log, ",\"mem_bytes\":%lld", (long long)st->rss);
    json_num(r->log, "eta_s", st->eta_s, "%.1f");
    fputs("}\n", r->log);
    fflush(r->log);
  }
}

void rt_log_eval(RtRun *r, int64_t step, double vloss) {
  if (r->ctx.rank != 0) return;
  printf("step %*lld/%lld | val loss %.4f\n", (int)snprintf(NULL, 0, "%lld", (long long)r->o.steps), (long long)step,
         (long long)r->o.steps, vloss);
  fflush(stdout);
  if (r->log) {
    fprintf(r->log, "{\"step\":%lld", (long long)step);
    json_num(r->log, "val_loss", vloss, "%.9g");
    fputs("}\n", r->log);
    fflush(r->log);
  }
}

void rt_log_stopped(RtRun *r) {
  if (r->ctx.rank != 0) return;
  const RtOpts *o = &r->o;
  int sig = rt_stop_signal();
  const char *why = sig ? rt_stop_signal_name(sig) : "a signal to another rank";
  long long s = (long long)r->st.step, n = (long long)o->steps;
  if (o->save_to)
    printf("stopped on %s after step %lld of %lld: checkpoint %s/step_%08lld saved; exit status %d (resume with "
           "--resume auto or --resume %s)\n",
           why, s, n, o->save_to, s, RT_EXIT_STOPPED, o->save_to);
  else
    printf("stopped on %s after step %lld of %lld: no --save-to, so nothing was saved; exit status %d\n", why, s, n,
           RT_EXIT_STOPPED);
  if (r->log) {
    fprintf(r->log, "{\"step\":%lld,\"stopped\":\"%s\",\"checkpoint\":%s,\"exit_status\":%d}\n", s,
            sig ? rt_stop_signal_name(sig) : "another rank", o->save_to ? "true" : "false", RT_EXIT_STOPPED);
    fflush(r->log);
  }
}

void rt_log_done(RtRun *r, const RtLoop *loop) {
  if (r->ctx.rank != 0) return;
  int64_t T = r->gseq, gbatch = r->gbatch, first = loop->first, stop = loop->stop;
  int64_t steady_steps = loop->steady_steps;
  double t_total = loop->t_total, t_steady = loop->t_steady, comm_steady = loop->comm_steady, last_val = loop->last_val;
  int64_t ran = stop >= first ? stop - first + 1 : 0;
  if (ran > 0) {
    double tps = steady_steps ? (double)(gbatch * T) * (double)steady_steps / t_steady : 0;
    printf("done: %lld step(s) in %.2f s, %.0f tok/s, MFU %.1f%%; loss %.4f", (long long)ran, t_total, tps,
           100 * rt_run_mfu(r, tps), r->st.loss);
    if (r->ctx.world > 1 && steady_steps)
      printf("; %.1f ms/step, of which communication %.1f ms (%.0f%%, rank 0)", 1e3 * t_steady / (double)steady_steps,
             1e3 * comm_steady / (double)steady_steps, t_steady > 0 ? 100 * comm_steady / t_steady : 0.0);
    if (isfinite(last_val)) printf(", val loss %.4f", last_val);
    printf("\n");
  } else {
    printf("nothing to train: at step %lld of %lld\n", (long long)r->st.step, (long long)stop);
  }
  print_memory("at end", r, r->base_rss);
}

/* "dp all_reduce" for row g, kind k. */
static void coll_name(char *buf, size_t n, int g, int k) {
  snprintf(buf, n, "%s %s", rt_mesh_mask_name(rt_coll_row_mask(g)), rt_coll_kind_names[k]);
}

/* The row of a plan written per pipeline stage (stages rows; one without a pipeline) this rank checks against. */
static int plan_row(const RtRun *r, int stages) { return stages > 1 ? rt_ctx_coord(&r->ctx, RT_AX_PP) : 0; }

/* The first step's kernel calls by class against the plan's for this rank's pipeline stage (RtProgram.kern_plan):
 * rank 0 prints them, every rank warns of its differences. */
static void log_kcalls(RtRun *r, const RtLoop *loop) {
  const RtProgram *p = r->p;
  int stage = plan_row(r, p->kern_plan_stages);
  const int64_t *plan = p->kern_plan && stage < p->kern_plan_stages ? p->kern_plan + (size_t)stage * RT_KC_COUNT : NULL;
  char diff[512] = "", by[256] = "";
  size_t len = 0, blen = 0;
  int64_t calls = 0;
  for (int k = 0; k < RT_KC_COUNT; k++) {
    calls += loop->kcalls[k];
    blen += (size_t)snprintf(by + blen, sizeof by - blen, "%s%s %lld", k ? ", " : "", rt_kern_class_names[k],
                             (long long)loop->kcalls[k]);
    if (!plan || plan[k] == loop->kcalls[k] || len >= sizeof diff) continue;
    len += (size_t)snprintf(diff + len, sizeof diff - len, "%s%s: %lld call(s), planned %lld", len ? "; " : "",
                            rt_kern_class_names[k], (long long)loop->kcalls[k], (long long)plan[k]);
  }
  if (r->ctx.rank == 0)
    printf("kernel calls per step (rank 0, step %lld): %lld (%s)%s\n", (long long)loop->colls_step, (long long)calls, by,
           !plan ? " (the program holds no plan of them)" : len ? ": NOT as planned (below)" : ": as planned");
  if (len)
    fprintf(stderr, "warning: rank %d: the kernel calls of step %lld differ from the plan (pipeline stage %d): %s\n",
            r->ctx.rank, (long long)loop->colls_step, stage, diff);
  if (loop->kcalls_varied)
    fprintf(stderr, "warning: rank %d: step %lld ran other kernel calls than step %lld (every step should run the "
                    "same)\n", r->ctx.rank, (long long)loop->kcalls_varied, (long long)loop->colls_step);
}

void rt_log_colls(RtRun *r, const RtLoop *loop) {
  const RtProgram *p = r->p;
  if (loop->colls_step) log_kcalls(r, loop);
  if (loop->colls_step && !r->dev) { /* (a device program's GEMMs are the device's) */
    int stage = plan_row(r, p->kern_plan_stages);
    bool planned = p->gemm_flop_plan && stage < p->kern_plan_stages;
    double want = planned ? p->gemm_flop_plan[stage] : 0;
    bool same = planned && (double)loop->gemm_flops == want;
    char how[96] = "";
    if (planned) snprintf(how, sizeof how, same ? " (as planned)" : " (NOT as planned: the plan's %.0f)", want);
    if (r->ctx.rank == 0)
      printf("matmul FLOPs a step (rank 0, step %lld, counted): %llu%s; the plan's model FLOPs a step per rank (3 x the "
             "forward's matmuls and attention, over %d rank(s)): %.0f\n",
             (long long)loop->colls_step, (unsigned long long)loop->gemm_flops, how, r->ctx.world > 0 ? r->ctx.world : 1,
             p->flops_per_token * (double)(r->gbatch * r->gseq) / (r->ctx.world > 0 ? r->ctx.world : 1));
    if (planned && !same)
      fprintf(stderr, "warning: rank %d: the matmul FLOPs of step %lld differ from the plan (pipeline stage %d): %llu "
                      "counted, planned %.0f\n", r->ctx.rank, (long long)loop->colls_step,
              stage, (unsigned long long)loop->gemm_flops, want);
  }
  if (r->ctx.world <= 1 || !loop->colls_step) return;
  const RtCollCounts *c = &loop->colls;
  int64_t calls = 0, bytes = 0;
  for (int g = 0; g < RT_CC_ROWS; g++)
    for (int k = 0; k < RT_CK_COUNT; k++) calls += c->count[g][k], bytes += c->bytes[g][k];
  int stage = plan_row(r, p->coll_plan_stages);
  const int64_t *plan = p->coll_plan && stage < p->coll_plan_stages
                            ? p->coll_plan + (size_t)stage * RT_CC_ROWS * RT_CK_COUNT * 2 : NULL;
  char diff[1024] = "";
  size_t len = 0;
  for (int g = 0; plan && g < RT_CC_ROWS; g++)
    for (int k = 0; k < RT_CK_COUNT; k++) {
      const int64_t *want = plan + ((size_t)g * RT_CK_COUNT + (size_t)k) * 2;
      if (want[0] == c->count[g][k] && want[1] == c->bytes[g][k]) continue;
      char name[64];
      coll_name(name, sizeof name, g, k);
      if (len < sizeof diff)
        len += (size_t)snprintf(diff + len, sizeof diff - len, "%s%s: %lld call(s), %lld B; planned %lld, %lld B",
                                len ? "; " : "", name, (long long)c->count[g][k], (long long)c->bytes[g][k],
                                (long long)want[0], (long long)want[1]);
    }
  if (r->ctx.rank == 0)
    printf("collectives per step (rank 0, step %lld): %lld call(s), %lld bytes%s\n", (long long)loop->colls_step,
           (long long)calls, (long long)bytes,
           !plan ? " (the program holds no plan of them)" : len ? ": NOT as planned (below)" : ": as planned");
  if (len)
    fprintf(stderr, "warning: rank %d: the collectives of step %lld differ from the plan (pipeline stage %d): %s\n",
            r->ctx.rank, (long long)loop->colls_step, stage, diff);
  if (loop->colls_varied)
    fprintf(stderr, "warning: rank %d: step %lld ran other collectives than step %lld (every step should run the "
                    "same)\n", r->ctx.rank, (long long)loop->colls_varied, (long long)loop->colls_step);
}
