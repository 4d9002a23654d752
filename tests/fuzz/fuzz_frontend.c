/* tests/fuzz/fuzz_frontend.c — libFuzzer target: no input may crash the front end or pass_inline.
 *
 * Each input is compiled as a .model source (imports resolve against the bundled
 * models); when it compiles, it is inlined and verified too. Diagnostics go to
 * /dev/null; a compiler bug (die) aborts and is reported as a crash.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) {
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
  }
  if (size > 1 << 16) return 0;
  char *text = malloc(size + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = 0;
  diag_set_stream(devnull);
  diag_reset();
  Arena a;
  arena_init(&a);
  const char *dirs[] = {SHARDC_MODELS_DIR};
  FeOptions o = {dirs, 1, NULL, 0, NULL, 0};
  Module *m = fe_compile_source(&a, "fuzz.model", text, &o);
  if (m && pass_inline(m) && !ir_verify(m->graph, "inline")) abort();
  arena_free(&a);
  free(text);
  return 0;
}
