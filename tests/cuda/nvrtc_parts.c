/* tests/cuda/nvrtc_parts.c — see nvrtc_parts.h. */
#include "nvrtc_parts.h"

#include <ctype.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu_internal.h" /* rt_cu_hash, rt_cu_cache_dir, rt_cu_read_file, rt_cu_write_atomic (runtime/cuda/common.c) */
#include "nvrtc_util.h"
#include "sk_headers.h"

static const char KERNEL_START[] = "\nextern \"C\" __global__";

typedef struct {
  const char *arch, *dir;
  char *src[CUDAK_PARTS];
  CudakParts *out;
  pthread_mutex_t mu;
  int next, failed;
} Build;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the cache file of a part (its name: kcases-KEY-ARCH.cubin): its source, NVRTC's version, the kernel headers and the options (as the runtime's key,
 * runtime/cuda/device.c), under a name of its own */
static char *cache_path(const Build *b, const char *src) {
  if (!b->dir) return NULL;
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  char ver[32], store[2][4096];
  const char *opts[4];
  snprintf(ver, sizeof ver, "nvrtc %d.%d", major, minor);
  int nopts = cudak_nvrtc_options(b->arch, NULL, store, opts);
  const char **parts = malloc(sizeof *parts * (size_t)(2 * sk_nheaders + nopts + 2));
  size_t *lens = malloc(sizeof *lens * (size_t)(2 * sk_nheaders + nopts + 2));
  int n = 0;
  if (!parts || !lens) {
    free(parts), free(lens);
    return NULL;
  }
  parts[n++] = src;
  parts[n++] = ver;
  for (int i = 0; i < sk_nheaders; i++) parts[n++] = sk_header_names[i], parts[n++] = sk_header_sources[i];
  for (int i = 0; i < nopts; i++) parts[n++] = opts[i];
  for (int i = 0; i < n; i++) lens[i] = strlen(parts[i]);
  char key[33];
  rt_cu_hash(key, parts, lens, n);
  free(parts), free(lens);
  size_t pl = strlen(b->dir) + 80;
  char *path = malloc(pl);
  if (path) snprintf(path, pl, "%s/kcases-%s-%s.cubin", b->dir, key, b->arch);
  return path;
}

static void *worker(void *arg) {
  Build *b = arg;
  CudakParts *o = b->out;
  for (;;) {
    pthread_mutex_lock(&b->mu);
    int j = b->failed ? o->nparts : b->next++;
    pthread_mutex_unlock(&b->mu);
    if (j >= o->nparts) return NULL;
    char *path = cache_path(b, b->src[j]), *img = path ? rt_cu_read_file(path, &o->bytes[j]) : NULL, *log = NULL;
    int from_cache = img && o->bytes[j] > 0;
    double t0 = now_s();
    if (!from_cache) {
      free(img);
      img = NULL;
      if (cudak_nvrtc(b->src[j], b->arch, &img, &o->bytes[j], &log) != 0) {
        pthread_mutex_lock(&b->mu);
        if (!b->failed) fprintf(stderr, "NVRTC failed for %s (part %d of %d):\n%s\n", b->arch, j, o->nparts, log ? log : "");
        b->failed = 1;
        pthread_mutex_unlock(&b->mu);
      } else if (path && rt_cu_write_atomic(path, img, o->bytes[j]) != 0) {
        fprintf(stderr, "warning: cannot write the kernel cache file %s\n", path);
      }
    }
    free(log);
    const char *base = path ? strrchr(path, '/') : NULL;
    char *file = base ? strdup(base + 1) : NULL;
    free(path);
    double dt = now_s() - t0;
    pthread_mutex_lock(&b->mu);
    if (!from_cache) o->part_sum += dt, o->part_max = dt > o->part_max ? dt : o->part_max;
    o->img[j] = img;
    o->file[j] = file;
    o->cached += from_cache;
    o->compiled += !from_cache && img;
    pthread_mutex_unlock(&b->mu);
  }
}

/* kN of a kernel's first line ("extern "C" __global__ void [__launch_bounds__(256)] kN(...") or -1 */
static int kernel_number(const char *s) {
  for (; *s && *s != '\n'; s++)
    if (s[0] == ' ' && s[1] == 'k' && isdigit((unsigned char)s[2])) {
      char *end;
      long k = strtol(s + 2, &end, 10);
      if (*end == '(') return (int)k;
    }
  return -1;
}

int cudak_nvrtc_parts(const char *src, const char *arch, CudakParts *out) {
  double t0 = now_s();
  memset(out, 0, sizeof *out);
  const char *first = strstr(src, KERNEL_START);
  int nk = 0;
  for (const char *s = first; s; s = strstr(s + 1, KERNEL_START)) nk++;
  if (nk == 0) {
    fprintf(stderr, "nvrtc_parts: no kernel in the program\n");
    return -1;
  }
  Build b = {.arch = arch, .out = out, .mu = PTHREAD_MUTEX_INITIALIZER};
  out->nkernels = nk;
  out->nparts = nk < CUDAK_PARTS ? nk : CUDAK_PARTS;
  out->part_of = malloc(sizeof *out->part_of * (size_t)nk);
  size_t pre = (size_t)(first - src) + 1, cap[CUDAK_PARTS], len[CUDAK_PARTS];
  if (!out->part_of) return -1;
  for (int k = 0; k < nk; k++) out->part_of[k] = -1;
  for (int j = 0; j < out->nparts; j++) { /* each part: the preamble, then its kernels */
    cap[j] = strlen(src) / (size_t)out->nparts * 2 + pre + 1;
    b.src[j] = malloc(cap[j]);
    if (!b.src[j]) return -1;
    memcpy(b.src[j], src, pre);
    len[j] = pre;
  }
  int i = 0, bad = 0;
  for (const char *s = first; s; i++) {
    const char *k0 = s + 1, *next = strstr(k0, KERNEL_START), *k1 = next ? next + 1 : k0 + strlen(k0);
    int k = kernel_number(k0), j = i % out->nparts;
    if (k < 0 || k >= nk || out->part_of[k] >= 0) bad = 1;
    else out->part_of[k] = j;
    size_t n = (size_t)(k1 - k0);
    if (len[j] + n + 1 > cap[j]) {
      cap[j] = 2 * (len[j] + n + 1);
      char *r = realloc(b.src[j], cap[j]);
      if (!r) return -1;
      b.src[j] = r;
    }
    memcpy(b.src[j] + len[j], k0, n);
    len[j] += n;
    b.src[j][len[j]] = 0;
    s = next;
  }
  if (bad) {
    fprintf(stderr, "nvrtc_parts: the program's %d kernels are not k0..k%d, each once\n", nk, nk - 1);
    for (int j = 0; j < out->nparts; j++) free(b.src[j]);
    return -1;
  }
  b.dir = rt_cu_cache_dir();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out->threads = cores < 1 ? 1 : cores < out->nparts ? (int)cores : out->nparts;
  pthread_t t[CUDAK_PARTS];
  int started = 0;
  for (; started < out->threads - 1; started++) /* this thread is the last worker */
    if (pthread_create(&t[started], NULL, worker, &b) != 0) break;
  worker(&b);
  for (int j = 0; j < started; j++) pthread_join(t[j], NULL);
  out->threads = started + 1;
  for (int j = 0; j < out->nparts; j++) free(b.src[j]);
  free((char *)b.dir);
  out->seconds = now_s() - t0;
  return b.failed ? -1 : 0;
}

int cudak_parts_save(const CudakParts *p, const char *dir) {
  for (int j = 0; j < p->nparts; j++) {
    if (!p->file[j] || !p->img[j]) return -1;
    size_t pl = strlen(dir) + strlen(p->file[j]) + 2;
    char *path = malloc(pl);
    if (!path) return -1;
    snprintf(path, pl, "%s/%s", dir, p->file[j]);
    int rc = rt_cu_write_atomic(path, p->img[j], p->bytes[j]);
    if (rc != 0) fprintf(stderr, "cannot write %s\n", path);
    free(path);
    if (rc != 0) return -1;
  }
  return 0;
}

void cudak_parts_free(CudakParts *p) {
  for (int j = 0; j < p->nparts; j++) free(p->img[j]), free(p->file[j]);
  free(p->part_of);
  memset(p, 0, sizeof *p);
}
