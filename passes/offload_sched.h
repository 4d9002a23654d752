/* passes/offload_sched.h — when plan offload's copies run (ZeRO-Offload's overlap of the copies
 * with the device's compute), decided here once: the memory plan reads it for the host buffers'
 * lives (passes/memplan.c), codegen for where it issues and waits for each copy (codegen/emit.c). */
#ifndef SHARDC_OFFLOAD_SCHED_H
#define SHARDC_OFFLOAD_SCHED_H

#include "ir.h"

/* The order of the updates on the host: the n updates of the top graph g (passes/zero_offload.c, before it
 * puts their copies in) are reordered, when nothing but g's results reads what they compute (but
 * the cast of an updated parameter into its persistent bf16 copy, which moves with it), to
 * run in the order their gradients are made (the final norm's before the layers', the embeddings'
 * last): the host updates the parameters whose gradients landed while the last ones download.
 * updates[] is reordered too. The values do not change (each update reads its own tensors). */
void offload_order(Graph *g, Node **updates, int n);

/* Where the download of a to_host node of the top graph g starts. */
typedef struct {
  int after;        /* after top-graph node `after` (-1: at the step's start; the to_host's own
                       position: where it stands, i.e. not moved) */
  const Node *rows; /* NULL, or the REPEAT at `after` whose iteration i makes row i of the copied
                       value (a stacked gradient): row i's download starts at the end of iteration i */
} OffloadIssue;

OffloadIssue offload_issue(const Graph *g, const Node *to_host);

/* The slot (the runtime's event) of a to_host or to_device node of g: its position in g. */
int offload_slot(const Graph *g, const Node *copy);

/* Where the compute stream waits for to_device n's upload: before node pos of g (the first that
 * reads what it uploads; a fusion group's first member), g->nnodes: at the end of the step. */
int offload_upload_wait(const Graph *g, const Node *to_device);

#endif
