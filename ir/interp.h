/* ir/interp.h — the reference interpreter: the executable definition of every op.
 *
 * Runs any graph naively on the CPU in fp64 (every dtype is held as double;
 * integers exactly). It runs SPMD graphs on N simulated ranks in lockstep: each
 * node is evaluated on every rank, and collectives combine the ranks of each
 * group of the mesh axis they name. Rank r's mesh coordinates are the trainer's
 * (rt_mesh_coords, runtime/mesh.h: Megatron's order, tp innermost).
 *
 * Step semantics: sources (PARAM/STATE) persist across interp_step calls; INPUT
 * values are set per step; after a step, every top-graph result named
 * "next:<name>" becomes the new value of the PARAM/STATE called <name>, and
 * every result can be read by name ("loss", "grad:<param>", ...).
 *
 * Initial values: PARAM init from (seed, param name) through runtime/rng.h
 * (element i of the *logical* tensor); STATE zeros. A value sharded on the mesh
 * holds, on each rank, that rank's block of the logical tensor.
 */
#ifndef SHARDC_INTERP_H
#define SHARDC_INTERP_H

#include "ir.h"

typedef struct {
  DType dtype;
  Shape shape;
  double *data; /* ir_numel(&shape) elements, row-major */
} Tensor;

typedef struct Interp Interp;

/* mesh: the simulated ranks (copied; a Module's m->mesh for its per-rank graph); NULL: one rank. */
Interp *interp_new(const Graph *g, const MeshMap *mesh, uint64_t seed);
void interp_free(Interp *it);
int interp_nranks(const Interp *it);
int interp_coord(const Interp *it, int rank, MeshAxis ax);

/* Sets an INPUT by name on one rank (copied). rank -1: every rank. */
void interp_set_input(Interp *it, int rank, const char *name, const Tensor *t);
/* x rounded to dt, as a CAST to dt rounds it. */
double interp_round(DType dt, double x);
/* Whether the graph has an INPUT, PARAM or STATE named name (SGD's programs have no `step` input). */
bool interp_has_source(const Interp *it, const char *name);
/* Runs one step. Returns false (with a message on stderr) on a runtime error such
 * as an out-of-range token id. */
bool interp_step(Interp *it);
/* A result of the last step by name, or a PARAM/STATE's current value by name; NULL if none. */
const Tensor *interp_get(const Interp *it, int rank, const char *name);
/* The logical tensor of a result or PARAM/STATE, assembled from every rank's block
 * (out: heap, tensor_free it). *spread: the largest difference between ranks holding
 * the same logical element (0 when the replicas agree). False if there is no such name. A
 * parameter or state held on one pipeline stage (Node.stage of its PARAM / STATE), its "next:"
 * and its "grad:": from that stage's ranks only (the others hold nothing of it). */
bool interp_get_logical(const Interp *it, const char *name, Tensor *out, double *spread);
/* Overwrites a PARAM/STATE's current value (e.g. to perturb for finite differences). */
void interp_set_state(Interp *it, int rank, const char *name, const Tensor *t);

/* Evaluates a graph once, no state: args are the values of its sources in node order
 * of PARAM, STATE and INPUT nodes as listed by the caller via names; a lower-level
 * entry used by tests of single ops. outs receives g->nresults tensors. */
bool interp_eval(const Graph *g, int nnamed, const char *const *names, const Tensor *const *vals,
                 Tensor *outs);

Tensor tensor_new(DType dt, Shape s); /* zeros, heap */
void tensor_free(Tensor *t);
Tensor tensor_copy(const Tensor *t);

#endif
