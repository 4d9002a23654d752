/* runtime/train/ckpt_shard.c — sharded checkpoints: every rank writes its own blocks, and any
 * layout reads any checkpoint, each rank reading only the pieces it needs.
 *
 * A sharded checkpoint is a directory DIR/step_NNNNNNNN holding
 *   rank_RRRRR.safetensors   per rank: the pieces of the logical tensors it owns (parameters and
 *                            optimizer state), each a rectangular slice named "NAME[a:b,c:d]"
 *   index.json               {"format": "shardc-sharded-1", "__metadata__": {trainer state},
 *                            "mesh": [dp, pp, cp, tp], "tensors": [{"name", "kind", "dtype", "shape",
 *                            "pieces": [{"file", "entry", "start", "shape"}]}]}
 * A tensor's block on a rank is a few rectangles of the logical tensor (one per block of each split
 * dim: RtSharding.blocks, zigzag halves). Replicas (ranks that differ only on axes not splitting a
 * tensor) hold the same bytes; one of them writes it (rt_ckpt_writer, runtime/mesh.h, the rule the
 * compiler's storage report counts by): coordinate 0 on every axis but dp, and along dp the replica
 * (tensor index mod dp), so data-parallel replicas share the writing; along pp, for a tensor held on
 * some stages only (RtTensor.stages: the embedding, the head), the first of them.
 * A rank never loads a tensor its stage does not hold (those bytes are other values' there).
 *
 * Commit: rank 0 makes DIR/.tmp-step_N-sharded-PID (PID: rank 0's, which every rank learns at
 * the start; a crash's leftovers are cleared) before a barrier;
 * each rank's writer thread writes its file as .rank_R.part, fsyncs it and renames it into place;
 * rank 0's writer waits until every rank's file is there, writes index.json and renames the
 * directory to step_N (rt_ckpt_commit): the checkpoint exists only once it is complete. Nothing
 * here communicates (the writer threads run beside training's collectives): the directory must be
 * on a file system every rank sees.
 *
 * Memory: the writer holds the rank's snapshot (its own blocks) and at most one packed piece.
 *
 * Loading (rt_ckpt_load_local) works the same for a sharded checkpoint and a logical one (a
 * logical file is one piece per tensor, or per layer of a stacked one): for each of this rank's
 * rectangles and each piece overlapping it, the rows of the overlap are read with pread straight
 * into the rank's tensor. Memory: O(this rank's blocks) on save and load, never the model.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "files.h"

#define MAX_RECTS 256 /* rectangles of one tensor's block */

typedef struct {
  int64_t start[RT_MAX_RANK];  /* logical index of its first element, per dim */
  int64_t lstart[RT_MAX_RANK]; /* the same element's index in the local block */
  int64_t len[RT_MAX_RANK];    /* elements per dim */
} Rect;

/* The rectangles of t's local block on the rank at coord, in logical and local coordinates (out
 * NULL: only their count). */
static int local_rects(const RtProgram *p, const RtTensor *t, const int coord[RT_AX_COUNT], Rect *out) {
  int nseg[RT_MAX_RANK];
  int64_t per[RT_MAX_RANK];
  int n = 1;
  for (int d = 0; d < t->rank; d++) {
    int a = rt_tensor_dim_axis(p, t, d);
    nseg[d] = a >= 0 ? rt_blocks_count(t->shard.blocks[d]) : 1;
    if (a >= 0 && t->shard.blocks[d] == RT_BLOCKS_STAGES && p->stage_chunks > 1) nseg[d] = p->stage_chunks; /* its chunks */
    per[d] = t->dims[d] / nseg[d];
    n *= nseg[d];
  }
  if (n > MAX_RECTS) rt_bug("tensor %s: %d rectangles per rank", t->name, n);
  if (!out) return n;
  for (int k = 0; k < n; k++) {
    int rest = k;
    for (int d = t->rank - 1; d >= 0; d--) {
      int s = rest % nseg[d];
      rest /= nseg[d];
      int a = rt_tensor_dim_axis(p, t, d);
      out[k].lstart[d] = s * per[d];
      out[k].len[d] = per[d];
      if (a >= 0 && t->shard.blocks[d] == RT_BLOCKS_STAGES) { /* uneven pipeline stages: the stage's (chunk's) rows, no padding */
        int deg = rt_program_degree(p, a);
        out[k].lstart[d] = rt_stage_chunk_start(p->stage_rows, deg, s);
        out[k].len[d] = p->stage_rows[s * deg + coord[a]];
        out[k].start[d] = rt_stage_index(p->stage_rows, deg, p->stage_chunks, coord[a], out[k].lstart[d]);
        continue;
      }
      out[k].start[d] = rt_tensor_dim_index(p, t, d, coord, s * per[d]); /* (an inner split: blocks <= 1, one segment) */
    }
  }
  return n;
}

/* Whether the rank at coord writes tensor number ti: runtime/mesh.h's rule (see the top of the file). */
static int writes(const RtProgram *p, const RtTensor *t, int ti, const int coord[RT_AX_COUNT]) {
  int dim[RT_AX_COUNT];
  for (int a = 0; a < RT_AX_COUNT; a++) dim[a] = rt_program_degree(p, a);
  return rt_ckpt_writer(dim, coord, rt_tensor_split_mask(p, t), t->stages, ti);
}

int rt_ckpt_shard_writes(const RtProgram *p, int ti, const int coord[RT_AX_COUNT]) {
  return writes(p, &p->tensors[ti], ti, coord);
}

static int saved_kind(int kind) { return kind == RT_T_PARAM || kind == RT_T_STATE; }

static void piece_name(char *out, size_t n, const char *name, const Rect *r, int rank) {
  int w = snprintf(out, n, "%s[", name);
  for (int d = 0; d < rank && w > 0 && (size_t)w < n; d++)
    w += snprintf(out + w, n - (size_t)w, "%s%lld:%lld", d ? "," : "", (long long)r->start[d],
                  (long long)(r->start[d] + r->len[d]));
  if (w > 0 && (size_t)w < n) w += snprintf(out + w, n - (size_t)w, "]");
  if (w < 0 || (size_t)w >= n) rt_bug("piece name too long: %s", name);
}

/* Calls fn(src, dst, elems) for each row (run along the last dim) of the rectangle len[] placed at
 * offset `so` in a row-major array of dims sdims and at `doff` in one of dims ddims (element
 * offsets of the rectangle's first element); consecutive rows contiguous in both are merged. */
typedef void (*RowFn)(void *ctx, int64_t src, int64_t dst, int64_t elems);
static void for_rows(int rank, const int64_t *len, const int64_t *sdims, int64_t so, const int64_t *ddims, int64_t doff,
                     RowFn fn, void *ctx) {
  if (rank == 0) {
    fn(ctx, so, doff, 1);
    return;
  }
  int64_t sstride[RT_MAX_RANK], dstride[RT_MAX_RANK], idx[RT_MAX_RANK] = {0};
  sstride[rank - 1] = dstride[rank - 1] = 1;
  for (int d = rank - 2; d >= 0; d--) {
    sstride[d] = sstride[d + 1] * sdims[d + 1];
    dstride[d] = dstride[d + 1] * ddims[d + 1];
  }
  for (int d = 0; d < rank; d++)
    if (len[d] == 0) return;
  int64_t run_s = -1, run_d = -1, run_n = 0, w = len[rank - 1];
  for (;;) {
    int64_t s = so, t = doff;
    for (int d = 0; d < rank - 1; d++)
      s += idx[d] * sstride[d], t += idx[d] * dstride[d];
    if (run_n && s == run_s + run_n && t == run_d + run_n)
      run_n += w;
    else {
      if (run_n) fn(ctx, run_s, run_d, run_n);
      run_s = s, run_d = t, run_n = w;
    }
    int d = rank - 2;
    while (d >= 0 && ++idx[d] == len[d])
      idx[d--] = 0;
    if (d < 0) break;
  }
  if (run_n) fn(ctx, run_s, run_d, run_n);
}

/* ---- writing ---- */

typedef struct {
  const char *src;
  char *dst;
  size_t es;
} Pack;

static void pack_row(void *ctx, int64_t s, int64_t d, int64_t n) {
  Pack *k = ctx;
  memcpy(k->dst + (size_t)d * k->es, k->src + (size_t)s * k->es, (size_t)n * k->es);
}

/* A piece that is not contiguous in its block: copied out of the snapshot when it is written. */
typedef struct {
  const RtTensor *t;        /* its tensor (local dims) */
  const char *base;         /* the block in the snapshot */
  Rect rect;
  const RtShardSave *stall; /* the test hook's "piece" point: stop before packing this one */
} PieceJob;

static void pack_piece(const void *ctx, void *dst) {
  const PieceJob *j = ctx;
  if (j->stall) rt_ckpt_stall("piece", j->stall->st.step, j->stall->rank);
  int64_t off = 0;
  for (int d = 0; d < j->t->rank; d++)
    off = off * j->t->dims[d] + j->rect.lstart[d];
  Pack pk = {.src = j->base, .dst = dst, .es = rt_dtype_size((RtDType)j->t->dtype)};
  for_rows(j->t->rank, j->rect.len, j->t->dims, off, j->rect.len, 0, pack_row, &pk);
}

static char *rank_file(int rank) { return rt_xprintf("rank_%05d.safetensors", rank); }

/* This rank's file: its pieces, straight from the snapshot, or packed one at a time where a block
 * has several rectangles. */
static void write_rank_file(const RtShardSave *j, const char *meta) {
  const RtProgram *p = j->p;
  int coord[RT_AX_COUNT];
  rt_mesh_coords(&j->mesh, j->rank, coord);
  int cap = 64, n = 0;
  RtStPiece *pc = rt_xmalloc((size_t)cap * sizeof *pc);
  PieceJob *jobs = rt_xmalloc((size_t)cap * sizeof *jobs);
  char **names = rt_xmalloc((size_t)cap * sizeof *names);
  Rect *rects = rt_xmalloc(MAX_RECTS * sizeof *rects);
  for (int ti = 0; ti < p->ntensors; ti++) {
    const RtTensor *t = &p->tensors[ti];
    if (!saved_kind(t->kind) || !writes(p, t, ti, coord)) continue;
    int nr = local_rects(p, t, coord, rects);
    size_t es = rt_dtype_size((RtDType)t->dtype);
    for (int k = 0; k < nr; k++) {
      if (n == cap) {
        cap *= 2;
        RtStPiece *np = realloc(pc, (size_t)cap * sizeof *pc);
        if (np) pc = np;
        PieceJob *nj = np ? realloc(jobs, (size_t)cap * sizeof *jobs) : NULL;
        if (nj) jobs = nj;
        char **nn = nj ? realloc(names, (size_t)cap * sizeof *names) : NULL;
        if (!nn) rt_user_error("checkpoint: out of memory");
        names = nn;
      }
      char nm[512];
      piece_name(nm, sizeof nm, t->name, &rects[k], t->rank);
      names[n] = rt_xstrdup(nm);
      int64_t elems = 1;
      for (int d = 0; d < t->rank; d++)
        elems *= rects[k].len[d];
      pc[n] = (RtStPiece){.name = names[n], .dtype = t->dtype, .rank = t->rank, .bytes = elems * (int64_t)es};
      memcpy(pc[n].dims, rects[k].len, sizeof rects[k].len);
      jobs[n] = (PieceJob){.t = t, .base = j->mem + t->offset, .rect = rects[k]};
      if (nr == 1) pc[n].data = j->mem + t->offset; /* the whole block, as it lies in the snapshot */
      n++;
    }
  }
  for (int i = 0; i < n; i++)
    if (!pc[i].data) pc[i].pack = pack_piece, pc[i].pack_ctx = &jobs[i];
  if (n && rt_ckpt_stall_armed("piece", j->st.step, j->rank)) { /* the test hook stops before the middle piece */
    jobs[n / 2].stall = j;
    pc[n / 2].data = NULL, pc[n / 2].pack = pack_piece, pc[n / 2].pack_ctx = &jobs[n / 2];
  }
  char *file = rank_file(j->rank);
  char *part = rt_xprintf("%s/.%s.part", j->tmp, file), *done = rt_xprintf("%s/%s", j->tmp, file);
  rt_st_write(part, pc, n, meta);
  rt_ckpt_stall("file", j->st.step, j->rank);
  if (rename(part, done) != 0) rt_user_error("checkpoint: cannot rename '%s': %s", part, strerror(errno));
  rt_ckpt_stall("renamed", j->st.step, j->rank);
  for (int i = 0; i < n; i++)
    free(names[i]);
  free(pc), free(jobs), free(names), free(rects), free(file), free(part), free(done);
}

static void json_dims(FILE *f, const int64_t *v, int n) {
  fputc('[', f);
  for (int d = 0; d < n; d++)
    fprintf(f, "%s%lld", d ? "," : "", (long long)v[d]);
  fputc(']', f);
}

/* ---- index.json's text (also written by shardc ckpt convert, ckpt_convert.c) ---- */

void rt_shard_index_head(FILE *f, const char *meta, int world, const int mesh[4]) {
  fprintf(f, "{\"format\":\"%s\",\n%s,\n\"world\":%d,\"mesh\":[%d,%d,%d,%d],\n\"tensors\":[", RT_SHARD_FORMAT, meta,
          world, mesh[0], mesh[1], mesh[2], mesh[3]);
}

void rt_shard_index_tensor(FILE *f, int first, const char *name, int kind, int dtype, const int64_t *ld, int rank,
                           int layers) {
  fprintf(f, "%s\n{\"name\":", first ? "" : "]},");
  rt_json_write_str(f, name);
  fprintf(f, ",\"kind\":\"%s\",\"dtype\":\"%s\",\"shape\":", kind == RT_T_PARAM ? "param" : "state",
          rt_dtype_st_name(dtype));
  json_dims(f, ld, rank);
  if (layers) fputs(",\"layers\":true", f);
  fputs(",\"pieces\":[", f);
}

void rt_shard_index_piece(FILE *f, int first, const char *file, const char *entry, const int64_t *start,
                          const int64_t *len, int rank) {
  fprintf(f, "%s{\"file\":\"%s\",\"entry\":", first ? "" : ",", file);
  rt_json_write_str(f, entry);
  fputs(",\"start\":", f);
  json_dims(f, start, rank);
  fputs(",\"shape\":", f);
  json_dims(f, len, rank);
  fputc('}', f);
}

void rt_shard_index_end(FILE *f, int ntensors) { fputs(ntensors ? "]}\n]}\n" : "\n]}\n", f); }

/* index.json: every rank's pieces, computed here from the layout (nothing is gathered). */
static void write_index(const RtShardSave *j, const char *meta) {
  const RtProgram *p = j->p;
  char *path = rt_xprintf("%s/" RT_SHARD_INDEX, j->tmp);
  FILE *f = fopen(path, "w");
  if (!f) rt_user_error("checkpoint: cannot create '%s': %s", path, strerror(errno));
  int mesh[4] = {rt_program_degree(p, RT_AX_DP), rt_program_degree(p, RT_AX_PP), rt_program_degree(p, RT_AX_CP),
                 rt_program_degree(p, RT_AX_TP)};
  rt_shard_index_head(f, meta, j->world, mesh);
  Rect *rects = rt_xmalloc(MAX_RECTS * sizeof *rects);
  int nt = 0;
  for (int ti = 0; ti < p->ntensors; ti++) {
    const RtTensor *t = &p->tensors[ti];
    if (!saved_kind(t->kind)) continue;
    int64_t ld[RT_MAX_RANK];
    rt_tensor_logical_dims(p, t, ld);
    rt_shard_index_tensor(f, !nt++, t->name, t->kind, t->dtype, ld, t->rank, rt_ckpt_per_layer(p, t));
    int np = 0;
    for (int r = 0; r < j->world; r++) {
      int coord[RT_AX_COUNT];
      rt_mesh_coords(&j->mesh, r, coord);
      if (!writes(p, t, ti, coord)) continue;
      int nr = local_rects(p, t, coord, rects);
      char *file = rank_file(r);
      for (int k = 0; k < nr; k++) {
        char nm[512];
        piece_name(nm, sizeof nm, t->name, &rects[k], t->rank);
        rt_shard_index_piece(f, !np++, file, nm, rects[k].start, rects[k].len, t->rank);
      }
      free(file);
    }
  }
  rt_shard_index_end(f, nt);
  if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
    rt_user_error("checkpoint: cannot write '%s': %s", path, strerror(errno));
  free(rects);
  free(path);
}

/* Rank 0: every rank's file is in tmp (SHARDRT_CKPT_WAIT seconds at most, default 600). */
static void wait_for_ranks(const RtShardSave *j) {
  double limit = rt_env_num("SHARDRT_CKPT_WAIT", 600, 1e-3, 1e9), t0 = rt_now();
  for (int r = 0; r < j->world; r++) {
    char *file = rank_file(r), *path = rt_xprintf("%s/%s", j->tmp, file);
    struct stat sb;
    while (stat(path, &sb) != 0) {
      if (rt_now() - t0 > limit)
        rt_user_error("checkpoint: rank %d's '%s' did not appear within %.0f s (SHARDRT_CKPT_WAIT); every rank must "
                      "see --save-to '%s' (a shared file system)",
                      r, path, limit, j->dir);
      struct timespec ts = {0, 5 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    free(file);
    free(path);
  }
}

void rt_ckpt_shard_write(const RtShardSave *j) {
  char *meta = rt_ckpt_meta(j->p, &j->st, "sharded");
  rt_ckpt_stall("start", j->st.step, j->rank);
  int per_rank = rt_error_per_rank;
  rt_error_per_rank = 1; /* this rank's own file: its errors (a full disk here, say) are its own */
  write_rank_file(j, meta);
  rt_error_per_rank = per_rank; /* (rank 0's alone below: printed by rank 0 as it is) */
  if (j->rank == 0) {
    wait_for_ranks(j);
    write_index(j, meta);
    rt_ckpt_stall("index", j->st.step, 0);
    rt_ckpt_commit(j->dir, j->tmp, j->st.step, j->keep);
  }
  free(meta);
}

char *rt_ckpt_shard_tmp(const char *dir, int64_t step, int rank, int pid0) {
  char tag[48];
  snprintf(tag, sizeof tag, "sharded-%d", pid0);
  if (rank == 0) return rt_ckpt_prepare(dir, step, tag);
  return rt_xprintf("%s/.tmp-step_%08lld-%s", dir, (long long)step, tag);
}

/* ---- reading ---- */

typedef struct {
  const char *file;            /* in the checkpoint directory (not owned) */
  const char *entry;           /* tensor name in it */
  int64_t start[RT_MAX_RANK];  /* logical start */
  int64_t len[RT_MAX_RANK];    /* logical extent */
  int erank;                   /* the entry's rank (a legacy per-layer entry lacks the layer dim) */
} Piece;

typedef struct {
  char *dir;          /* the checkpoint directory (NULL: a lone .safetensors file) */
  const char *ipath;  /* its index.json (sharded) */
  RtJson *index;      /* index.json of a sharded checkpoint, NULL for a logical one */
  const char *legacy; /* a logical checkpoint's model file */
  struct {
    char *name;       /* file name */
    char *path;
    RtStFile st;
  } *files;
  int nfiles;
} Source;

static RtStFile *source_file(Source *src, const char *name) {
  for (int i = 0; i < src->nfiles; i++)
    if (!strcmp(src->files[i].name, name)) return &src->files[i].st;
  void *grown = realloc(src->files, (size_t)(src->nfiles + 1) * sizeof *src->files);
  if (!grown) rt_user_error("out of memory");
  src->files = grown;
  int i = src->nfiles++; /* (held by src from here: its fields set before anything can refuse) */
  memset(&src->files[i], 0, sizeof src->files[i]);
  src->files[i].st.fd = -1;
  src->files[i].name = rt_xstrdup(name);
  src->files[i].path = src->dir && name[0] != '/' ? rt_xprintf("%s/%s", src->dir, name) : rt_xstrdup(name);
  rt_st_open(&src->files[i].st, src->files[i].path);
  return &src->files[i].st;
}

static int64_t jint(const RtJson *j, const char *what, const char *path) {
  if (!j || j->kind != RT_JSON_NUM || !j->is_int || j->inum < 0)
    rt_user_error("'%s': malformed index: %s is not a non-negative integer", path, what);
  return j->inum;
}

static const RtJson *jget(const RtJson *o, const char *key, int kind, const char *path) {
  const RtJson *v = rt_json_get(o, key);
  if (!v || v->kind != kind) rt_user_error("'%s': malformed index: no \"%s\" of the right type", path, key);
  return v;
}

/* The pieces holding logical tensor t (dims ld) in the checkpoint; count in *n. The array (also in *held, as
 * soon as it is allocated: a refusal while it is filled frees it through the caller's cleanup) and names[]
 * (a per-layer entry's names) are the caller's to free. */
static Piece *pieces_of(Source *src, const RtProgram *p, const RtTensor *t, const int64_t *ld, int *n, char **names,
                        Piece **held) {
  *n = 0;
  if (!src->index) { /* logical: the whole tensor, or one entry per layer */
    const char *file = t->kind == RT_T_PARAM ? src->legacy : "optimizer.safetensors";
    /* a stacked tensor is written per layer ("blocks.3.w"); a checkpoint from before every plan did
     * (a 1-rank trainer that accumulated wrote "blocks.w" whole) is read whole */
    char first[256];
    rt_layer_name(first, sizeof first, t->name, 0);
    if (!rt_ckpt_per_layer(p, t) ||
        (!rt_json_get(source_file(src, file)->hdr, first) && rt_json_get(source_file(src, file)->hdr, t->name))) {
      Piece *pc = *held = rt_xcalloc(1, sizeof *pc);
      *pc = (Piece){.file = file, .entry = t->name, .erank = t->rank};
      memcpy(pc->len, ld, sizeof pc->len);
      *n = 1;
      return pc;
    }
    rt_ckpt_check_layers(source_file(src, file), p, t);
    Piece *pc = *held = rt_xcalloc((size_t)ld[0], sizeof *pc);
    for (int64_t l = 0; l < ld[0]; l++) {
      char nm[256];
      rt_layer_name(nm, sizeof nm, t->name, l);
      names[l] = rt_xstrdup(nm);
      pc[l] = (Piece){.file = file, .entry = names[l], .erank = t->rank - 1};
      memcpy(pc[l].len, ld, sizeof pc[l].len);
      pc[l].start[0] = l;
      pc[l].len[0] = 1;
    }
    *n = (int)ld[0];
    return pc;
  }
  const char *ipath = src->ipath;
  const RtJson *ts = jget(src->index, "tensors", RT_JSON_ARR, ipath);
  for (int i = 0; i < ts->n; i++) {
    const RtJson *e = ts->items[i];
    const RtJson *nm = jget(e, "name", RT_JSON_STR, ipath);
    if (strcmp(nm->str, t->name) != 0) continue;
    const RtJson *dt = jget(e, "dtype", RT_JSON_STR, ipath), *sh = jget(e, "shape", RT_JSON_ARR, ipath);
    int same = sh->n == t->rank && !strcmp(dt->str, rt_dtype_st_name(t->dtype));
    for (int d = 0; same && d < t->rank; d++)
      same = jint(sh->items[d], "a shape", ipath) == ld[d];
    if (!same) {
      char want[160] = "", got[160] = "";
      for (int d = 0; d < t->rank; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)ld[d]);
      for (int d = 0; d < sh->n; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                 (long long)jint(sh->items[d], "a shape", ipath));
      int64_t l0 = sh->n == t->rank && t->rank > 0 ? jint(sh->items[0], "a shape", ipath) : -1;
      char layers[96] = "";
      if (rt_ckpt_per_layer(p, t) && l0 >= 0 && l0 != ld[0])
        snprintf(layers, sizeof layers, " (%lld layer(s), this model has %lld)", (long long)l0, (long long)ld[0]);
      rt_user_error("'%s': tensor '%s' is %s [%s], the model needs %s [%s]: the checkpoint comes from another model%s",
                    ipath, t->name, dt->str, got, rt_dtype_st_name(t->dtype), want, layers);
    }
    const RtJson *ps = jget(e, "pieces", RT_JSON_ARR, ipath);
    Piece *pc = *held = rt_xcalloc((size_t)ps->n + 1, sizeof *pc);
    for (int k = 0; k < ps->n; k++) {
      const RtJson *q = ps->items[k];
      const RtJson *st = jget(q, "start", RT_JSON_ARR, ipath), *ln = jget(q, "shape", RT_JSON_ARR, ipath);
      const RtJson *fl = jget(q, "file", RT_JSON_STR, ipath);
      if (st->n != t->rank || ln->n != t->rank || strchr(fl->str, '/'))
        rt_user_error("'%s': malformed index: a piece of '%s' has the wrong rank or file", ipath, t->name);
      pc[k] = (Piece){.file = fl->str, .entry = jget(q, "entry", RT_JSON_STR, ipath)->str, .erank = t->rank};
      for (int d = 0; d < t->rank; d++) {
        pc[k].start[d] = jint(st->items[d], "a piece's start", ipath);
        pc[k].len[d] = jint(ln->items[d], "a piece's shape", ipath);
        if (pc[k].start[d] + pc[k].len[d] > ld[d])
          rt_user_error("'%s': malformed index: a piece of '%s' lies outside the tensor", ipath, t->name);
      }
    }
    for (int a = 0; a < ps->n; a++) /* disjoint: with the count of copied elements, every element once */
      for (int b = a + 1; b < ps->n; b++) {
        int meet = 1;
        for (int d = 0; meet && d < t->rank; d++)
          meet = pc[a].start[d] < pc[b].start[d] + pc[b].len[d] && pc[b].start[d] < pc[a].start[d] + pc[a].len[d];
        if (meet)
          rt_user_error("'%s': malformed index: pieces %d and %d of '%s' overlap", ipath, a, b, t->name);
      }
    *n = ps->n;
    return pc;
  }
  rt_user_error("'%s': missing tensor '%s'", ipath, t->name);
}

typedef struct {
  RtStFile *f;
  const char *entry;
  int64_t base; /* bytes: the entry's data offset */
  char *dst;
  size_t es;
  int64_t copied; /* elements */
} Copy;

static void copy_row(void *ctx, int64_t s, int64_t d, int64_t n) {
  Copy *c = ctx;
  rt_st_pread(c->f, c->entry, c->base + s * (int64_t)c->es, c->dst + (size_t)d * c->es, n * (int64_t)c->es);
  c->copied += n;
}

/* load_tensor's arrays (freed by a refusal too: rt_on_error) */
typedef struct {
  char **names; /* NULL-terminated */
  Piece *pc;
  Rect *rects;
} TensorBufs;

static void tensor_bufs_free(void *arg) {
  TensorBufs *b = arg;
  for (int64_t l = 0; b->names && b->names[l]; l++)
    free(b->names[l]);
  free(b->names), free(b->pc), free(b->rects);
}

/* Reads this rank's block of t from every piece that overlaps it. */
static void load_tensor(Source *src, const RtProgram *p, char *mem, const RtTensor *t, const int coord[RT_AX_COUNT],
                        const char *what) {
  int64_t ld[RT_MAX_RANK] = {0};
  rt_tensor_logical_dims(p, t, ld);
  TensorBufs b = {0};
  RtOnError cb;
  rt_on_error(&cb, tensor_bufs_free, &b);
  b.names = rt_xcalloc((size_t)(t->rank ? ld[0] : 1) + 1, sizeof *b.names);
  int np;
  const Piece *pc = pieces_of(src, p, t, ld, &np, b.names, &b.pc);
  int nr = local_rects(p, t, coord, NULL); /* (as many as the block has, mostly one) */
  Rect *rects = b.rects = rt_xmalloc((size_t)nr * sizeof *rects);
  local_rects(p, t, coord, rects);
  size_t es = rt_dtype_size((RtDType)t->dtype);
  Copy c = {.dst = mem + t->offset, .es = es};
  int64_t need = 0; /* the rectangles' elements: the block's, less an uneven pipeline split's padding rows */
  for (int r = 0; r < nr; r++) {
    int64_t e = 1;
    for (int d = 0; d < t->rank; d++) e *= rects[r].len[d];
    need += e;
  }
  if (need < rt_tensor_numel(t)) memset(c.dst, 0, (size_t)rt_tensor_numel(t) * es); /* the padding: nothing */
  for (int k = 0; k < np; k++) {
    const Piece *q = &pc[k];
    int opened = 0;
    for (int r = 0; r < nr; r++) {
      int64_t lo[RT_MAX_RANK], len[RT_MAX_RANK], so = 0, doff = 0;
      int empty = 0;
      for (int d = 0; d < t->rank; d++) {
        int64_t a = rects[r].start[d] > q->start[d] ? rects[r].start[d] : q->start[d];
        int64_t b = rects[r].start[d] + rects[r].len[d] < q->start[d] + q->len[d] ? rects[r].start[d] + rects[r].len[d]
                                                                                   : q->start[d] + q->len[d];
        lo[d] = a, len[d] = b - a;
        if (b <= a) empty = 1;
      }
      if (empty) continue;
      if (!opened) { /* the entry's dtype and shape are checked against the piece */
        c.f = source_file(src, q->file);
        c.entry = q->entry;
        c.base = rt_st_find(c.f, q->entry, t->dtype, q->len + (t->rank - q->erank), q->erank);
        opened = 1;
      }
      for (int d = 0; d < t->rank; d++) {
        so = so * q->len[d] + (lo[d] - q->start[d]);
        doff = doff * t->dims[d] + (lo[d] - rects[r].start[d] + rects[r].lstart[d]);
      }
      for_rows(t->rank, len, q->len, so, t->dims, doff, copy_row, &c);
    }
  }
  if (c.copied != need)
    rt_rank_error("'%s': the checkpoint's pieces of tensor '%s' cover %lld of the %lld elements this rank needs", what,
                  t->name, (long long)c.copied, (long long)need);
  int64_t bad = rt_first_nonfinite(c.dst, t->dtype, rt_tensor_numel(t));
  if (bad >= 0)
    rt_rank_error("'%s': tensor '%s' holds %s (element %lld of this rank's block): a checkpoint with non-finite values "
                  "is refused (the run that wrote it diverged; resume from an earlier checkpoint)",
                  what, t->name, rt_nonfinite_name(c.dst, t->dtype, bad), (long long)bad);
  rt_on_error_pop(&cb);
  tensor_bufs_free(&b);
}

static uint64_t meta_u64(const RtJson *m, const char *key, const char *path) {
  const RtJson *v = rt_json_get(m, key);
  char *end;
  if (!v || v->kind != RT_JSON_STR) rt_user_error("'%s' is not a shardc checkpoint: no \"%s\" in its metadata", path, key);
  errno = 0;
  unsigned long long x = strtoull(v->str, &end, 10);
  if (errno || end == v->str || *end || v->str[0] == '-')
    rt_user_error("'%s': metadata \"%s\" is \"%s\", not a number", path, key, v->str);
  return x;
}

static void read_state(const RtJson *m, const char *path, RtTrainState *st) {
  const RtJson *fmt = rt_json_get(m, "format");
  if (!fmt || fmt->kind != RT_JSON_STR || strcmp(fmt->str, "shardc-checkpoint-1") != 0)
    rt_user_error("'%s': checkpoint format \"%s\", this trainer reads \"shardc-checkpoint-1\"", path,
                  fmt && fmt->kind == RT_JSON_STR ? fmt->str : "?");
  memset(st, 0, sizeof *st);
  st->step = (int64_t)meta_u64(m, "step", path);
  st->steps = (int64_t)meta_u64(m, "steps", path);
  st->seed = meta_u64(m, "seed", path);
  st->data_pos = (int64_t)meta_u64(m, "data_position", path);
  st->rng = meta_u64(m, "rng_state", path);
  st->batch = (int64_t)meta_u64(m, "batch", path);
  st->seq = (int64_t)meta_u64(m, "seq", path);
  st->skipped = rt_json_get(m, "skipped_steps") ? (int64_t)meta_u64(m, "skipped_steps", path) : 0;
  st->skip_run = rt_json_get(m, "skip_run") ? (int64_t)meta_u64(m, "skip_run", path) : 0;
  const RtJson *l = rt_json_get(m, "loss");
  st->loss = l && l->kind == RT_JSON_STR ? strtod(l->str, NULL) : 0;
}

int rt_ckpt_is_sharded(const char *path) {
  char *dir = rt_ckpt_find(path);
  char *ipath = dir ? rt_xprintf("%s/" RT_SHARD_INDEX, dir) : NULL;
  struct stat sb;
  int yes = ipath && stat(ipath, &sb) == 0;
  free(dir);
  free(ipath);
  return yes;
}

static void fclose_v(void *f) { fclose(f); }

/* Opens path (a checkpoint directory, or with full=0 a .safetensors file) into src (zeroed, or
 * source_open's: what it holds source_close frees, also after a refusal here: the caller's cleanup): the
 * index of a sharded one, parsed and its format checked, or a logical one's model file. src->ipath: the
 * index's path. */
static void source_open(Source *src, const char *path, int full) {
  struct stat sb;
  if (stat(path, &sb) != 0) rt_user_error("cannot open checkpoint '%s': %s", path, strerror(errno));
  if (S_ISDIR(sb.st_mode)) {
    src->dir = rt_ckpt_find(path);
    if (!src->dir) rt_user_error("'%s' holds no checkpoint (no step_* directory with a model.safetensors)", path);
    char *ipath = rt_xprintf("%s/" RT_SHARD_INDEX, src->dir);
    src->ipath = ipath;
    if (stat(ipath, &sb) == 0) {
      FILE *f = fopen(ipath, "rb");
      if (!f) rt_user_error("cannot open '%s': %s", ipath, strerror(errno));
      RtOnError cf, ct;
      rt_on_error(&cf, fclose_v, f);
      fseek(f, 0, SEEK_END);
      long n = ftell(f);
      fseek(f, 0, SEEK_SET);
      if (n < 0) rt_user_error("cannot read '%s'", ipath);
      char *text = rt_xmalloc((size_t)n + 1);
      rt_on_error(&ct, free, text);
      if (fread(text, 1, (size_t)n, f) != (size_t)n) rt_user_error("cannot read '%s'", ipath);
      char err[128];
      src->index = rt_json_parse(text, (size_t)n, err, sizeof err);
      rt_on_error_pop(&ct);
      free(text);
      rt_on_error_pop(&cf);
      fclose(f);
      if (!src->index || src->index->kind != RT_JSON_OBJ)
        rt_user_error("'%s': malformed index: %s", ipath, src->index ? "not an object" : err);
      const RtJson *fmt = rt_json_get(src->index, "format");
      if (!fmt || fmt->kind != RT_JSON_STR || strcmp(fmt->str, RT_SHARD_FORMAT) != 0)
        rt_user_error("'%s': not a \"%s\" index", ipath, RT_SHARD_FORMAT);
    } else {
      free(ipath);
      src->ipath = NULL;
      src->legacy = "model.safetensors";
    }
  } else {
    if (full) rt_user_error("--resume needs a checkpoint directory, not the file '%s'", path);
    src->legacy = path;
  }
}

static void source_close(Source *src) {
  for (int i = 0; i < src->nfiles; i++) {
    rt_st_close(&src->files[i].st);
    free(src->files[i].name), free(src->files[i].path);
  }
  free(src->files);
  rt_json_free(src->index);
  free(src->dir);
  free((char *)src->ipath);
  memset(src, 0, sizeof *src);
}

static void source_close_v(void *src) { source_close(src); }

void rt_ckpt_load_local(const RtProgram *p, char *mem, const int coord[RT_AX_COUNT], const char *path, int full,
                        RtTrainState *st) {
  Source src = {0};
  RtOnError c;
  rt_on_error(&c, source_close_v, &src);
  source_open(&src, path, full);
  const char *what = src.index ? src.ipath : src.dir ? src.dir : path;
  if (full) {
    if (src.index)
      read_state(jget(src.index, "__metadata__", RT_JSON_OBJ, src.ipath), src.ipath, st);
    else {
      const RtStFile *m = source_file(&src, src.legacy);
      read_state(rt_json_get(m->hdr, "__metadata__"), m->path, st);
    }
  }
  /* a sharded checkpoint: each rank reads the pieces and files its block needs, and an error in one
   * is its own (a logical one's file and tensors: every rank's, but for a value in its block) */
  int per_rank = rt_error_per_rank;
  if (src.index) rt_error_per_rank = 1;
  for (int i = 0; i < p->ntensors; i++) {
    const RtTensor *t = &p->tensors[i];
    if (!rt_tensor_held(p, t, coord[RT_AX_PP])) continue; /* another stage's: its bytes are other values' here */
    if (t->kind == RT_T_PARAM || (full && t->kind == RT_T_STATE)) load_tensor(&src, p, mem, t, coord, what);
  }
  rt_error_per_rank = per_rank;
  rt_on_error_pop(&c);
  source_close(&src);
}

/* ---- whole logical tensors, one at a time (shardc ckpt: ckpt_convert.c) ---- */

struct RtCkptSrc {
  Source src;
};

static void src_close_v(void *s) { rt_ckpt_src_close(s); }

RtCkptSrc *rt_ckpt_src_open(const char *path) {
  RtCkptSrc *s = rt_xcalloc(1, sizeof *s);
  RtOnError c;
  rt_on_error(&c, src_close_v, s);
  source_open(&s->src, path, 0);
  rt_on_error_pop(&c);
  if (!s->src.index) rt_bug("rt_ckpt_src_open: '%s' is not sharded", path);
  return s;
}

const RtJson *rt_ckpt_src_index(const RtCkptSrc *s) { return s->src.index; }
const char *rt_ckpt_src_index_path(const RtCkptSrc *s) { return s->src.ipath; }
const char *rt_ckpt_src_dir(const RtCkptSrc *s) { return s->src.dir; }

void rt_ckpt_src_read(RtCkptSrc *s, const char *name, int dtype, int rank, const int64_t *dims, void *dst) {
  RtTensor t = {.name = name, .kind = RT_T_PARAM, .dtype = dtype, .rank = rank};
  memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
  RtProgram p = {.ntensors = 1, .tensors = &t};
  int coord[RT_AX_COUNT] = {0};
  load_tensor(&s->src, &p, dst, &t, coord, s->src.ipath);
}

void rt_ckpt_src_close(RtCkptSrc *s) {
  source_close(&s->src);
  free(s);
}
