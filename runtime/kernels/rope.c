/* runtime/kernels/rope.c — rotary position embedding (rt_rope, rt_rope_at; kernels.h).
 *
 * Row s of a head is rotated pair by pair, (i, i + hd/2) by angle (s + start) * theta^(-2i/hd), from a
 * cos / sin table computed in double and rounded to f32. The table depends only on (S, hd, theta,
 * start, inverse) when the rows are at their own positions, and a trainer asks for the same few
 * every layer and every step: such a table is made once, kept for the process and shared (its
 * bits are those the per-call table had: the same double arithmetic). Making it was most of the
 * kernel's time at the Llama shapes (pow, cos and sin per entry, one thread). A table of given
 * positions (rope_at: a zigzag chunk pair's rows) is made per call into the caller's workspace,
 * theta^(-2i/hd) once per i, the entries in parallel.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define PAR_MIN 32768     /* as pointwise.c: a fork / join only where it pays */
#define ROPE_KEEP 16      /* tables kept per process; past them each call makes its own */
#define ROPE_KEEP_MAX (64u << 20) /* bytes of one kept table at most */

size_t rt_rope_workspace_bytes(int64_t S, int64_t hd) { return (size_t)(S * hd) * sizeof(float) + 64; }

/* cs, sn [S, half]: row s at position (pos ? pos[s] : s) + start. */
static void rope_table(int64_t S, int64_t hd, double theta, int64_t start, int inverse, const int32_t *pos, float *cs,
                       float *sn) {
  int64_t half = hd / 2;
  double freq[half > 0 ? half : 1];
  for (int64_t i = 0; i < half; i++) freq[i] = pow(theta, -2.0 * (double)i / (double)hd);
#pragma omp parallel for schedule(static) if (S * half > PAR_MIN / 8)
  for (int64_t s = 0; s < S; s++)
    for (int64_t i = 0; i < half; i++) {
      double ang = (double)((pos ? pos[s] : s) + start) * freq[i];
      cs[s * half + i] = (float)cos(ang);
      sn[s * half + i] = (float)(inverse ? -sin(ang) : sin(ang));
    }
}

typedef struct {
  int64_t S, hd, start;
  double theta;
  int inverse;
  const float *cs; /* [2, S, hd / 2]: cos, then sin; never freed (a reader may hold it) */
} RopeKept;

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static RopeKept kept[ROPE_KEEP];
static int nkept;

/* The kept table for these rows at their own positions, made on first use; NULL when the process
 * keeps its limit already or the table is too large (the caller makes its own). */
static const float *rope_kept(int64_t S, int64_t hd, double theta, int64_t start, int inverse) {
  const float *t = NULL;
  pthread_mutex_lock(&kept_lock);
  for (int i = 0; i < nkept && !t; i++)
    if (kept[i].S == S && kept[i].hd == hd && kept[i].start == start && kept[i].inverse == inverse &&
        !memcmp(&kept[i].theta, &theta, sizeof theta))
      t = kept[i].cs;
  size_t bytes = (size_t)S * (size_t)(hd / 2) * 2 * sizeof(float);
  if (!t && nkept < ROPE_KEEP && bytes <= ROPE_KEEP_MAX) {
    float *cs = malloc(bytes ? bytes : 1);
    if (cs) {
      rope_table(S, hd, theta, start, inverse, NULL, cs, cs + S * (hd / 2));
      kept[nkept++] = (RopeKept){S, hd, start, theta, inverse, cs};
      t = cs;
    }
  }
  pthread_mutex_unlock(&kept_lock);
  return t;
}

void rt_rope(int64_t B, int64_t S, int64_t H, int64_t hd, double theta, int64_t start, int inverse,
             const float *x, float *y, void *ws) {
  rt_rope_at(B, S, H, hd, theta, start, inverse, NULL, x, y, ws);
}

void rt_rope_at(int64_t B, int64_t S, int64_t H, int64_t hd, double theta, int64_t start, int inverse,
                const int32_t *pos, const float *x, float *y, void *ws) {
  int64_t half = hd / 2, C = H * hd;
  const float *cs = pos ? NULL : rope_kept(S, hd, theta, start, inverse);
  if (!cs) {
    float *t = (float *)ws; /* [S, half] each */
    rope_table(S, hd, theta, start, inverse, pos, t, t + S * half);
    cs = t;
  }
  const float *sn = cs + S * half;
#pragma omp parallel for schedule(static) if (B * S * C > PAR_MIN)
  for (int64_t bs = 0; bs < B * S; bs++) {
    const float *c = cs + (bs % S) * half, *si = sn + (bs % S) * half;
    for (int64_t h = 0; h < H; h++) {
      const float *xp = x + bs * C + h * hd;
      float *yp = y + bs * C + h * hd;
      for (int64_t i = 0; i < half; i++) {
        float x1 = xp[i], x2 = xp[i + half];
        yp[i] = x1 * c[i] - x2 * si[i];
        yp[i + half] = x2 * c[i] + x1 * si[i];
      }
    }
  }
}
