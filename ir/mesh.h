/* ir/mesh.h — the mesh and the batch, decided once.
 *
 * From the plan, the topology and the world (--world, or the topology's devices), before
 * lowering (the frontend calls ir_mesh_resolve once its settings are read): the degrees of
 * dp, pp, cp and tp (`dp auto` resolved), the ranks' nodes and devices (Module.mesh, a
 * runtime/mesh.h MeshMap: pure C, shared with the runtime, so the mapping printed at compile
 * time is the one the trainer uses), and the batch per rank and per step (Module.batch).
 * Everything after reads them there; nothing recomputes a degree.
 */
#ifndef SHARDC_IR_MESH_H
#define SHARDC_IR_MESH_H

#include <stdio.h>

#include "../runtime/mesh.h"
#include "module.h"

/* A world this large is a typo, and its rank arithmetic would overflow. */
enum { IR_RANKS_MAX = 1 << 24 };

/* Resolves m's plan on `world` ranks (world <= 0: the topology's nodes * devices_per_node, or
 * one replica without a topology): dp auto is world / (tp * pp * cp); checks that the degrees
 * multiply to the world and that tp groups stay inside a node. Sets m->mesh and m->batch.
 * Returns false (m->mesh left NULL) when it reported an error at the plan. */
bool ir_mesh_resolve(Module *m, int world);

/* Prints the mapping: each rank's coordinates, node, device and the members of each
 * of its groups; for worlds over 64 ranks, the first ranks and a summary per group.
 * Prints a one-line note when the mesh was not resolved. */
void ir_print_mesh(FILE *f, const Module *m);

#endif
