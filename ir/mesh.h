/* ir/mesh.h — the compiler's view of the rank mapping (Module.mesh).
 *
 * The MeshMap type and its functions live in runtime/mesh.h (pure C, shared with
 * the runtime, so the mapping printed at compile time is the one the trainer
 * uses). The mesh pass (passes/mesh.c) resolves `dp auto`, checks the plan against
 * the topology and stores the map in m->mesh.
 */
#ifndef SHARDC_IR_MESH_H
#define SHARDC_IR_MESH_H

#include <stdio.h>

#include "../runtime/mesh.h"
#include "module.h"

/* Prints the mapping: each rank's coordinates, node, device and the members of each
 * of its groups; for worlds over 64 ranks, the first ranks and a summary per group.
 * Prints a one-line note when the mesh pass has not run. */
void ir_print_mesh(FILE *f, const Module *m);

#endif
