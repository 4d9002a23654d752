/* ir/clone.h — copying a node, with its region body, into another graph (the pipeline passes'
 * per-stage and per-micro-batch copies, the zero-bubble split of a backward loop). */
#ifndef SHARDC_CLONE_H
#define SHARDC_CLONE_H

#include "ir.h"
#include "ptrmap.h"

/* A copy of d appended to dst, reading in[0..d->nin): attributes, output types, shardings and names
 * copied (offsets unplanned); d's region body copied (its own values fresh, outer values kept).
 * memo maps each of d's values (outputs, and the body's) to its copy. */
Node *ir_clone_node(Graph *dst, const Node *d, Value **in, PtrMap *memo);

#endif
