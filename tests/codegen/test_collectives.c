/* tests/codegen/test_collectives.c — codegen of the collectives, compiled and run under mpirun,
 * against the reference interpreter on simulated ranks (label mpi).
 *
 * A small SPMD graph built by hand (ir/ir.h) uses every multi-rank op codegen emits besides the
 * ones the layouts test covers through the shard pass: all_gather and reduce_scatter along an
 * inner tensor axis of a blocked (fused, 3 blocks) layout, shard_slice along the last axis,
 * broadcast, axis_index, all_reduce with max and with avg over dp, all_to_all there (a zigzag
 * sequence split exchanged for a split of the last dim) and back. It is planned (memplan),
 * emitted as C, built, run for one step with --dump-steps under `mpirun -np 2` (tp=2) and
 * `-np 4` (dp=2 x tp=2), and every result the trainer dumps (logical tensors) is compared with
 * the interpreter's ranks assembled to logical tensors.
 * Tolerance: |got - want| <= 1e-6 * max(1, |want|): the ops only move data, except the sums of
 * two or four fp32 values (reduce_scatter, avg) and a 256-way fp32 cross-entropy.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"
#include "interp.h"
#include "memplan.h"
#include "mesh.h"
#include "passes.h"
#include "train/train.h"

static int failures;

static Value *emit(Graph *g, OpKind op, int nin, Value **in, DType dt, Shape s, Attrs a, int split_dim, int axis,
                   int blocks) {
  Value *v = ir_emit(g, op, nin, in, dt, s, &a, (SrcLoc){0});
  v->sharding = ir_replicated();
  if (split_dim >= 0) {
    v->sharding.split[split_dim] = (int8_t)axis;
    v->sharding.blocks[split_dim] = (uint8_t)blocks;
  }
  return v;
}

static Shape shp(int r, int64_t a, int64_t b, int64_t c) { return ir_shape(r, (int64_t[]){a, b, c}); }

static const char *results[] = {"loss", "g", "s", "b", "sl", "ar", "avg", "ai", "z", "a2a", "a2a_back"};
enum { NRES = sizeof results / sizeof results[0] };

static Module *build_graph(Arena *ar, MeshMap *mesh) {
  Module *m = ARENA_NEW(ar, Module);
  memset(m, 0, sizeof *m);
  m->arena = ar;
  m->name = "coll";
  ir_plan_defaults(&m->plan);
  ir_recipe_defaults(&m->recipe);
  m->recipe.seed = 5;
  m->mesh = mesh;
  Graph *g = m->graph = ir_graph_new(ar, NULL);
  const int64_t B = 2, T = 4;
  Value *tok = emit(g, OP_INPUT, 0, NULL, DT_I32, ir_shape(2, (int64_t[]){B, T}), (Attrs){.name = "tokens"}, -1, 0, 0);
  Value *tgt = emit(g, OP_INPUT, 0, NULL, DT_I32, ir_shape(2, (int64_t[]){B, T}), (Attrs){.name = "targets"}, -1, 0, 0);
  (void)tok;
  Value *lg = emit(g, OP_PARAM, 0, NULL, DT_F32, shp(3, B, T, 256),
                   (Attrs){.name = "logits", .init = INIT_NORMAL, .init_b = 1.0}, -1, 0, 0);
  /* p: [2, 6, 4] local of a logical [2, 12, 4] made of 3 blocks along dim 1, split over tp */
  Value *p = emit(g, OP_PARAM, 0, NULL, DT_F32, shp(3, 2, 6, 4), (Attrs){.name = "p", .init = INIT_NORMAL, .init_b = 1.0},
                  1, RT_AX_TP, 3);
  Value *gv = emit(g, OP_ALL_GATHER, 1, &p, DT_F32, shp(3, 2, 12, 4), (Attrs){.mesh_axis = RT_AX_TP, .axis = 1, .blocks = 3},
                   -1, 0, 0);
  Value *x2 = emit(g, OP_SCALE, 1, &gv, DT_F32, shp(3, 2, 12, 4), (Attrs){.scalar = 0.5}, -1, 0, 0);
  Value *s = emit(g, OP_REDUCE_SCATTER, 1, &x2, DT_F32, shp(3, 2, 6, 4),
                  (Attrs){.mesh_axis = RT_AX_TP, .axis = 1, .blocks = 3}, 1, RT_AX_TP, 3);
  Value *b = emit(g, OP_BROADCAST, 1, &s, DT_F32, shp(3, 2, 6, 4), (Attrs){.mesh_axis = RT_AX_TP, .start = 1}, -1, 0, 0);
  Value *sl = emit(g, OP_SHARD_SLICE, 1, &gv, DT_F32, shp(3, 2, 12, 2), (Attrs){.mesh_axis = RT_AX_TP, .axis = 2}, 2,
                   RT_AX_TP, 0);
  Value *arv = emit(g, OP_ALL_REDUCE, 1, &sl, DT_F32, shp(3, 2, 12, 2), (Attrs){.mesh_axis = RT_AX_TP, .reduce = RED_MAX},
                    -1, 0, 0);
  Value *avg = emit(g, OP_ALL_REDUCE, 1, &s, DT_F32, shp(3, 2, 6, 4), (Attrs){.mesh_axis = RT_AX_DP, .reduce = RED_AVG}, 1,
                    RT_AX_TP, 3);
  Value *ai = emit(g, OP_AXIS_INDEX, 0, NULL, DT_I32, ir_scalar_shape(), (Attrs){.mesh_axis = RT_AX_TP}, -1, 0, 0);
  Value *ce_in[2] = {lg, tgt};
  Value *ce = emit(g, OP_CROSS_ENTROPY, 2, ce_in, DT_F32, ir_scalar_shape(), (Attrs){.len = 256}, -1, 0, 0);
  Value *sb = emit(g, OP_SUM, 1, &b, DT_F32, ir_scalar_shape(), (Attrs){0}, -1, 0, 0);
  Value *sa = emit(g, OP_SUM, 1, &arv, DT_F32, ir_scalar_shape(), (Attrs){0}, -1, 0, 0);
  Value *l1[2] = {ce, sb};
  Value *t1 = emit(g, OP_ADD, 2, l1, DT_F32, ir_scalar_shape(), (Attrs){0}, -1, 0, 0);
  Value *l2[2] = {t1, sa};
  Value *loss = emit(g, OP_ADD, 2, l2, DT_F32, ir_scalar_shape(), (Attrs){0}, -1, 0, 0);
  /* all-to-all (cp_mode all2all's exchange): z [2, 8, 6] split over tp in zigzag order along dim 1
   * (local [2, 4, 6]) -> [2, 8, 3] (dim 1 whole, dim 2 split) -> back to z's layout */
  Value *z = emit(g, OP_PARAM, 0, NULL, DT_F32, shp(3, 2, 4, 6), (Attrs){.name = "z", .init = INIT_NORMAL, .init_b = 1.0},
                  1, RT_AX_TP, RT_BLOCKS_ZIGZAG);
  Value *za = emit(g, OP_ALL_TO_ALL, 1, &z, DT_F32, shp(3, 2, 8, 3),
                   (Attrs){.mesh_axis = RT_AX_TP, .axis = 1, .blocks = RT_BLOCKS_ZIGZAG, .split_axis = 2}, 2, RT_AX_TP, 0);
  Value *zb = emit(g, OP_ALL_TO_ALL, 1, &za, DT_F32, shp(3, 2, 4, 6),
                   (Attrs){.mesh_axis = RT_AX_TP, .axis = 2, .split_axis = 1, .split_blocks = RT_BLOCKS_ZIGZAG}, 1,
                   RT_AX_TP, RT_BLOCKS_ZIGZAG);
  Value *res[NRES] = {loss, gv, s, b, sl, arv, avg, ai, z, za, zb};
  for (int i = 0; i < NRES; i++) ir_add_result(g, res[i], results[i]);
  return m;
}

/* ---- the dumped safetensors file ---- */
typedef struct {
  char *buf;   /* whole file */
  RtJson *hdr; /* parsed header */
  size_t data; /* offset of the data section */
} St;

static bool st_load(St *s, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  fseek(f, 0, SEEK_END);
  size_t len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  s->buf = malloc(len);
  if (!s->buf || fread(s->buf, 1, len, f) != len) return fclose(f), false;
  fclose(f);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= (uint64_t)(unsigned char)s->buf[i] << (8 * i);
  char err[128];
  s->hdr = rt_json_parse(s->buf + 8, (size_t)n, err, sizeof err);
  s->data = 8 + (size_t)n;
  return s->hdr != NULL;
}

/* Element i of tensor name as a double (F32 or I32); NAN when absent. */
static double st_at(const St *s, const char *name, int64_t i, int64_t *count) {
  const RtJson *e = rt_json_get(s->hdr, name);
  if (!e) return NAN;
  const RtJson *offs = rt_json_get(e, "data_offsets"), *dt = rt_json_get(e, "dtype");
  *count = (offs->items[1]->inum - offs->items[0]->inum) / 4;
  const char *p = s->buf + s->data + offs->items[0]->inum + 4 * i;
  if (strcmp(dt->str, "I32") == 0) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  float v;
  memcpy(&v, p, 4);
  return v;
}

static bool a_split(const Value *v) {
  for (int d = 0; d < v->shape.rank; d++)
    if (v->sharding.split[d] >= 0) return true;
  return false;
}

/* The logical tensor of result v from the interpreter's ranks (rank order; split dims by ir_block_index). */
static Tensor logical_of(const Interp *it, const Value *v, const char *name) {
  Shape ls = v->shape;
  int deg[IR_MAX_RANK];
  for (int d = 0; d < ls.rank; d++) {
    int a = v->sharding.split[d];
    deg[d] = 1;
    if (a >= 0) {
      for (int r = 0; r < interp_nranks(it); r++)
        if (interp_coord(it, r, (MeshAxis)a) + 1 > deg[d]) deg[d] = interp_coord(it, r, (MeshAxis)a) + 1;
      ls.dim[d] *= deg[d];
    }
  }
  Tensor out = tensor_new(v->dtype, ls);
  for (int r = 0; r < interp_nranks(it); r++) {
    const Tensor *t = interp_get(it, r, name);
    int64_t n = ir_numel(&t->shape);
    for (int64_t i = 0; i < n; i++) {
      int64_t rem = i, li = 0, mul = 1;
      for (int d = ls.rank - 1; d >= 0; d--) {
        int64_t l = rem % t->shape.dim[d];
        rem /= t->shape.dim[d];
        int a = v->sharding.split[d];
        if (a >= 0) l = ir_block_index(t->shape.dim[d], v->sharding.blocks[d], deg[d], interp_coord(it, r, (MeshAxis)a), l);
        li += l * mul;
        mul *= ls.dim[d];
      }
      if (r == 0 || a_split(v)) out.data[li] = t->data[i];
    }
  }
  return out;
}

static void run_mesh(int dp, int tp) {
  int np = dp * tp;
  fprintf(stderr, "== mpirun -np %d (dp %d x tp %d)\n", np, dp, tp);
  Arena ar;
  arena_init(&ar);
  MeshMap mesh;
  rt_mesh_init(&mesh, dp, 1, 1, tp, np);
  Module *m = build_graph(&ar, &mesh);
  if (!ir_verify(m->graph, "test") || !pass_memplan(m)) {
    failures++, fprintf(stderr, "FAIL: the hand-built graph does not verify or plan\n");
    return;
  }
  char dir[] = "/tmp/shardc-coll-XXXXXX", exe[256], data[256], cmd[1024];
  if (!mkdtemp(dir)) exit(2);
  snprintf(exe, sizeof exe, "%s/train", dir);
  snprintf(data, sizeof data, "%s/data.txt", dir);
  CgOptions co = {.source_path = "test_collectives", .emit_dir = dir};
  if (!cg_build(m, exe, &co)) {
    failures++, fprintf(stderr, "FAIL: codegen\n");
    return;
  }
  FILE *f = fopen(data, "w");
  for (int i = 0; i < 4000; i++) fputc("abcdefgh ijk.\n"[i * 7 % 14], f);
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
           "mpirun --mca pml ob1 -np %d %s --data %s --val %s --steps 1 --dump-steps 1 --dump-to %s/dump "
           "--val-batches 1 > %s/log 2>&1",
           np, exe, data, data, dir, dir);
  if (system(cmd) != 0) {
    failures++, fprintf(stderr, "FAIL: the trainer failed (%s/log)\n", dir);
    return;
  }
  St st;
  char path[512];
  snprintf(path, sizeof path, "%s/dump/step_1.safetensors", dir);
  if (!st_load(&st, path)) {
    failures++, fprintf(stderr, "FAIL: no dump %s\n", path);
    return;
  }
  /* the interpreter on simulated ranks, fed the batch the trainer read */
  Interp *it = interp_new(m->graph, m->mesh, m->recipe.seed);
  const char *ins[] = {"tokens", "targets"};
  for (int k = 0; k < 2; k++) {
    Tensor t = tensor_new(DT_I32, ir_shape(2, (int64_t[]){2, 4}));
    int64_t cnt;
    for (int64_t i = 0; i < 8; i++) t.data[i] = st_at(&st, ins[k], i, &cnt);
    interp_set_input(it, -1, ins[k], &t);
    tensor_free(&t);
  }
  if (!interp_step(it)) {
    failures++, fprintf(stderr, "FAIL: interpreter\n");
    return;
  }
  for (int k = 0; k < NRES; k++) {
    Tensor want = logical_of(it, m->graph->results[k], results[k]);
    int64_t n = ir_numel(&want.shape), cnt = 0, bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
      double got = st_at(&st, results[k], i, &cnt), w = want.data[i], e = fabs(got - w) / fmax(1.0, fabs(w));
      worst = fmax(worst, e);
      if (!(e <= 1e-6)) bad++;
    }
    if (cnt != n) bad++, fprintf(stderr, "  %s: the dump holds %lld elements, want %lld\n", results[k], (long long)cnt, (long long)n);
    fprintf(stderr, "%s %-5s %4lld elements, worst relative error %.1e\n", bad ? "FAIL" : "ok  ", results[k], (long long)n, worst);
    failures += bad > 0;
    tensor_free(&want);
  }
  /* the naive reference of an all-to-all: it only changes the layout, so the logical tensors the
   * trainer assembled (by each value's sharding) are z's, exactly */
  int64_t nz = 2 * 8 * 6, cz = 0, ca = 0, cb = 0, diff = 0;
  for (int64_t i = 0; i < nz; i++) {
    double w = st_at(&st, "z", i, &cz);
    diff += st_at(&st, "a2a", i, &ca) != w || st_at(&st, "a2a_back", i, &cb) != w;
  }
  if (diff || cz != nz || ca != nz || cb != nz) failures++;
  fprintf(stderr, "%s all-to-all and back: %lld of %lld elements differ from the logical input\n", diff ? "FAIL" : "ok  ",
          (long long)diff, (long long)nz);
  interp_free(it);
  rt_json_free(st.hdr);
  free(st.buf);
  arena_free(&ar);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!failures && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

int main(void) {
  run_mesh(1, 2);
  run_mesh(2, 2);
  if (failures) fprintf(stderr, "test_collectives: %d FAILED\n", failures);
  return failures ? 1 : 0;
}
