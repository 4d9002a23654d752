/* runtime/train/eval.c — the program's other entry points: the validation loss (p->eval) and
 * sampling (p->logits). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../rng.h"
#include "run.h"

int64_t rt_run_val_held(const RtRun *r) {
  int64_t nb = (r->val.nwin + r->gbatch - 1) / r->gbatch;
  return nb < 1 ? 1 : nb;
}

double rt_run_evaluate(RtRun *r) {
  const RtProgram *p = r->p;
  int64_t per = r->gbatch;
  int64_t nb = rt_run_val_held(r);
  if (nb > r->o.val_batches) nb = r->o.val_batches; /* (log.c says so when --val-batches asked for more) */
  double sum = 0;
  int64_t saved = r->ctx.step;
  r->ctx.step = 0;
  for (int64_t i = 0; i < nb; i++) {
    rt_run_load_batch(r, &r->val, i * per);
    p->eval(r->mem, &r->ctx);
    rt_run_check_device_flags(r, "validation");
    sum += rt_run_get_result(r, r->loss);
  }
  r->ctx.step = saved;
  /* the loss is replicated: the program's own all-reduces made it the mean over every rank's rows */
  return sum / (double)nb;
}

/* Samples from the logits at row 0, position len-1 of a window of the last T tokens. Every rank
 * runs the logits function (its collectives need them all); of a multi-rank program's logits only
 * the sampled row moves (rt_tensor_gather_row: the ranks holding its parts, vocab-parallel logits
 * split over tp, a pipeline's on the stage computing them, logits_tensor.stages, add them into one
 * all-reduce of the row over the group splitting the logits), and rank 0's choice is broadcast so
 * every rank feeds the same next window. Under gradient accumulation or a pipeline the logits entry
 * runs one micro-batch's forward: the logits' rows are a micro-batch's (every row of the window the
 * same, row 0 read). */
void rt_run_sample_check(const RtRun *r) {
  const RtProgram *p = r->p;
  if (!p->logits) rt_user_error("--sample: this program has no logits function");
  if (p->logits_offset < 0)
    rt_user_error("--sample: this program has no logits to sample from (its loss is not a cross-entropy of logits)");
  if (r->multi && !p->logits_tensor)
    rt_user_error("--sample: this program does not describe its logits' layout; recompile it");
}

void rt_run_sample(RtRun *r) {
  const RtProgram *p = r->p;
  int64_t T = r->gseq, N = r->o.sample, V = p->vocab, VP = p->vocab_padded > 0 ? p->vocab_padded : p->vocab;
  rt_run_sample_check(r);
  int64_t cap = N + T + 64, len = 0;
  int32_t *toks = rt_xmalloc((size_t)cap * sizeof *toks);
  if (r->o.prompt && p->byte_level) {
    size_t n = strlen(r->o.prompt);
    if ((int64_t)n > T) n = (size_t)T; /* only the last T matter; keep the start for printing */
    for (size_t i = 0; i < n; i++)
      toks[len++] = (unsigned char)r->o.prompt[i];
  } else {
    RtData *d = r->has_val ? &r->val : &r->train;
    int shuffle = d->shuffle;
    d->shuffle = 0;
    int32_t *seq = rt_xmalloc((size_t)(T + 1) * sizeof *seq);
    rt_data_sequence(d, 0, seq);
    d->shuffle = shuffle;
    int64_t n = T / 2 < 16 ? T / 2 : 16;
    if (n < 1) n = 1;
    for (int64_t i = 0; i < n; i++)
      toks[len++] = seq[i];
    free(seq);
  }
  int64_t prompt_len = len;
  int32_t *in = (int32_t *)rt_run_hptr(r, r->tokens);
  const RtTensor *lt = r->multi ? p->logits_tensor : NULL;
  int32_t *win = r->multi ? rt_xmalloc((size_t)(r->gbatch * T) * sizeof *win) : in; /* the logical tokens */
  int64_t ldims[RT_MAX_RANK];
  /* a device program's logits may be bf16; a CPU program's are f32 */
  int ldt = lt ? lt->dtype : r->dev && p->logits_tensor ? p->logits_tensor->dtype : RT_F32;
  size_t les = rt_dtype_size(ldt);
  if (ldt != RT_F32 && ldt != RT_BF16) rt_bug("logits of dtype %s cannot be sampled", rt_dtype_st_name(ldt));
  if (lt) VP = (rt_tensor_logical_dims(p, lt, ldims), ldims[lt->rank - 1]);
  float *logits = (float *)(r->mem + p->logits_offset); /* (a single rank's) */
  size_t lrow = lt ? (size_t)lt->dims[lt->rank - 1] * les : 0; /* a local row's bytes */
  char *lloc = lt && r->dev ? rt_xmalloc(lrow) : NULL; /* the local row, downloaded */
  float *rowbuf = rt_xmalloc((size_t)VP * sizeof *rowbuf);
  double *prob = rt_xmalloc((size_t)V * sizeof *prob);
  r->ctx.step = 0;
  for (int64_t k = 0; k < N; k++) {
    int64_t L = len < T ? len : T;
    memset(win, 0, (size_t)(r->gbatch * T) * sizeof *win);
    memcpy(win, toks + len - L, (size_t)L * sizeof *win);
    for (int64_t b = 1; b < r->gbatch; b++)
      memcpy(win + b * T, win, (size_t)T * sizeof *win);
    if (r->multi) rt_tensor_scatter(&r->ctx, p, r->tokens, win, in);
    rt_run_to_dev(r, r->tokens);
    p->logits(r->mem, &r->ctx);
    const float *row;
    if (lt) { /* only the sampled row moves: the rank holding each part of it adds it to zeros */
      int64_t j = rt_tensor_local_row(&r->ctx, p, lt, L - 1);
      const char *loc = j < 0 ? NULL : r->mem + lt->offset + (size_t)j * lrow;
      if (loc && r->dev) r->dev->download(&r->ctx, lloc, loc, (int64_t)lrow), loc = lloc;
      rt_tensor_gather_row(&r->ctx, p, lt, loc, rowbuf);
      row = rowbuf;
    } else if (!r->dev && ldt == RT_F32) { /* a CPU program: as it is */
      row = logits + (L - 1) * VP;
    } else { /* only the row that is sampled */
      r->dev->download(&r->ctx, rowbuf, r->mem + p->logits_offset + (L - 1) * VP * (int64_t)les, VP * (int64_t)les);
      if (ldt == RT_BF16) /* widen in place, from the end: element v's 2 bytes lie below its 4 */
        for (int64_t v = VP - 1; v >= 0; v--) {
          uint16_t h;
          memcpy(&h, (const char *)rowbuf + 2 * v, 2);
          uint32_t u = (uint32_t)h << 16;
          memcpy(&rowbuf[v], &u, 4);
        }
      row = rowbuf;
    }
    int64_t next = 0;
    if (r->o.temperature <= 0) {
      for (int64_t v = 1; v < V; v++)
        if (row[v] > row[next]) next = v;
    } else {
      double mx = row[0], sum = 0;
      for (int64_t v = 1; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
      for (int64_t v = 0; v < V; v++)
        sum += prob[v] = exp(((double)row[v] - mx) / r->o.temperature);
      double u = (double)(rt_splitmix64(r->st.rng++) >> 11) * 0x1.0p-53 * sum, acc = 0;
      next = V - 1;
      for (int64_t v = 0; v < V; v++)
        if ((acc += prob[v]) > u) {
          next = v;
          break;
        }
    }
    if (r->ctx.groups[RT_MESH_ALL]) { /* rank 0 decides (ids < 2^24 are exact in f32) */
      float f = (float)next;
      rt_broadcast(r->ctx.groups[RT_MESH_ALL], &f, 1, RT_F32, 0);
      next = (int64_t)f;
    }
    toks[len++] = (int32_t)next;
  }
  if (r->ctx.rank == 0) {
    char how[48] = "greedy";
    if (r->o.temperature > 0) snprintf(how, sizeof how, "temperature %g", r->o.temperature);
    printf("sample (%lld tokens, %s):\n", (long long)N, how);
    if (p->byte_level) {
      for (int64_t i = 0; i < len; i++) {
        int c = toks[i];
        putchar(c == '\n' || c == '\t' || (c >= 32 && c < 127) ? c : '?');
      }
      putchar('\n');
    } else {
      for (int64_t i = 0; i < len; i++)
        printf("%s%d", i == 0 ? "" : i == prompt_len ? " | " : " ", toks[i]);
      putchar('\n');
    }
    fflush(stdout);
  }
  if (win != in) free(win);
  free(lloc);
  free(rowbuf);
  free(prob);
  free(toks);
}
