/* tests/cuda/test_nvrtc.c — every kernel family (the cases of kcases.c: several shapes, f32 and
 * bf16) compiles with NVRTC to PTX for compute_80 / compute_90 and to cubin for sm_80 / sm_90,
 * with the kernel headers given in memory. Any error fails; so does any warning in the log.
 * The four compilations run on two threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kcases.h"
#include "nvrtc_util.h"

typedef struct {
  const char *src;  /* the program */
  const char *arch; /* compute_XX or sm_XX */
  int nk;           /* kernels in src */
  int ok;           /* result */
  char msg[256];    /* one line of result */
  char *log;        /* NVRTC's log */
} Job;

static void *compile(void *arg) {
  Job *j = arg;
  char *img = NULL;
  size_t bytes = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = cudak_nvrtc(j->src, j->arch, &img, &bytes, &j->log);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (rc != 0 || (j->log && strstr(j->log, "warning"))) {
    snprintf(j->msg, sizeof j->msg, "FAIL %s%s", j->arch, rc ? "" : " (warnings)");
  } else {
    int missing = 0;
    for (int k = 0; k < j->nk && j->arch[0] == 'c'; k++) { /* every kernel is in the PTX */
      char name[32];
      snprintf(name, sizeof name, ".entry k%d(", k);
      missing += strstr(img, name) == NULL;
    }
    if (missing) snprintf(j->msg, sizeof j->msg, "FAIL %s: %d kernels missing from the PTX", j->arch, missing);
    else {
      snprintf(j->msg, sizeof j->msg, "ok   %s: %zu bytes in %.1f s", j->arch, bytes, s);
      j->ok = 1;
    }
  }
  free(img);
  return NULL;
}

int main(void) {
  Arena a;
  arena_init(&a);
  int64_t ws;
  int nk;
  const char *src = kc_emit_all(&a, &ws, &nk);
  printf("%d kernels, %zu bytes of source\n", nk, strlen(src));
  Job jobs[4] = {{.arch = "compute_80"}, {.arch = "sm_90"}, {.arch = "compute_90"}, {.arch = "sm_80"}};
  for (int i = 0; i < 4; i++) {
    jobs[i].src = src;
    jobs[i].nk = nk;
  }
  int fails = 0;
  for (int i = 0; i < 4; i += 2) {
    pthread_t t;
    if (pthread_create(&t, NULL, compile, &jobs[i]) != 0) compile(&jobs[i]);
    else {
      compile(&jobs[i + 1]);
      pthread_join(t, NULL);
      goto joined;
    }
    compile(&jobs[i + 1]);
  joined:;
  }
  for (int i = 0; i < 4; i++) {
    printf("%s\n", jobs[i].msg);
    if (!jobs[i].ok) {
      fails++;
      printf("%s\n", jobs[i].log ? jobs[i].log : "");
    }
    free(jobs[i].log);
  }
  arena_free(&a);
  return fails ? 1 : 0;
}
