/* tests/fuzz/fuzz_ir_read.c — libFuzzer target: no input may crash the textual IR reader.
 *
 * Each input is read as IR text (ir/read.c). When it reads (and so verifies), it is printed,
 * and the printed text must read back and print the same (the printer and the reader agree
 * on everything the reader accepts); a difference aborts. Diagnostics go to /dev/null; a
 * compiler bug (die) aborts and is reported as a crash.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "print.h"
#include "read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The module as ir_opt prints it: header and graph, or the graph alone. */
static char *print_ir(const Module *m, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  if (!f) abort();
  if (m->name) {
    ir_print_module_header(f, m);
    fputc('\n', f);
    ir_print_graph_syms(f, m->graph, m);
  } else {
    ir_print_graph(f, m->graph);
  }
  fclose(f);
  return buf;
}

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
  Diag d; /* this input's diagnostics, discarded */
  diag_init(&d, devnull, 0);
  Diag *outer = diag_enter(&d);
  Arena a;
  arena_init(&a);
  Module *m = ir_read_module(&a, "fuzz.ir", text);
  if (m) {
    size_t n1, n2;
    char *p1 = print_ir(m, &n1);
    Module *m2 = ir_read_module(&a, "fuzz2.ir", p1);
    if (!m2) {
      fprintf(stderr, "fuzz_ir_read: the printed IR does not read back:\n%s", p1);
      abort();
    }
    char *p2 = print_ir(m2, &n2);
    if (n1 != n2 || memcmp(p1, p2, n1) != 0) {
      fprintf(stderr, "fuzz_ir_read: print(read(print(x))) != print(x):\n%s\n----\n%s", p1, p2);
      abort();
    }
    free(p1);
    free(p2);
  }
  arena_free(&a);
  diag_leave(outer);
  diag_free(&d);
  free(text);
  return 0;
}
