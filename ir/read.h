/* ir/read.h — the textual IR reader: the text ir/print.c prints, back into a Module.
 *
 * Accepts what `shardc plan` / `--dump-ir` print (docs/ir.md describes the format):
 *   - an optional module header: `module NAME` and its `topology ...`, `plan: ...` and
 *     `recipe: ...` lines (the fields they print; the rest keep ir_plan_defaults /
 *     ir_recipe_defaults; the plan line also takes `bucket_bytes N` and `cross_node_tp on`,
 *     which the printer does not print);
 *   - one `graph { ... }` with its nodes, values (dtype, shape with dim symbols, sharding),
 *     attributes, REPEAT/CALL regions and their bodies, and the source location comments;
 *   - an optional `results:` list.
 * Reports are skipped, not read: every `#` comment line (rank classes, the communication
 * and memory reports, `# ---- after PASS ----`), the `parameters:` table and the
 * `flops per token:` line; they are computed from the IR, not part of it. A collective's
 * `# group, bytes` note is skipped too; only the `file:line:col` part of a comment is kept.
 *
 * A REPEAT prints its inputs `carry | xs | captured` with empty groups' bars left out; the
 * reader tells the groups apart by the body's argument and result shapes (an x is the
 * input's slice along a leading dim of size count).
 *
 * Locations print as model-relative paths (tiny.model, std/transformer.model); the reader
 * keeps them as models/<path>, which prints the same.
 */
#ifndef SHARDC_READ_H
#define SHARDC_READ_H

#include "module.h"

/* Parses text (named file in diagnostics; the text is copied into a, and both the name and the
 * copy are registered with diag_add_source, so `file` must outlive the diagnostics and `a`
 * must not be freed while errors can still quote it) into a new Module allocated from a.
 * Returns NULL after reporting the first error as `file:line:col: error: ...` with the line
 * and a caret (ir/diag.h): bad input never aborts. The graph read passes ir_verify.
 * Module.name is NULL when the text has no `module` header. */
Module *ir_read_module(Arena *a, const char *file, const char *text);

#endif
