/* ir/module.h — one compilation: the model graph plus the cluster, the plan and the recipe.
 *
 * The frontend fills a Module from .model files and -D overrides; passes read the
 * plan and recipe from it and rewrite `graph`.
 */
#ifndef SHARDC_MODULE_H
#define SHARDC_MODULE_H

#include "ir.h"

/* ---- topology ------------------------------------------------------------ */
typedef enum { LINK_NONE, LINK_NVLINK, LINK_PCIE, LINK_EFA, LINK_IB, LINK_ETH, LINK_SHM, LINK_COUNT } LinkKind;
extern const char *const ir_link_names[LINK_COUNT]; /* "none", "nvlink", "pcie", "efa", "infiniband", "ethernet", "shm" */

typedef struct {
  LinkKind kind;
  int count;           /* parallel links (e.g. 4 x 100 Gbit/s EFA); 1 when not given */
  double bytes_per_s;  /* per link, bytes/s */
  double latency_s;    /* seconds */
  SrcLoc loc;
} Link;

typedef struct {
  const char *name;        /* topology name */
  int nodes;               /* machines */
  bool cpu_only;           /* ranks are processes on cores */
  const char *device;      /* "a100_40g", "h100_80g", "cpu", ... */
  int devices_per_node;    /* GPUs (or ranks, for cpu_only) per node */
  double device_memory;    /* bytes per device */
  double peak_flops_bf16;  /* FLOP/s per device */
  double peak_flops_f32;   /* FLOP/s per device (0: unknown) */
  double hbm_bytes_per_s;  /* device memory bandwidth, bytes/s */
  Link intra;              /* device to device inside a node */
  Link inter;              /* between nodes, per node */
  double host_memory;      /* bytes per node */
  double pcie_bytes_per_s; /* host <-> device, bytes/s */
  SrcLoc loc;
} Topology;

/* ---- parallel plan --------------------------------------------------------- */
typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB } PipeSchedule;
/* Activation recompute (passes/recompute.c): none keeps every activation the backward reads; full keeps
 * each repeat block's carried input and recomputes the block's forward in backward; selective keeps the
 * GEMM, norm and communication outputs and recomputes attention (sdpa) and cheap elementwise/shape ops. */
typedef enum { RECOMPUTE_NONE, RECOMPUTE_FULL, RECOMPUTE_SELECTIVE } RecomputeKind;
/* How context parallelism runs attention (passes/shard_cp.c): ring passes K and V around the cp
 * ring; all2all (Ulysses) exchanges the sequence split for a split of the heads before attention
 * and back after it. */
typedef enum { CP_RING, CP_ALL2ALL } CpMode;
/* Where compute's bf16 copy of the f32 master weights comes from under `precision bf16` on the CUDA
 * target (passes/wshadow.c decides): auto: persistent where the plan with it fits the device, else per
 * layer; persistent: one copy per parameter kept across steps, written by the optimizer's update;
 * per_layer: cast again in every loop that reads it, one layer at a time (passes/wcast.c). */
typedef enum { WCOPY_AUTO, WCOPY_PERSISTENT, WCOPY_PER_LAYER } WeightCopy;

/* The plan options a pass may or may not apply yet (ir/plan_options.c: which ones the
 * compiler applies, and the error for the others). */
typedef enum {
  PLAN_OPT_PP,           /* `pp N`: pipeline stages */
  PLAN_OPT_CP,           /* `cp N`: context parallelism */
  PLAN_OPT_ZERO,         /* `zero 1..3`: optimizer state / gradient / parameter sharding over dp */
  PLAN_OPT_OFFLOAD,      /* `offload on` (`zero N offload`): optimizer state on the host */
  PLAN_OPT_RECOMPUTE,    /* `recompute selective | full`: activation checkpointing */
  PLAN_OPT_MICROBATCHES, /* `microbatches N`: pipeline micro-batches in flight */
  PLAN_OPT_SCHEDULE,     /* `schedule gpipe | 1f1b | interleaved | zb`: the pipeline schedule */
  PLAN_OPT_CP_MODE,      /* `cp_mode ring | all2all`: how context parallelism runs attention */
  PLAN_OPT_WEIGHT_COPY,  /* `weight_copy auto | persistent | per_layer`: the bf16 copy of the weights */
  PLAN_OPT_COALESCE,     /* `coalesce auto | on | off`: ZeRO-3's gathers, ZeRO-2/3's scatters joined (passes/zero_coalesce.c) */
  PLAN_OPT_DEFER_WAITS,  /* `defer_waits auto | on | off`: ZeRO-2/3's scatter waits deferred (passes/zero_defer.c) */
  PLAN_OPT_ZB_W,         /* `zb_w auto | hold | recompute`: zb's W under recompute (passes/recompute.c) */
  PLAN_OPT_COUNT
} PlanOpt;

/* One memory-dependent auto choice's figure, decided by the driver (replan.c, auto_memory,
 * or compile_as's re-plan): the planned total per rank of the plan with the choice (the one taken, or the
 * fastest with it that fits where lost, else the smallest with it) and the device's memory (0: not measured:
 * no device memory known, or a test's module). The pass drops the choice where the total exceeds cap
 * (fit_figure_over), or where lost: a plan with it fits, but one without it that fits the cost model has
 * faster (PlanFit.kept: what was kept instead). */
typedef struct {
  int64_t total;
  double cap;
  bool lost;
} FitFigure;

/* The driver's figures for the memory-dependent auto choices, decided together (replan.c, auto_memory) and
 * handed to a plan's compile in one piece: `weight_copy auto` (wcopy: the persistent bf16 copies,
 * passes/wshadow.c), `defer_waits auto` (defer: the deferred scatter waits, passes/zero_defer.c), `zb_w auto`
 * (zbw: W holding B's recomputed values, passes/recompute.c). */
typedef struct {
  FitFigure wcopy, defer, zbw;
  /* zb_w auto: the hold taken for the last zbw_layers layers of each stage's loop only (the largest such
   * hold that fits, where the whole hold does not: auto_memory); 0: all or none, as zbw says */
  int zbw_layers;
  int64_t zbw_whole; /* ... and then the total of the plan with the whole hold (zbw: the partial's) */
  /* the choices kept where one that fit was dropped on speed (a lost): AUTO_MEM_* bits, for the memory
   * report's why (fit_auto_kept) */
  unsigned char kept;
} PlanFit;

enum { PLAN_MAX_STAGE_LAYERS = 64 };

typedef struct {
  int dp, tp, pp, cp; /* degrees as written; dp 0: auto. Resolved once into Module.mesh (ir/mesh.h) */
  bool sp;            /* sequence parallel in tp regions */
  int zero;           /* 0..3 */
  bool offload;       /* ZeRO optimizer state on host (a note on the CPU target: passes/optimizer.c; applied on CUDA: passes/zero.c) */
  int microbatches;
  PipeSchedule schedule;
  int interleave;     /* virtual stages per rank for SCHED_INTERLEAVED */
  RecomputeKind recompute;
  CpMode cp_mode;     /* with cp > 1 (ring: the default) */
  WeightCopy weight_copy; /* as written (auto: the default); passes/wshadow.c decides (fit.wcopy), Module.wcopy says what */
  bool allow_cross_node_tp;
  int64_t bucket_bytes; /* data-parallel gradient bucket size */
  SrcLoc bucket_loc;    /* where `bucket` was written (file NULL: the default) */
  /* `coalesce auto | on | off`: ZeRO-3's gathers issued at one point, and (ZeRO-2/3) a loop body's gradient
   * reduce-scatters, each as one collective (passes/zero_coalesce.c; auto: where the cost model says it pays) */
  enum { COALESCE_AUTO, COALESCE_ON, COALESCE_OFF } coalesce;
  /* `defer_waits auto | on | off`: a backward layer loop's gradient reduce-scatters waited in the next
   * iteration (passes/zero_defer.c; their f32 inputs then live through the loop's body). auto: where the
   * plan with them fits the device (fit.defer); zero_defer_taken decides from it */
  enum { DEFER_AUTO, DEFER_ON, DEFER_OFF } defer_waits;
  /* `zb_w auto | hold | recompute`: under schedule zb and recompute, whether W takes the weight-gradient
   * GEMMs' inputs B's recompute made, held from B to W, or recomputes them from the forward's saved values
   * (passes/recompute.c). auto: decided by the driver (fit.zbw) */
  enum { ZBW_AUTO, ZBW_HOLD, ZBW_RECOMPUTE } zb_w;
  /* `zb_w hold(N)` (`-D zb_w=hold:N`): W holds for the last N layers of each stage's layer loop only, and
   * recomputes for the others (passes/recompute_split.c); 0: all (`zb_w hold`) */
  int zb_w_layers;
  /* the driver's figures for the auto choices above (replan.c, auto_memory; all 0 where not measured) */
  PlanFit fit;
  /* `pp N layers(a, b, ..)`: the layers of each stage as written (passes/stage.c checks and applies
   * them; with `schedule interleaved(v: V)` pp counts, each stage's, or pp x V, each virtual stage's);
   * nstage_layers 0: none written, every stage gets L / pp */
  int stage_layers[PLAN_MAX_STAGE_LAYERS], nstage_layers;
  SrcLoc stage_layer_loc[PLAN_MAX_STAGE_LAYERS]; /* where each count was written */
  /* zb: the times its lists are made with, per stage: F, B, W of stage s at [s], [pp + s], [2 pp + s]
   * (passes/pipe_sched.c, pipe_sched_make_timed); NULL: equal times. The driver sets the cost
   * model's (replan.c, zb_times: two small compiles' instruction times), tests their own */
  const double *sched_times;
  /* `pp N layers(balanced)`: the stage pass splits the layers by the cost model's time and memory
   * per layer (passes/pipe_balance.c); nstage_layers is 0 then */
  bool stage_balanced;
  /* `layers(balanced)` against the device's memory (passes/pipe_balance.c): each stage's bytes the
   * balance's own memory model leaves out (stage_fixed[s], [pp]) and the bytes every stage must fit
   * (stage_cap), both from a first compile of the time-balanced split (replan.c, stage_memory); NULL:
   * time first, memory only as a tie-break */
  const int64_t *stage_fixed;
  double stage_cap;
  SrcLoc stage_layers_loc;
  SrcLoc loc;
  /* where each option of PlanOpt, and each degree (dp pp cp tp, by RT_AX_*), was written: in the file,
   * or by -D (file DIAG_CMDLINE, the definition's value); file NULL: the default */
  SrcLoc opt_loc[PLAN_OPT_COUNT];
  SrcLoc degree_loc[RT_AX_COUNT];
} Plan;

/* ---- training recipe --------------------------------------------------------- */
typedef enum { OPT_SGD, OPT_ADAMW } OptimizerKind;
typedef enum { LR_CONSTANT, LR_LINEAR, LR_COSINE } LrScheduleKind;
typedef enum { PREC_F32, PREC_BF16 } Precision;
/* A step whose gradients hold NaN / Inf: stop the run there, or skip its optimizer update. */
typedef enum { NONFINITE_STOP, NONFINITE_SKIP } NonfiniteAction;

/* The recipe's numbers that passes/optimizer.c checks (Recipe.num_loc): names in ir_recipe_num_names. */
typedef enum {
  RNUM_LR, RNUM_GRAD_CLIP, RNUM_WEIGHT_DECAY, RNUM_EPS, RNUM_MOMENTUM, RNUM_MIN_LR, RNUM_BETA1, RNUM_BETA2, RNUM_COUNT
} RecipeNum;
extern const char *const ir_recipe_num_names[RNUM_COUNT];

/* Flat recipe keys that one optimizer or schedule reads (Recipe.flat_set). */
typedef enum { RECIPE_BETA1, RECIPE_BETA2, RECIPE_EPS, RECIPE_MOMENTUM, RECIPE_MIN_LR, RECIPE_FLAT_COUNT } RecipeFlatKey;

typedef struct {
  int64_t batch;       /* sequences per optimizer step, global, as written (0: not given); see Module.batch */
  int64_t micro_batch; /* sequences per rank per micro-step, as written; see Module.batch */
  int64_t seq;         /* tokens per sequence (binds `seq` when the model leaves it symbolic) */
  OptimizerKind optimizer;
  double lr, beta1, beta2, eps, weight_decay, momentum;
  LrScheduleKind lr_schedule;
  int64_t warmup;      /* steps */
  double min_lr;
  double grad_clip;    /* 0: off */
  Precision precision; /* compute dtype */
  SrcLoc precision_loc; /* where `precision` was written (file NULL: the default; DIAG_CMDLINE: -D) */
  int64_t steps;
  const char *data, *val; /* paths or globs */
  int64_t ckpt_every;
  const char *ckpt_dir;
  int ckpt_keep;
  uint64_t seed;
  NonfiniteAction on_nonfinite; /* passes/optimizer.c gates the update; the trainer counts the skips */
  int64_t max_skips;   /* skip: consecutive skipped steps after which the run stops (default 5) */
  bool max_skips_set;  /* written (in the file or by -D) */
  SrcLoc max_skips_loc; /* where */
  SrcLoc loc;
  SrcLoc batch_loc;    /* where `batch` was written (file NULL: not written; DIAG_CMDLINE: by -D) */
  SrcLoc micro_batch_loc; /* where `micro_batch` was written (file NULL: the default) */
  /* the flat keys beta1 beta2 eps (AdamW's), momentum (SGD's), min_lr (a decay's) written, in the
   * file or by -D (loc file NULL), and where; an optimizer's or schedule's call arguments go with
   * the call. passes/optimizer.c refuses one the recipe's optimizer or schedule does not read. */
  bool flat_set[RECIPE_FLAT_COUNT];
  SrcLoc flat_loc[RECIPE_FLAT_COUNT];
  /* where each RecipeNum was last set: its key, a call's argument (`adamw(lr: ..)`) or a -D value
   * (file NULL: the default); the optimizer's checks point there */
  SrcLoc num_loc[RNUM_COUNT];
} Recipe;

/* ---- module --------------------------------------------------------------- */
typedef enum { TARGET_CPU, TARGET_CUDA } Target;

/* The CUDA target's fusions that `shardc --no-fuse` turns off one by one (Module.no_fuse, a bit each;
 * names and parsing: passes/fuse_off.c; each pass asks fuse_on, passes/passes.h). */
typedef enum {
  FUSE_RESIDUAL, /* a GEMM's residual add without a bias (passes/epilogue.c EPI_RESIDUAL, epilogue_hoist.c) */
  FUSE_SWIGLU,   /* elementwise nodes moved over GEMMs (passes/fuse_order.c), silu recomputed (recompute.c) */
  FUSE_NORMRES,  /* the norms' backward adds the residual gradient (passes/fuse_normres.c) */
  FUSE_EPILOGUE, /* every GEMM epilogue (passes/epilogue.c, GELU's backward hoisted by fuse.c) */
  FUSE_GROUPS,   /* elementwise fusion groups (passes/fuse.c) */
  FUSE_CE,       /* the cross-entropy's forward and backward in one kernel (passes/fuse_ce.c) */
  FUSE_SUMSQ,    /* the clip's sums of squares in one kernel (passes/fuse_sumsq.c) */
  FUSE_HFUSE,    /* sibling GEMMs (one A, two weights) as one batched launch (passes/hfuse.c) */
  FUSE_COUNT
} FuseKind;

/* The batch, decided once with the mesh (ir_mesh_resolve) and read everywhere after. */
typedef struct {
  int64_t micro;  /* sequences per rank per micro-step: the recipe's micro_batch (the tokens' dim 0 on each rank) */
  int64_t accum;  /* micro-steps per optimizer step (gradient accumulation): batch / (micro * dp); 1 without */
  int64_t global; /* sequences per optimizer step over every replica: micro * dp * accum (the recipe's batch) */
} BatchSizes;


typedef struct {
  Arena *arena;
  const char *name;   /* model name */
  Target target;      /* what the trainer runs on (shardc --target); passes may depend on it (precision) */
  const char *target_why; /* why that target, for the plan's header (shardc's driver: fit_target_why); NULL: not said */
  unsigned no_fuse;   /* shardc --no-fuse: bit k set, FuseKind k turned off (CUDA target) */
  Graph *graph;       /* the top graph */
  const char **syms;  /* symbolic dim names: "batch", "seq", ... */
  int nsyms;
  bool has_topology, has_plan, has_recipe;
  Topology topo;
  Plan plan;
  Recipe recipe;
  struct MeshMap *mesh; /* degrees, ranks, nodes: resolved once before lowering (ir/mesh.h); NULL until then */
  BatchSizes batch;     /* sequences per rank and per step, decided with the mesh */
  struct MemPlan *memplan; /* one rank's memory, set by passes/memplan.c */
  struct PipePlan *pipe;   /* pipeline stages and schedule, set by passes/pipe_plan.c (NULL without pp) */
  struct PipeBalance *pipe_balance; /* the layers' time and memory per stage and the balanced split, set by
                                       passes/stage.c (passes/pipe_balance.c; NULL without pp) */
  /* passes/wshadow.c's decision: whether compute reads persistent bf16 copies of the parameters
   * (STATE "bf16:<param>", written by the update), their bytes per rank, and why (NULL: no bf16
   * weights to copy: f32, or the CPU target) */
  struct {
    bool persistent;
    int64_t bytes;
    const char *why;
    bool why_fit; /* why is wshadow_auto_why's, from Plan.fit (made again where the driver's figures change) */
    /* passes/zero_master.c: the f32 master bytes per rank ZeRO-1/2 saved by storing them split and
     * gathering the bf16 copies instead (0: none) */
    int64_t master_saved;
  } wcopy;
  /* passes/zero_defer.c's decision: whether the backward loops' scatter waits are deferred, the f32
   * bytes their inputs hold through a loop body (the largest loop's), and why (NULL: the plan has no
   * such scatters: zero_defers_scatters false) */
  struct {
    bool taken;
    int64_t bytes;
    const char *why;
    bool why_fit; /* why is zero_defer_auto_why's, from Plan.fit (as wcopy's) */
  } defer;
  /* passes/recompute.c under schedule zb: what a W loop takes from its B's recompute (from_b), held from B
   * to W: the values a layer and their bytes for one micro-batch (the largest W's); 0: none held */
  struct {
    int values;
    int64_t bytes;
    bool held;       /* W holds (else recomputes: zb_w recompute, or auto where the hold did not fit) */
    int layers;      /* held for the last `layers` layers of each stage's loop only (hold(N)); 0: all */
    int stage_layers; /* the most layers a stage's W loop runs (before hold(N)'s cut): what N may be up to */
    const char *why; /* the decision, for the memory report (NULL: no zb W loop under recompute) */
    bool why_fit;    /* why is recompute_zbw_auto_why's, from Plan.fit (as wcopy's) */
  } zbw;
  bool cpu_llvm_kernels; /* the CPU target's trainer runs the LLVM-built kernels (--cpu-kernels llvm, the default
                            where LLVM builds for the host: main.c decides, once, for codegen and this): the cost
                            model prices its elementwise loops at their rates (passes/cost_op.c) */
  const char *cost_profile; /* `--profile FILE`: the device figures the passes' cost model reads (NULL: the
                               topology's, passes/cost.c's cost_device_defaults) */
} Module;

/* Defaults for a plan and a recipe (single rank, AdamW 3e-4, f32, ...). */
void ir_plan_defaults(Plan *p);
void ir_recipe_defaults(Recipe *r);
/* Learning rate at a step (0-based) under the recipe's schedule. */
double ir_lr_at(const Recipe *r, int64_t step);

#endif
