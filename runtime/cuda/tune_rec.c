/* runtime/cuda/tune_rec.c — the autotuning's record on disk, one implementation for the GEMMs'
 * algorithms (gemm.c) and the attention's tiles (attn_tune.c).
 *
 * <cache>/<kind>-<hash of what the choices depend on>.txt, a line per key: the key, a tab, the
 * choice. With several ranks the key ends " rank R" (rt_cu_rec_key): every rank times on its own
 * device and may keep another choice, and a resumed run must give each rank its own back so that it
 * trains on the same bits. A world-1 key has no suffix (a record from one rank reads as before). A
 * line without a tab (the GEMM record's first format) reads its first key_words space-separated words
 * as the key and the rest as the choice; a save rewrites it with a tab. A save merges the lines other
 * processes (ranks on this machine) wrote since — for keys this process does not know: its own choice
 * wins — and replaces the file atomically, under an exclusive flock of <cache>/.<record>.lock so that two ranks
 * saving at once cannot drop each other's line (where the lock cannot be had, the save goes on
 * without it).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "cu_internal.h"

static char *xstrdup(const char *s) {
  char *d = strdup(s);
  if (!d) rt_fatal(1, "out of memory");
  return d;
}

void rt_cu_rec_key(char *out, size_t n, const char *key, int rank, int world) {
  if (world > 1) snprintf(out, n, "%s rank %d", key, rank);
  else snprintf(out, n, "%s", key);
}

const char *rt_cu_rec_get(const RtCuRec *r, const char *key) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->keys[i], key)) return r->vals[i];
  return NULL;
}

void rt_cu_rec_set(RtCuRec *r, const char *key, const char *val) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->keys[i], key)) {
      free(r->vals[i]);
      r->vals[i] = xstrdup(val);
      return;
    }
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 16;
    char **k = realloc(r->keys, (size_t)r->cap * sizeof *k);
    if (!k) rt_fatal(1, "out of memory");
    r->keys = k;
    char **v = realloc(r->vals, (size_t)r->cap * sizeof *v);
    if (!v) rt_fatal(1, "out of memory");
    r->vals = v;
  }
  r->keys[r->n] = xstrdup(key);
  r->vals[r->n++] = xstrdup(val);
}

/* The file's lines for keys not known yet. */
static void rec_read(RtCuRec *r) {
  size_t len = 0;
  char *text = r->path ? rt_cu_read_file(r->path, &len) : NULL;
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n'), *sep = strchr(line, '\t');
    if (next) *next++ = 0;
    if (!sep && r->key_words > 0) { /* the first format: key_words words, a space, the choice */
      sep = line;
      for (int w = 0; w < r->key_words && sep; w++) sep = strchr(sep + (w > 0), ' ');
    }
    if (sep && sep != line && sep[1]) {
      *sep = 0;
      if (!rt_cu_rec_get(r, line)) rt_cu_rec_set(r, line, sep + 1);
    }
    line = next;
  }
  free(text);
}

void rt_cu_rec_open(RtCuRec *r, const char *kind, const char *const *parts, const size_t *lens, int nparts,
                    int key_words) {
  memset(r, 0, sizeof *r);
  r->key_words = key_words;
  char *dir = rt_cu_cache_dir();
  if (!dir) return;
  char hash[33];
  rt_cu_hash(hash, parts, lens, nparts);
  size_t n = strlen(dir) + strlen(kind) + 48;
  r->path = malloc(n);
  if (!r->path) rt_fatal(1, "out of memory");
  snprintf(r->path, n, "%s/%s-%s.txt", dir, kind, hash);
  free(dir);
  rec_read(r);
}

void rt_cu_rec_save(RtCuRec *r, const char *what) {
  if (!r->path) return;
  size_t pl = strlen(r->path) + 7;
  char *lock = malloc(pl);
  if (!lock) rt_fatal(1, "out of memory");
  const char *base = strrchr(r->path, '/');
  base = base ? base + 1 : r->path;
  snprintf(lock, pl, "%.*s.%s.lock", (int)(base - r->path), r->path, base); /* hidden: <dir>/.<record>.lock */
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  free(lock);
  if (fd >= 0 && flock(fd, LOCK_EX) != 0) close(fd), fd = -1;
  rec_read(r); /* what other ranks recorded since: kept */
  size_t cap = 1, len = 0;
  for (int i = 0; i < r->n; i++) cap += strlen(r->keys[i]) + strlen(r->vals[i]) + 2;
  char *text = malloc(cap);
  if (!text) rt_fatal(1, "out of memory");
  for (int i = 0; i < r->n; i++) len += (size_t)snprintf(text + len, cap - len, "%s\t%s\n", r->keys[i], r->vals[i]);
  if (rt_cu_write_atomic(r->path, text, len) != 0) { /* the next run tunes again */
    fprintf(stderr, "note: the %s autotuning's choices could not be written to %s\n", what, r->path);
    free(r->path);
    r->path = NULL;
  }
  free(text);
  if (fd >= 0) close(fd); /* releases the lock */
}

void rt_cu_rec_free(RtCuRec *r) {
  for (int i = 0; i < r->n; i++) free(r->keys[i]), free(r->vals[i]);
  free(r->keys);
  free(r->vals);
  free(r->path);
  memset(r, 0, sizeof *r);
}
