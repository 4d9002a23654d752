/* tests/fuzz/fuzz_frontend.c — libFuzzer target: no input may crash the front end or pass_inline.
 *
 * Each input is compiled as a .model source (imports resolve against the bundled
 * models); when it compiles, it is inlined and verified too. Diagnostics go to
 * /dev/null; a compiler bug (die) aborts and is reported as a crash.
 *
 * Large inputs from small ones: `head \x01 K body \x01 tail` stands for head, then body repeated
 * 256 x K times, then tail (at most 4 MiB), so mutations reach 20,000-term chains, 100,000 errors
 * and megabyte lines that a byte-level fuzzer never grows to (tests/fuzz/seeds has such seeds).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "passes.h"

#ifndef SHARDC_MODELS_DIR
#define SHARDC_MODELS_DIR "models"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_TEXT = 4 << 20, REPEAT_UNIT = 256 };

/* The source an input stands for (see the header), NUL-terminated; NULL when too large. */
static char *expand(const uint8_t *data, size_t size) {
  const uint8_t *m1 = memchr(data, 1, size);
  const uint8_t *m2 = m1 && m1 + 1 < data + size ? memchr(m1 + 2, 1, (size_t)(data + size - m1 - 2)) : NULL;
  size_t reps = 1, hn = size, bn = 0, tn = 0;
  const uint8_t *body = NULL, *tail = NULL;
  if (m2) {
    hn = (size_t)(m1 - data);
    reps = (size_t)m1[1] * REPEAT_UNIT;
    body = m1 + 2;
    bn = (size_t)(m2 - body);
    tail = m2 + 1;
    tn = (size_t)(data + size - tail);
  }
  size_t n = hn + reps * bn + tn;
  if (n > MAX_TEXT) return NULL;
  char *text = malloc(n + 1), *w = text;
  if (!text) abort();
  memcpy(w, data, hn);
  w += hn;
  for (size_t i = 0; i < reps && bn; i++, w += bn) memcpy(w, body, bn);
  if (tn) memcpy(w, tail, tn);
  text[n] = 0;
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) {
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
  }
  if (size > 1 << 16) return 0;
  char *text = expand(data, size);
  if (!text) return 0;
  Diag d; /* this input's diagnostics, discarded */
  diag_init(&d, devnull, 0);
  Diag *outer = diag_enter(&d);
  Arena a;
  arena_init(&a);
  const char *dirs[] = {SHARDC_MODELS_DIR};
  FeOptions o = {dirs, 1, NULL, 0, NULL, 0, NULL};
  Module *m = fe_compile_source(&a, "fuzz.model", text, &o);
  if (m && pass_inline(m) && !ir_verify(m->graph, "inline")) abort();
  arena_free(&a);
  diag_leave(outer);
  diag_free(&d);
  free(text);
  return 0;
}
