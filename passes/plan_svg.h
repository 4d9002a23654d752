/* passes/plan_svg.h — the planner's pictures, plain SVG (docs/planner.md):
 *   --mesh-svg     the mesh: nodes, their devices (rank, coordinates), and per device one stripe
 *                  per mesh axis of degree > 1, coloured by the group of that axis it is in (ranks
 *                  with the same colour on a stripe share the group); at most 16 nodes drawn;
 *   --memory-svg   memory per rank as stacked bars by class (one bar per plan; with --compare one
 *                  per variant) against the device's capacity;
 *   --compare-svg  the comparison as a chart: memory bars, the predicted step split into compute,
 *                  exposed communication and pipeline bubble, and the checkpoint write times.
 * Every drawn quantity carries its number: a <title> on each bar segment ("parameters: 482304 B")
 * and a text label, so a test can read them back with an XML parser. */
#ifndef SHARDC_PLAN_SVG_H
#define SHARDC_PLAN_SVG_H

#include <stdio.h>

#include "module.h"
#include "plan_compare.h"

void plan_svg_mesh(FILE *f, const Module *m);
/* The bars of n plans (cols[i].ok ones; a plan alone: plan_compare_measure's fields of one). */
void plan_svg_memory(FILE *f, const char *title, const CompareCol *cols, int n);
void plan_svg_compare(FILE *f, const char *title, const CompareCol *cols, int n);

#endif
