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
/* The same, zb's lists chosen for times (the F, B and W of stage s: times[s], times[pp + s],
 * times[2 pp + s]; NULL: equal): of the greedy lists made by playing the stages with the times, the
 * greedy lists made with equal times and ZB-H1's lists, the one with the shortest span under the
 * times (the earlier on a tie); the other schedules ignore them. The one list maker of every
 * zb prediction: the pipe pass (Plan.sched_times), the balanced split's bubbles, the plan search's
 * analytic model. */
PipeSched pipe_sched_make_timed(PipeSchedule kind, int pp, int nmb, int v, const double *times);
/* zb's greedy lists alone (made with times, NULL: equal), one of the candidates pipe_sched_make_timed
 * chooses among (with ZB-H1's, made directly): what zb's lists were before ZB-H1's; tests compare. */
PipeSched pipe_sched_zb_greedy(int pp, int nmb, const double *times);
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

/* zb's two candidates that do not depend on the times (the greedy lists made with equal times, ZB-H1's), each with
 * pipe_sched_check's order of it; and pipe_sched_make_timed's zb lists chosen with them given (a caller that makes
 * lists for many times at one pp and nmb makes these once: the plan search's analytic model). */
typedef struct {
  PipeSched s[2];
  PipeStep *order[2];
} PipeZbFixed;
void pipe_sched_zb_fixed(int pp, int nmb, PipeZbFixed *f);
void pipe_sched_zb_fixed_free(PipeZbFixed *f);
PipeSched pipe_sched_zb_among(int pp, int nmb, const double *times, const PipeZbFixed *f);

/* The times a schedule is played with, per instruction: dur[st][k] is the k-th instruction of stage
 * st's own time (its span in the trainer's --trace); and, each may be NULL (none):
 *   pre[st][k]   what the stage runs just before it besides instructions (the sums of a finished
 *                micro-batch, the step's start): after the stage's previous instruction, idle in the trace;
 *   lat[st][k]   its input's transfer (an F's activation, a B's gradient from another stage): the
 *                earliest it can start after its producer ended (the link's latency);
 *   recv[st][k]  the receive's own time once the data is there (its bytes over the link's bandwidth),
 *                before the instruction starts, idle in the trace.
 * A stage runs its list in order: instruction k starts at max(previous end + pre, producer's end +
 * lat) + recv. passes/cost.c fills them from the cost model and the links (docs/pipeline.md). */
typedef struct {
  double **dur, **pre, **lat, **recv; /* [pp][len[st]] each */
} PipeTimes;

/* Plays the schedule with the times t: returns the makespan, from the first instruction's start
 * to the last one's end over the stages; *bubble (may be NULL): the idle fraction, 1 - the sum of the
 * instructions' times / (pp x makespan), as the trainer's --trace measures it (bench/pp_bubble.py);
 * start[st][k] (may be NULL; room for len[st]): each instruction's start (from the step's start,
 * time 0); stage_end[st] (may be NULL): when stage st's last instruction ends. */
double pipe_sched_play(const PipeSched *s, const PipeTimes *t, double *bubble, double *const *start, double *stage_end);
/* The same with the order pipe_sched_check gave (played many times with different times: the plan
 * search's analytic model). */
double pipe_sched_play_order(const PipeSched *s, const PipeStep *order, const PipeTimes *t, double *bubble,
                             double *const *start, double *stage_end);

/* The same played `plays` times (a fixed seed: the same figures every run), each instruction's duration
 * drawn around its t->dur d as d x (1 + cv sqrt(ref / d) z), z standard normal, at least d / 10: a
 * block of work of ref seconds varies by cv (bench_calibrate's time_spread), a shorter one more (the
 * machine's independent slices of noise averaging over a longer one). A step's makespan follows its
 * slowest chain, so its bubble with varying times exceeds the bubble of their means. Returns the
 * median makespan; *bubble (may be NULL): the median bubble (the bench takes the median over the
 * steps). */
double pipe_sched_play_spread(const PipeSched *s, const PipeTimes *t, double cv, double ref, int plays, double *bubble);

/* PipeTimes with room for s (zeros), and their release. */
PipeTimes pipe_times_new(const PipeSched *s, bool transfers);
void pipe_times_free(const PipeSched *s, PipeTimes *t);

/* The most micro-batches each stage holds activations for at once (held from F to B; zb: to W). */
void pipe_sched_inflight(const PipeSched *s, int *inflight);
/* Interleaved: the forwards of each chunk stage st holds at once (held as pipe_sched_inflight's), at the positions
 * that may be its memory's peak: the Pareto set over its list of the per-chunk counts after each forward, at most
 * PIPE_LOADS vectors of s->v counts into out[i * s->v + c] (beyond it, the last is the componentwise most of the
 * rest: never under); returns their number (0 where s->v > PIPE_LOAD_CHUNKS). A stage's chunks hold unequal
 * shares: tiny's pp 2 x 2, 8 micro-batches, stage 1 holds 3 forwards of chunk 0 (warm-up and the first steady
 * forwards) and at most 3 in all, where pipe_sched_inflight's 3 shared among the chunks is 2 each. */
enum { PIPE_LOADS = 32, PIPE_LOAD_CHUNKS = 8 };
int pipe_sched_chunk_loads(const PipeSched *s, int st, int *out);

/* pipe_sched_play with one time per stage and kind: forward tf[s], backward tb[s], W tw[s] (zb;
 * NULL otherwise), transfers free: returns the makespan; *bubble, inflight[s] (may be NULL; as
 * pipe_sched_inflight), start[st][k] (may be NULL). The pass's own prediction, each stage's times in
 * proportion to its FLOPs (passes/pipe_plan.c), before any device is known. */
double pipe_sched_time(const PipeSched *s, const double *tf, const double *tb, double *bubble, int *inflight);
double pipe_sched_timeline(const PipeSched *s, const double *tf, const double *tb, const double *tw, double *bubble,
                           int *inflight, double *const *start);

const char *pipe_sched_name(PipeSchedule k); /* "gpipe", "1f1b", ... */

/* What passes/pipe_plan.c planned, per stage, for `shardc plan` (pipe_print). FLOPs are one rank's
 * (its tp share), per micro-batch; bytes are one rank's. */
typedef struct {
  int64_t first_layer, nlayers; /* the layers [first_layer, first_layer + nlayers) of the model's loop, and
                                   with nchunks > 1 (interleaved) also those + c pp nlayers, c < nchunks
                                   (uneven chunks: nlayers is the stage's total; see chunk_*) */
  int nchunks;
  const int64_t *chunk_first, *chunk_layers; /* [nchunks]: chunk c's layers [chunk_first[c], + chunk_layers[c]) */
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
  const double *times; /* zb: the times its lists were made with (Plan.sched_times; NULL: equal) */
  const char *loop;   /* the layer loop's name */
  int64_t layers;     /* in the model */
  PipeStage *stage;   /* [pp] */
  double bubble;      /* predicted idle fraction (pipe_sched_time, times in proportion to FLOPs) */
  double layer_fwd, layer_bwd, layer_wgt; /* one layer's FLOPs per micro-batch (zb: W apart from B) */
  PipeInstr *order;   /* [norder]: the instructions in the program's order (Node.instr = 1 + index) */
  int *order_stage;   /* [norder]: the stage running each */
  int norder;
} PipePlan;

/* The FLOP-proportional time of stage st's instruction op ('F', 'B' or 'W') on chunk c: the stage's
 * figure (fwd_flops, bwd_flops less wgt_flops, wgt_flops: one chunk's, the embedding and head spread over
 * the chunks) with the chunk's own layers in place of the mean chunk's (uneven chunks); at least 1
 * (F, B). What PipePlan.bubble and --schedule-svg without a device play (passes/pipe_plan.c). */
double pipe_plan_instr_flops(const PipePlan *p, int st, int c, char op);

/* The layers' time and memory by stage (passes/pipe_balance.c, made by the stage pass before it
 * splits the layers, for every pipelined plan but the interleaved, and for an interleaved one's
 * `layers(balanced)`: by virtual stage): what `pp N layers(balanced)`
 * splits by, and what the plan prints the balanced split with. Seconds are one rank's per
 * micro-batch by the cost model (passes/cost.h: kernels and blocking collectives) on the device of
 * `--profile` or else the topology's figures; bytes one rank's. */
typedef struct PipeBalance {
  int pp;                    /* the stages balanced (interleaved: the pp x chunks virtual stages) */
  int chunks;                /* interleaved: the chunks per stage (memory sums a stage's chunks); else 0 or 1 */
  int64_t layers;
  double layer_f, layer_b;   /* one layer's forward; its backward (input and weight gradients) */
  double all_f;              /* what every stage runs per micro-batch besides its layers */
  double first_f, first_b;   /* the embedding's forward and backward (the first stage's) */
  double last_f;             /* the head, the loss and their gradient (the last stage's forward) */
  int64_t layer_act;         /* what a forward keeps for its backward, per layer */
  int64_t first_act, last_act; /* ... the embedding's, the head's and loss's */
  int64_t layer_bytes;       /* one layer's parameters, their gradients and optimizer states (every stage
                                holds the largest stage's count of them: its stacks are padded to it) */
  int *inflight;             /* [pp]: the most micro-batches the schedule holds on each stage */
  /* interleaved: the forwards of each chunk stage s holds at its possible peaks (pipe_sched_chunk_loads):
   * ncload[s] vectors of chunks counts at cload + s * PIPE_LOADS * chunks; NULL (or none): inflight[k] each */
  const int *cload, *ncload;
  int64_t *split;            /* [pp]: the balanced split; NULL: none (fewer layers than stages) */
  /* against the device's memory (Plan.stage_fixed, stage_cap): fixed[s] + pipe_balance_stage_bytes
   * is stage s's planned bytes by the model calibrated on the time-balanced split's memory plan */
  const int64_t *fixed;      /* [pp / chunks], per stage (interleaved: its chunks together); NULL: memory only
                                breaks ties among the fastest splits */
  double cap;
  int64_t *by_time;          /* [pp]: the split by time alone (then memory as the tie-break) */
  bool fits;                 /* with fixed: some split's every stage fits cap (else split is by_time's) */
  bool stepwise;             /* the fit searches one padding and one layer at a time, no shortcut (their tests'
                                reference: tests/passes/test_pp_equiv_sched.c) */
  char source[160];          /* the device's figures (CostDevice.source) */
} PipeBalance;
/* Stage st's forward and backward seconds per micro-batch with n layers. */
double pipe_balance_stage_s(const PipeBalance *b, int st, int64_t n);
/* Stage s's memory (a rank's) with n[k] layers on (virtual) stage k, with b->fixed its planned bytes by the
 * calibrated model: pipe_balance_stage_bytes with the padding the largest count; interleaved, its chunks'
 * summed, chunk c padded to the largest chunk c (the stage pass's layout). */
int64_t pipe_balance_rank_bytes(const PipeBalance *b, const int64_t *n, int s);
/* Stage st's memory with n layers (the largest stage has most): its activations in flight and the
 * layer stacks padded to most layers; what does not depend on the split is left out. */
int64_t pipe_balance_stage_bytes(const PipeBalance *b, int st, int64_t n, int64_t most);
/* The split of b's layers over its stages balanced by time, then memory (passes/pipe_balance.c's header)
 * into n[pp]; with b->fixed, the fastest whose every stage fits b->cap (where one does); false when
 * there is none (fewer layers than stages). */
bool pipe_balance_split(const PipeBalance *b, int64_t *n);
/* `layers(balanced)` against the device's memory: m0 compiled with the split by time (Plan.stage_fixed
 * NULL); where its plan does not fit cap (the allocation, scaled from each stage's peak as the memory
 * plan's total is from its peak) or its first stage is the largest, each stage's planned bytes less
 * what the balance's model counts of them (activations in flight, layer stacks padded to the most
 * layers; interleaved: a stage's chunks together, pipe_balance_rank_bytes): Plan.stage_fixed for a compile
 * with stage_cap = cap. NULL: nothing to weigh (not `layers(balanced)`, no capacity, the plan fits and a
 * later stage is the largest; interleaved: the plan fits). */
const int64_t *pipe_balance_calibrate(const Module *m0, double cap, Arena *a);
/* The slowest stage's seconds and the largest stage memory that depends on the split (activations in
 * flight, the layer stacks padded to the largest count) with n[s] layers on (virtual) stage s. */
void pipe_balance_figures(const PipeBalance *b, const int64_t *n, double *slow, int64_t *peak);
/* Whether b's balanced split (b->split) beats the split cur (even, or as written): a faster slowest
 * stage, or as fast with less memory; interleaved, a faster slowest virtual stage. What the plan prints
 * the balanced split as a suggestion on (passes/pipe_report.c) and the plan search adds a balanced
 * candidate beside an even one on (passes/plan_search.c): one decision. */
bool pipe_balance_better(const PipeBalance *b, const int64_t *cur);
/* Whether every stage of split n fits b->cap by the calibrated model (true without b->fixed). */
bool pipe_balance_fits(const PipeBalance *b, const int64_t *n);
/* The stage pass's (passes/stage.c): the figures of m's micro-step region A, with its layer loops F and
 * B not yet split, over pp stages, and the balanced split. Interleaved (v chunks per stage), over the pp v
 * virtual stages (PipeBalance.pp is pp v; k = c pp + s: the embedding on virtual stage 0, the head on the
 * last; each stage's forwards in flight shared among its chunks; memory: each stage's chunks summed,
 * chunk c's stacks padded to the largest chunk c; against the device's memory, Plan.stage_fixed, per
 * stage: its chunks together). NULL after an error (reported). */
PipeBalance *pipe_balance_make(Module *m, Node *A, Node *F, Node *B, int pp, int v);

/* The stages, the schedule and its bubble (passes/pipe_report.c). Nothing without pp. With cp (the
 * cost model's timeline, passes/cost.h; source: the device's), each stage's instruction and transfer
 * times and the bubble of the schedule played with them; without, the bubble with times in
 * proportion to FLOPs (PipePlan.bubble). */
struct CostPipe;
void pipe_print(FILE *f, const Module *m, const struct CostPipe *cp, const char *source);
/* The schedule as an SVG picture: one lane per stage, F and B blocks to scale by predicted time
 * (cp's, else each stage's FLOPs), labelled with their micro-batch (and chunk). False without pp. */
bool pipe_svg(FILE *f, const Module *m, const struct CostPipe *cp, const char *source);

#endif
