/* passes/pipe_sched.h — pipeline schedules as per-stage instruction lists, made at compile time,
 * and their check: a simulation of every stage running its list with the sends and receives
 * between neighbouring stages (passes/pipe.c turns a checked schedule into the program).
 *
 * An instruction is F(i) (the stage's forward of micro-batch i: receive its activation from the
 * stage before unless first, run the stage's layers, send the result to the stage after unless
 * last, where the loss and its gradient are made) or B(i) (receive the gradient from the stage
 * after unless last, the backward of the stage's layers, send the input gradient to the stage
 * before unless first). Every rank of a stage (its dp x cp x tp ranks) runs the same list.
 * Interleaved (v chunks per stage): stage s holds the virtual stages c pp + s, c < v, each a
 * chunk of L / (pp v) layers; F(i, c) and B(i, c) run chunk c, and virtual stage k's neighbours
 * are k - 1 and k + 1 (from the last stage's chunk c to the first stage's chunk c + 1).
 */
#ifndef SHARDC_PIPE_SCHED_H
#define SHARDC_PIPE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "module.h"
#include "ptrmap.h"

typedef struct {
  char op;   /* 'F', 'B' or (zb) 'W' */
  int mb;    /* micro-batch */
  int chunk; /* which of the stage's v chunks (0 unless interleaved) */
} PipeInstr;

typedef struct {
  int pp, nmb;       /* stages, micro-batches per optimizer step */
  int v;             /* chunks per stage (interleaved; else 1) */
  PipeSchedule kind;
  int *len;          /* [pp] instructions per stage (2 nmb when well formed) */
  PipeInstr **list;  /* [pp][len[s]] */
} PipeSched;

/* GPipe (every forward, then every backward), 1F1B (pp - s - 1 forwards of warm-up on stage s,
 * then one forward and one backward in turn, then the remaining backwards) or interleaved 1F1B
 * (v chunks; micro-batches in groups of pp, each group through chunk 0, 1, .. forward and the
 * reverse backward; (pp - s - 1) 2 + (v - 1) pp forwards of warm-up; nmb a multiple of pp).
 * Heap; pipe_sched_free. */
PipeSched pipe_sched_make(PipeSchedule kind, int pp, int nmb, int v);
void pipe_sched_free(PipeSched *s);

/* One instruction of the whole schedule, in an order every stage could run it in. */
typedef struct {
  int stage, step; /* the stage and the instruction's index in its list */
} PipeStep;

/* Simulates the schedule: each stage runs its list in order; a forward on virtual stage k > 0
 * waits for the activation of its micro-batch from k - 1, a backward on k < pp v - 1 for the
 * gradient from k + 1, and a backward follows its own forward. Sends are asynchronous
 * (each stage keeps what it sent until its peer receives it). Returns false with a message
 * naming the stage, its first rank (ranks_per_stage x stage: pp is the outermost mesh axis),
 * the step and the instruction when a list is malformed (a micro-batch run twice, missing or
 * out of range, a backward before its forward) or when every unfinished stage waits (a cycle
 * of waits: the schedule would hang). On success order[] (room for the sum of len[]) holds
 * an execution order consistent with every wait. */
bool pipe_sched_check(const PipeSched *s, int ranks_per_stage, PipeStep *order, char *msg, size_t cap);

/* Predicted timeline with forward time tf[s] and backward time tb[s] per stage (transfers free):
 * returns the makespan; *bubble: the idle fraction, 1 - sum of busy time / (pp x makespan);
 * inflight[s] (may be NULL): the most micro-batches stage s holds activations for at once. */
double pipe_sched_time(const PipeSched *s, const double *tf, const double *tb, double *bubble, int *inflight);
/* The same timeline, with W times tw (zb; NULL otherwise) and each instruction's start
 * (start[st][k], room for len[st]; may be NULL). */
double pipe_sched_timeline(const PipeSched *s, const double *tf, const double *tb, const double *tw, double *bubble,
                           int *inflight, double *const *start);

const char *pipe_sched_name(PipeSchedule k); /* "gpipe", "1f1b", ... */

/* What passes/pipe.c planned, per stage, for `shardc plan` (pipe_print). FLOPs are one rank's
 * (its tp share), per micro-batch; bytes are one rank's. */
typedef struct {
  int64_t first_layer, nlayers; /* the layers [first_layer, first_layer + nlayers) of the model's loop, and
                                   with nchunks > 1 (interleaved) also those + c pp nlayers, c < nchunks */
  int nchunks;
  bool embedding, head;         /* holds the embedding (first stage) / the head and loss (last) */
  double fwd_flops, bwd_flops;  /* its F and B instructions (interleaved: of one chunk; zb: B and W) */
  double wgt_flops;             /* zb: the W part of bwd_flops */
  int64_t act_bytes;            /* activations an F keeps for its B (the stashed layer values, and the
                                   first / last stage's own), per micro-batch */
  int inflight;                 /* most forwards (micro-batch, chunk) whose activations it holds at once */
  int64_t param_bytes;          /* its parameters (layers split over pp, the rest replicated) */
  int64_t unused_bytes;         /* of the parameters outside the layers, held on every stage today: those this
                                   stage's instructions never read, with their optimizer state and gradient */
  const char *unused;           /* their names, comma-separated ("" when none) */
} PipeStage;

typedef struct PipePlan {
  PipeSchedule kind;
  int pp, nmb, v;
  const char *loop;   /* the layer loop's name */
  int64_t layers;     /* in the model */
  PipeStage *stage;   /* [pp] */
  double bubble;      /* predicted idle fraction (pipe_sched_time, times in proportion to FLOPs) */
  double layer_fwd, layer_bwd, layer_wgt; /* one layer's FLOPs per micro-batch (zb: W apart from B) */
  double all_fwd;     /* what every stage computes per micro-batch besides its layers */
  double first_fwd, first_bwd, last_fwd; /* the embedding's forward and backward, the head and loss's */
  int64_t layer_bytes; /* one layer's parameters, their gradients and optimizer states on a rank: what each
                          stage holds per layer of the largest stage (uneven stages pad to it) */
  PipeInstr *order;   /* [norder]: the instructions in the program's order (Node.instr = 1 + index) */
  int *order_stage;   /* [norder]: the stage running each */
  int norder;
} PipePlan;

/* The stages, the schedule and its bubble (passes/pipe_report.c). Nothing without pp. */
void pipe_print(FILE *f, const Module *m);
/* The schedule as an SVG picture: one lane per stage, F and B blocks to scale by predicted time
 * (each stage's FLOPs), labelled with their micro-batch (and chunk). False without pp. */
bool pipe_svg(FILE *f, const Module *m);


#endif
