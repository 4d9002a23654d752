/* runtime/train/ckpt.c — checkpoints in safetensors.
 *
 * A checkpoint is a directory DIR/step_NNNNNNNN holding
 *   model.safetensors             the parameters (RT_T_PARAM), per-layer names for stacked tensors
 *   optimizer.safetensors         the optimizer state (RT_T_STATE), same naming ("adam_m:blocks.3.w")
 *   model.safetensors.index.json  {"metadata": {"total_size": ...}, "weight_map": {name: file}}
 * Both .safetensors files carry the trainer state in "__metadata__" (step, steps, seed, data
 * position, RNG state, batch, sequence length, model). The directory is written as
 * DIR/.tmp-step_NNNNNNNN-PID, every file fsynced, then renamed into place and DIR fsynced: a
 * crash mid-write leaves at most a temp directory, which resume ignores and the next save removes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"

#define CKPT_FORMAT "shardc-checkpoint-1"

void rt_layer_name(char *out, size_t n, const char *name, int64_t layer) {
  const char *base = strrchr(name, ':');
  base = base ? base + 1 : name;
  const char *dot = strchr(base, '.');
  size_t head = (size_t)((dot ? dot : base + strlen(base)) - name);
  int w = snprintf(out, n, "%.*s.%lld%s", (int)head, name, (long long)layer, dot ? dot : "");
  if (w < 0 || (size_t)w >= n) rt_bug("tensor name too long: %s", name);
}

/* ---- writing ---- */

typedef struct {
  const RtTensor *t; /* the table entry */
  int64_t layer;     /* slice of a stacked tensor, -1 whole */
  char name[256];    /* checkpoint name */
  int64_t bytes;     /* data bytes */
  int64_t src;       /* bytes: offset in mem */
} StEntry;

/* Whether t is written per layer: stacked itself, or optimizer state "prefix:NAME" of a stacked
 * parameter NAME with the same layer dimension (the state of a stacked parameter is stacked too).
 * The logical layer dimensions: under ZeRO 1 / 2 the state is split over dp along the layers where
 * its replicated parameter is not (fuzz_runs seed 20700029: dp 2 x zero 1 over 2 layers holds
 * one layer of the state a rank). */
int rt_ckpt_per_layer(const RtProgram *p, const RtTensor *t) {
  if (t->stacked) return 1;
  const char *colon = strrchr(t->name, ':');
  if (t->kind != RT_T_STATE || !colon || t->rank < 1) return 0;
  const RtTensor *param = rt_find_tensor(p, colon + 1);
  if (!param || param->kind != RT_T_PARAM || !param->stacked || param->rank != t->rank) return 0;
  int64_t pd[RT_MAX_RANK], td[RT_MAX_RANK];
  rt_tensor_logical_dims(p, param, pd);
  rt_tensor_logical_dims(p, t, td);
  return pd[0] == td[0];
}

/* The checkpoint entries for tensors of kind `kind`, in table order, stacked ones per layer. */
static StEntry *st_entries(const RtProgram *p, int kind, int *count) {
  int n = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i].kind == kind) n += rt_ckpt_per_layer(p, &p->tensors[i]) ? (int)p->tensors[i].dims[0] : 1;
  StEntry *e = rt_xcalloc((size_t)n, sizeof *e);
  int k = 0;
  for (int i = 0; i < p->ntensors; i++) {
    const RtTensor *t = &p->tensors[i];
    if (t->kind != kind) continue;
    int64_t bytes = rt_tensor_numel(t) * (int64_t)rt_dtype_size(t->dtype);
    if (!rt_ckpt_per_layer(p, t)) {
      e[k] = (StEntry){.t = t, .layer = -1, .bytes = bytes, .src = t->offset};
      snprintf(e[k].name, sizeof e[k].name, "%s", t->name);
      k++;
      continue;
    }
    if (t->rank < 1 || t->dims[0] < 1) rt_bug("stacked tensor %s has no layer dimension", t->name);
    int64_t slice = bytes / t->dims[0];
    for (int64_t l = 0; l < t->dims[0]; l++, k++) {
      e[k] = (StEntry){.t = t, .layer = l, .bytes = slice, .src = t->offset + l * slice};
      rt_layer_name(e[k].name, sizeof e[k].name, t->name, l);
    }
  }
  *count = n;
  return e;
}

/* ---- a test hook: a checkpoint write stopped at a chosen point ---- */

/* The entry of SHARDRT_CKPT_STALL (a comma-separated list of POINT:STEP:RANK) that stops rank's
 * writer of step at point: its number, 1 for the first; 0 when none does. */
static int stall_entry(const char *point, int64_t step, int rank) {
  const char *env = getenv("SHARDRT_CKPT_STALL");
  if (!env || !*env) return 0;
  int k = 0;
  for (const char *e = env; *e; k++) {
    const char *end = strchr(e, ',');
    size_t len = end ? (size_t)(end - e) : strlen(e);
    const char *c1 = memchr(e, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - e)) : NULL;
    char *num_end;
    long long s = c2 ? strtoll(c1 + 1, &num_end, 10) : 0;
    if (!c2 || num_end != c2 || c2 + 1 == e + len)
      rt_user_error("SHARDRT_CKPT_STALL='%s': entry %d '%.*s': want POINT:STEP:RANK[,POINT:STEP:RANK...]", env, k + 1,
                    (int)len, e);
    if ((size_t)(c1 - e) == strlen(point) && strncmp(e, point, (size_t)(c1 - e)) == 0 && s == (long long)step &&
        atoi(c2 + 1) == rank)
      return k + 1;
    e += len;
    if (*e == ',') e++;
  }
  return 0;
}

int rt_ckpt_stall_armed(const char *point, int64_t step, int rank) { return stall_entry(point, step, rank) > 0; }

void rt_ckpt_stall(const char *point, int64_t step, int rank) {
  int k = stall_entry(point, step, rank);
  if (!k) return;
  const char *base = getenv("SHARDRT_CKPT_STALL_MARK");
  if (!base || !*base) rt_user_error("SHARDRT_CKPT_STALL needs SHARDRT_CKPT_STALL_MARK (the files it creates)");
  char *mark = rt_xprintf("%s.%d", base, k); /* entry k's mark */
  int fd = open(mark, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0 && errno == EEXIST) { /* stalled there once already: a restarted run writes on */
    free(mark);
    return;
  }
  if (fd < 0) rt_user_error("SHARDRT_CKPT_STALL_MARK: cannot create '%s': %s", mark, strerror(errno));
  char line[64];
  int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
  if (write(fd, line, (size_t)n) != n || fsync(fd) != 0 || close(fd) != 0)
    rt_user_error("SHARDRT_CKPT_STALL_MARK: cannot write '%s'", mark);
  char *go = rt_xprintf("%s.go", mark); /* (a test that lets the write go on creates it) */
  free(mark);
  for (int i = 0; i < 600; i++) { /* the test kills the job now; 60 s without it is its failure */
    if (access(go, F_OK) == 0) {
      free(go);
      return;
    }
    usleep(100 * 1000);
  }
  rt_fatal(1, "checkpoint: stalled at '%s' (SHARDRT_CKPT_STALL) for 60 s and nobody killed the job", point);
}

void rt_fsync_path(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) rt_user_error("checkpoint: cannot open '%s': %s", path, strerror(errno));
  if (fsync(fd) != 0) rt_user_error("checkpoint: cannot fsync '%s': %s", path, strerror(errno));
  close(fd);
}

static void put_meta(FILE *f, const char *key, const char *val, int *first) {
  if (!*first) fputc(',', f);
  *first = 0;
  rt_json_write_str(f, key);
  fputc(':', f);
  rt_json_write_str(f, val);
}

char *rt_ckpt_meta(const RtProgram *p, const RtTrainState *st, const char *part) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) rt_user_error("checkpoint: open_memstream: %s", strerror(errno));
  char b[64];
  int first = 1;
  fputs("\"__metadata__\":{", f);
  put_meta(f, "format", CKPT_FORMAT, &first);
  put_meta(f, "part", part, &first);
  put_meta(f, "model", p->model ? p->model : "", &first);
  put_meta(f, "source", p->source ? p->source : "", &first);
#define META_I(key, v) (snprintf(b, sizeof b, "%lld", (long long)(v)), put_meta(f, key, b, &first))
#define META_U(key, v) (snprintf(b, sizeof b, "%llu", (unsigned long long)(v)), put_meta(f, key, b, &first))
  META_I("step", st->step);
  META_I("steps", st->steps);
  META_U("seed", st->seed);
  META_I("data_position", st->data_pos);
  META_U("rng_state", st->rng);
  META_I("batch", st->batch);
  META_I("seq", st->seq);
  if (st->skipped) { /* written only after a skipped step: older trainers read what they know */
    META_I("skipped_steps", st->skipped);
    META_I("skip_run", st->skip_run);
  }
#undef META_I
#undef META_U
  snprintf(b, sizeof b, "%.9g", st->loss);
  put_meta(f, "loss", b, &first);
  fputc('}', f);
  if (fclose(f) != 0) rt_user_error("checkpoint: building the metadata failed");
  return text;
}

/* Writes the entries (data at mem + src) to one safetensors file; returns the data bytes. */
static int64_t write_entries(const char *path, const RtProgram *p, const char *mem, StEntry *e, int n,
                             const RtTrainState *st, const char *part) {
  RtStPiece *pc = rt_xcalloc((size_t)n + 1, sizeof *pc);
  for (int i = 0; i < n; i++) {
    const RtTensor *t = e[i].t;
    int first = e[i].layer >= 0 ? 1 : 0;
    pc[i] = (RtStPiece){.name = e[i].name, .dtype = t->dtype, .rank = t->rank - first, .data = mem + e[i].src,
                        .bytes = e[i].bytes};
    for (int d = first; d < t->rank; d++)
      pc[i].dims[d - first] = t->dims[d];
  }
  char *meta = rt_ckpt_meta(p, st, part);
  int64_t off = rt_st_write(path, pc, n, meta);
  free(meta);
  free(pc);
  return off;
}

/* Writes one safetensors file of the tensors of `kind`; returns the data bytes. */
static int64_t write_st(const char *path, const RtProgram *p, const char *mem, int kind, const RtTrainState *st,
                        const char *part, StEntry **entries_out, int *n_out) {
  int n;
  StEntry *e = st_entries(p, kind, &n);
  int64_t off = write_entries(path, p, mem, e, n, st, part);
  if (entries_out)
    *entries_out = e, *n_out = n;
  else
    free(e);
  return off;
}

void rt_dump_tensors(const RtProgram *p, const char *mem, const char *path, const RtTrainState *st) {
  StEntry *e = rt_xcalloc((size_t)p->ntensors + 1, sizeof *e);
  for (int i = 0; i < p->ntensors; i++) {
    const RtTensor *t = &p->tensors[i];
    e[i] = (StEntry){.t = t, .layer = -1, .bytes = rt_tensor_numel(t) * (int64_t)rt_dtype_size(t->dtype), .src = t->offset};
    snprintf(e[i].name, sizeof e[i].name, "%s", t->name);
  }
  write_entries(path, p, mem, e, p->ntensors, st, "dump");
  free(e);
}

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char *child = rt_xprintf("%s/%s", path, de->d_name);
    struct stat st;
    if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode))
      remove_tree(child);
    else
      unlink(child);
    free(child);
  }
  closedir(d);
  rmdir(path);
}

/* Makes dir and its parents; `what` starts the messages ("checkpoint", "--save-to"). */
static void mkdir_p(const char *dir, const char *what) {
  char *tmp = rt_xstrdup(dir);
  for (char *s = tmp + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
      rt_user_error("%s: cannot create directory '%s': %s", what, tmp, strerror(errno));
    *s = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    rt_user_error("%s: cannot create directory '%s': %s", what, tmp, strerror(errno));
  struct stat st;
  if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) rt_user_error("%s: '%s' is not a directory", what, tmp);
  free(tmp);
}

void rt_ckpt_check_dir(const char *dir) {
  mkdir_p(dir, "--save-to");
  char *probe = rt_xprintf("%s/.probe-XXXXXX", dir);
  int fd = mkstemp(probe);
  if (fd < 0) rt_user_error("--save-to: cannot write in '%s': %s", dir, strerror(errno));
  close(fd);
  unlink(probe);
  free(probe);
}

/* Parses "step_NNNNNNNN" (digits only); -1 for any other name. */
static int64_t step_of(const char *name) {
  if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
  int64_t v = 0;
  for (const char *s = name + 5; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (*s - '0');
  }
  return v;
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int rt_ckpt_is_complete(const char *dir) {
  char *m = rt_xprintf("%s/model.safetensors", dir), *x = rt_xprintf("%s/" RT_SHARD_INDEX, dir);
  int ok = is_file(m) || is_file(x);
  free(m);
  free(x);
  return ok;
}

typedef struct {
  int64_t step; /* checkpoint step */
  char *name;   /* directory name */
} CkptDir;

static int cmp_ckpt(const void *a, const void *b) {
  int64_t x = ((const CkptDir *)a)->step, y = ((const CkptDir *)b)->step;
  return x < y ? -1 : x > y;
}

/* Whether the temp directory `name` (".tmp-step_N-...-PID") belongs to another process that is
 * still running here: its write is in progress, not a crash's leftover. */
static int writer_alive(const char *name) {
  const char *dash = strrchr(name, '-');
  char *end;
  long pid = dash ? strtol(dash + 1, &end, 10) : 0;
  if (!dash || end == dash + 1 || *end || pid <= 0 || pid == (long)getpid()) return 0;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* The complete checkpoints in dir, oldest first; removes stale temp directories when clean. */
static CkptDir *list_ckpts(const char *dir, int *count, int clean) {
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  int cap = 16, n = 0;
  CkptDir *v = rt_xmalloc((size_t)cap * sizeof *v);
  struct dirent *de;
  while ((de = readdir(d))) {
    if (clean && strncmp(de->d_name, ".tmp-step_", 10) == 0) {
      if (writer_alive(de->d_name)) continue; /* another run writing into the same directory now */
      char *t = rt_xprintf("%s/%s", dir, de->d_name);
      remove_tree(t);
      free(t);
      continue;
    }
    int64_t s = step_of(de->d_name);
    if (s < 0) continue;
    char *sub = rt_xprintf("%s/%s", dir, de->d_name);
    int ok = rt_ckpt_is_complete(sub);
    free(sub);
    if (!ok) continue;
    if (n == cap) {
      cap *= 2;
      CkptDir *nv = realloc(v, (size_t)cap * sizeof *v);
      if (!nv) rt_user_error("out of memory listing '%s'", dir);
      v = nv;
    }
    v[n].step = s;
    v[n].name = rt_xstrdup(de->d_name);
    n++;
  }
  closedir(d);
  qsort(v, (size_t)n, sizeof *v, cmp_ckpt);
  *count = n;
  return v;
}

static void free_ckpts(CkptDir *v, int n) {
  for (int i = 0; i < n; i++)
    free(v[i].name);
  free(v);
}

char *rt_ckpt_prepare(const char *dir, int64_t step, const char *tag) {
  mkdir_p(dir, "checkpoint");
  int count;
  CkptDir *stale = list_ckpts(dir, &count, 1); /* removes temp directories a crash left behind */
  free_ckpts(stale, count);
  char *tmp = rt_xprintf("%s/.tmp-step_%08lld-%s", dir, (long long)step, tag);
  remove_tree(tmp);
  if (mkdir(tmp, 0755) != 0) rt_user_error("checkpoint: cannot create directory '%s': %s", tmp, strerror(errno));
  return tmp;
}

void rt_ckpt_commit(const char *dir, const char *tmp, int64_t step, int keep) {
  rt_fsync_path(tmp, 1);
  char *final = rt_xprintf("%s/step_%08lld", dir, (long long)step);
  /* Replace an existing checkpoint of the same step: move it aside first. */
  char *old = NULL;
  struct stat sb;
  if (stat(final, &sb) == 0) {
    old = rt_xprintf("%s/.tmp-step_%08lld-old-%d", dir, (long long)step, (int)getpid());
    remove_tree(old);
    if (rename(final, old) != 0) rt_user_error("checkpoint: cannot move '%s' aside: %s", final, strerror(errno));
  }
  if (rename(tmp, final) != 0) rt_user_error("checkpoint: cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
  rt_fsync_path(dir, 1);
  rt_ckpt_stall("commit", step, 0);
  if (old) remove_tree(old);

  if (keep > 0) {
    int count;
    CkptDir *v = list_ckpts(dir, &count, 1);
    for (int i = 0; i + keep < count; i++) { /* renamed out of sight first: a crash mid-removal leaves no torn step_N */
      char *path = rt_xprintf("%s/%s", dir, v[i].name);
      char *gone = rt_xprintf("%s/.tmp-%s-gone-%d", dir, v[i].name, (int)getpid());
      if (rename(path, gone) != 0) rt_user_error("checkpoint: cannot move '%s' aside: %s", path, strerror(errno));
      rt_fsync_path(dir, 1);
      rt_ckpt_stall("keep", step, 0);
      remove_tree(gone);
      free(path);
      free(gone);
    }
    free_ckpts(v, count);
    rt_fsync_path(dir, 1);
  }
  free(old);
  free(final);
}

void rt_ckpt_write_hf_index(const char *path, const char *const *names, int n, int64_t total, int64_t step) {
  FILE *f = fopen(path, "w");
  if (!f) rt_user_error("checkpoint: cannot create '%s': %s", path, strerror(errno));
  fprintf(f, "{\n  \"metadata\": {\"total_size\": %lld, \"step\": %lld, \"format\": \"%s\"},\n  \"weight_map\": {",
          (long long)total, (long long)step, CKPT_FORMAT);
  for (int i = 0; i < n; i++) {
    fputs(i ? ",\n    " : "\n    ", f);
    rt_json_write_str(f, names[i]);
    fputs(": \"model.safetensors\"", f);
  }
  fputs("\n  }\n}\n", f);
  if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
    rt_user_error("checkpoint: cannot write '%s': %s", path, strerror(errno));
}

void rt_ckpt_save(const RtProgram *p, const char *mem, const char *dir, const RtTrainState *st, int keep) {
  char tag[32];
  snprintf(tag, sizeof tag, "%d", (int)getpid());
  char *tmp = rt_ckpt_prepare(dir, st->step, tag);
  char *model = rt_xprintf("%s/model.safetensors", tmp);
  char *optim = rt_xprintf("%s/optimizer.safetensors", tmp);
  char *index = rt_xprintf("%s/model.safetensors.index.json", tmp);
  StEntry *e;
  int n;
  int64_t total = write_st(model, p, mem, RT_T_PARAM, st, "model", &e, &n);
  write_st(optim, p, mem, RT_T_STATE, st, "optimizer", NULL, NULL);

  const char **names = rt_xcalloc((size_t)n, sizeof *names);
  for (int i = 0; i < n; i++)
    names[i] = e[i].name;
  rt_ckpt_write_hf_index(index, names, n, total, st->step);
  free(names);
  free(e);
  rt_ckpt_commit(dir, tmp, st->step, keep);
  free(model);
  free(optim);
  free(index);
  free(tmp);
}

char *rt_ckpt_find(const char *dir) {
  if (rt_ckpt_is_complete(dir)) return rt_xstrdup(dir);
  int count;
  CkptDir *v = list_ckpts(dir, &count, 0);
  char *best = count ? rt_xprintf("%s/%s", dir, v[count - 1].name) : NULL;
  free_ckpts(v, count);
  return best;
}

/* ---- reading ---- */

void rt_ckpt_check_layers(const RtStFile *s, const RtProgram *p, const RtTensor *t) {
  char nm[256];
  int64_t have = 0;
  for (;; have++) {
    rt_layer_name(nm, sizeof nm, t->name, have);
    if (!rt_json_get(s->hdr, nm)) break;
  }
  int64_t ld[RT_MAX_RANK]; /* the logical layers: a rank may hold some (ZeRO 1 / 2's state split along them) */
  rt_tensor_logical_dims(p, t, ld);
  int64_t want = ld[0];
  if (have == want || !have) return; /* (none: whole, as older checkpoints hold it, or missing: the reader says so) */
  const RtJson *m = rt_json_get(rt_json_get(s->hdr, "__metadata__"), "model");
  const char *ck = m && m->kind == RT_JSON_STR ? m->str : "", *mine = p->model ? p->model : "";
  char names[300] = ""; /* (the same name when a knob like -D layers=3 differs) */
  if (*ck && *mine && strcmp(ck, mine) != 0) snprintf(names, sizeof names, " ('%s', this one '%s')", ck, mine);
  rt_layer_name(nm, sizeof nm, t->name, have < want ? have : want);
  rt_user_error("'%s' comes from another model%s: it holds %lld layer(s) of '%s', this model has %lld ('%s' is %s)",
                s->path, names, (long long)have, t->name, (long long)want, nm, have < want ? "missing" : "one too many");
}

static void st_read_kind(RtStFile *s, const RtProgram *p, char *mem, int kind) {
  int n;
  StEntry *e = st_entries(p, kind, &n);
  RtOnError c;
  rt_on_error(&c, free, e);
  for (int i = 0; i < n; i++) {
    const RtTensor *t = e[i].t;
    int sliced = e[i].layer >= 0;
    if (sliced && e[i].layer == 0) rt_ckpt_check_layers(s, p, t);
    if (sliced && !rt_json_get(s->hdr, e[i].name) && rt_json_get(s->hdr, t->name)) {
      /* written whole, by a trainer from before every plan wrote stacked tensors per layer */
      if (e[i].layer == 0) rt_st_read(s, t->name, t->dtype, t->dims, t->rank, mem + t->offset);
      continue;
    }
    rt_st_read(s, e[i].name, t->dtype, t->dims + sliced, t->rank - sliced, mem + e[i].src);
  }
  rt_on_error_pop(&c);
  free(e);
}

static void st_close_v(void *s) { rt_st_close(s); }

void rt_ckpt_load(const RtProgram *p, char *mem, const char *path, int full, RtTrainState *st) {
  struct stat sb;
  if (stat(path, &sb) != 0) rt_user_error("cannot open checkpoint '%s': %s", path, strerror(errno));
  char *dir = NULL, *model;
  RtOnError c_dir, c_model, c_s, c_optim, c_o; /* (what a refusal below frees: rt_on_error) */
  if (S_ISDIR(sb.st_mode)) {
    dir = rt_ckpt_find(path);
    if (!dir) rt_user_error("'%s' holds no checkpoint (no step_* directory with a model.safetensors)", path);
    rt_on_error(&c_dir, free, dir);
    model = rt_xprintf("%s/model.safetensors", dir);
  } else {
    if (full) rt_user_error("--resume needs a checkpoint directory, not the file '%s'", path);
    rt_on_error(&c_dir, free, dir);
    model = rt_xstrdup(path);
  }
  rt_on_error(&c_model, free, model);
  RtStFile s;
  rt_st_open(&s, model);
  rt_on_error(&c_s, st_close_v, &s);
  st_read_kind(&s, p, mem, RT_T_PARAM);
  if (full) {
    if (strcmp(rt_st_meta(&s, "format"), CKPT_FORMAT) != 0)
      rt_user_error("'%s': checkpoint format \"%s\", this trainer reads \"%s\"", model, rt_st_meta(&s, "format"),
                    CKPT_FORMAT);
    memset(st, 0, sizeof *st);
    st->step = (int64_t)rt_st_meta_u64(&s, "step");
    st->steps = (int64_t)rt_st_meta_u64(&s, "steps");
    st->seed = rt_st_meta_u64(&s, "seed");
    st->data_pos = (int64_t)rt_st_meta_u64(&s, "data_position");
    st->rng = rt_st_meta_u64(&s, "rng_state");
    st->batch = (int64_t)rt_st_meta_u64(&s, "batch");
    st->seq = (int64_t)rt_st_meta_u64(&s, "seq");
    st->loss = strtod(rt_st_meta(&s, "loss"), NULL);
    st->skipped = (int64_t)rt_st_meta_u64_or(&s, "skipped_steps", 0);
    st->skip_run = (int64_t)rt_st_meta_u64_or(&s, "skip_run", 0);
    char *optim = rt_xprintf("%s/optimizer.safetensors", dir);
    rt_on_error(&c_optim, free, optim);
    RtStFile o;
    rt_st_open(&o, optim);
    rt_on_error(&c_o, st_close_v, &o);
    st_read_kind(&o, p, mem, RT_T_STATE);
    rt_on_error_pop(&c_o);
    rt_st_close(&o);
    rt_on_error_pop(&c_optim);
    free(optim);
  }
  rt_on_error_pop(&c_s);
  rt_st_close(&s);
  rt_on_error_pop(&c_model);
  free(model);
  rt_on_error_pop(&c_dir);
  free(dir);
}
