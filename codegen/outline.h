/* codegen/outline.h — equal statement runs of the entry points written once, as functions taking
 * the integers they differ in, and run from a table (codegen/outline.c). */
#ifndef SHARDC_OUTLINE_H
#define SHARDC_OUTLINE_H

#include <stddef.h>
#include <stdio.h>

/* The line emit.c writes between two runs of statements that may be outlined (a pipeline
 * schedule's instructions: Node.instr). Never reaches the emitted file. */
#define CG_OUTLINE_MARK "/*@outline*/"

/* Writes `text` — the entry points' definitions, each `static void NAME(char *M, RtCtx *ctx) {`
 * ... `}` at column 0 — to f, outlined: the runs between CG_OUTLINE_MARK lines whose text is the
 * same up to integer literals become one function each, taking the literals that differ as
 * parameters, ahead of the entry points, which call them from a table. `locals` is the
 * declarations every entry point opens with (its local variables: the outlined functions
 * declare them too). Text without marks is written unchanged. */
void cg_outline_write(FILE *f, const char *text, size_t len, const char *locals);

#endif
