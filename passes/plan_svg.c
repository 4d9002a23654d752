/* passes/plan_svg.c — the planner's pictures (see plan_svg.h). */
#include "plan_svg.h"

#include <string.h>

#include "commreport.h"
#include "mesh.h"

/* text for SVG: & < > " escaped (file names end up in labels) */
static void esc(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

static void header(FILE *f, double w, double h, const char *title, const char *sub) {
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"monospace\" "
             "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          w, h);
  fprintf(f, "<text x=\"10\" y=\"18\" font-size=\"13\">");
  esc(f, title);
  fprintf(f, "</text>\n<text x=\"10\" y=\"34\" fill=\"#555\">");
  esc(f, sub);
  fprintf(f, "</text>\n");
}

/* ---- the mesh ---------------------------------------------------------------------- */

static const char *const axis_hue[RT_AX_COUNT] = {"210", "30", "280", "120"}; /* dp blue, pp orange, cp purple, tp green */

void plan_svg_mesh(FILE *f, const Module *m) {
  const MeshMap *mm = m->mesh;
  MeshMap one = {{1, 1, 1, 1}, 1, 1, 1, {0}, 0};
  if (!mm) mm = &one;
  int axes[RT_AX_COUNT], na = 0;
  for (int a = 0; a < RT_AX_COUNT; a++)
    if (mm->dim[a] > 1) axes[na++] = a;
  int nodes = mm->nodes < 16 ? mm->nodes : 16, per = mm->devices_per_node;
  int cols = per <= 8 ? per : 8, rows = (per + cols - 1) / cols;
  const double dw = 74, dh = 40 + 8 * (na ? na : 1), pad = 10;
  double nw = cols * dw + 2 * pad, nh = rows * dh + 30, W = nw + 20, H = 70 + nodes * (nh + 10) + 20;
  if (W < 620) W = 620;
  char title[256], sub[256];
  snprintf(title, sizeof title, "%s: %d ranks on %d node%s x %d device%s (%s)", m->name ? m->name : "model", mm->world,
           mm->nodes, mm->nodes == 1 ? "" : "s", per, per == 1 ? "" : "s",
           m->has_topology && m->topo.name ? m->topo.name : "no topology");
  int k = snprintf(sub, sizeof sub, "mesh dp %d x pp %d x cp %d x tp %d; stripes: one per axis, same colour = same group",
                   mm->dim[RT_AX_DP], mm->dim[RT_AX_PP], mm->dim[RT_AX_CP], mm->dim[RT_AX_TP]);
  if (nodes < mm->nodes) snprintf(sub + k, sizeof sub - (size_t)k, "; the first %d of %d nodes", nodes, mm->nodes);
  header(f, W, H, title, sub);
  for (int i = 0; i < na; i++) /* the legend */
    fprintf(f, "<rect x=\"%.0f\" y=\"44\" width=\"14\" height=\"10\" fill=\"hsl(%s,70%%,50%%)\"/><text x=\"%.0f\" "
               "y=\"53\">%s (%d groups of %d)</text>\n",
            10 + 160.0 * i, axis_hue[axes[i]], 28 + 160.0 * i, rt_mesh_axis_name(axes[i]),
            mm->world / mm->dim[axes[i]], mm->dim[axes[i]]);
  for (int nd = 0; nd < nodes; nd++) {
    double y0 = 64 + nd * (nh + 10);
    fprintf(f, "<g class=\"node\" data-node=\"%d\">\n<rect x=\"10\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" rx=\"6\" "
               "fill=\"#f4f4f4\" stroke=\"#999\"/>\n<text x=\"18\" y=\"%.0f\">node %d</text>\n",
            nd, y0, nw, nh, y0 + 16, nd);
    for (int dv = 0; dv < per; dv++) {
      int r = nd * per + dv;
      if (r >= mm->world) break;
      int c[RT_AX_COUNT];
      rt_mesh_coords(mm, r, c);
      double x = 10 + pad + (dv % cols) * dw, y = y0 + 24 + (dv / cols) * dh;
      fprintf(f, "<g class=\"device\" data-rank=\"%d\" data-dp=\"%d\" data-pp=\"%d\" data-cp=\"%d\" data-tp=\"%d\">"
                 "<title>rank %d: dp %d pp %d cp %d tp %d, node %d device %d</title>\n",
              r, c[RT_AX_DP], c[RT_AX_PP], c[RT_AX_CP], c[RT_AX_TP], r, c[RT_AX_DP], c[RT_AX_PP], c[RT_AX_CP],
              c[RT_AX_TP], nd, dv);
      fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"white\" stroke=\"#666\"/>\n", x, y,
              dw - 6, dh - 6);
      fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">r%d d%d</text>\n", x + 4, y + 13, r, dv);
      for (int i = 0; i < na; i++) {
        int a = axes[i], groups = mm->world / mm->dim[a], g = rt_mesh_group_color(mm, r, 1u << a);
        int light = 35 + (groups > 1 ? 45 * g / (groups - 1) : 20);
        fprintf(f, "<rect class=\"stripe\" data-axis=\"%s\" data-group=\"%d\" x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" "
                   "height=\"6\" fill=\"hsl(%s,70%%,%d%%)\"><title>%s group %d, member %d</title></rect>\n",
                rt_mesh_axis_name(a), g, x + 4, y + 19 + 8 * i, dw - 14, axis_hue[a], light, rt_mesh_axis_name(a), g, c[a]);
      }
      fprintf(f, "</g>\n");
    }
    fprintf(f, "</g>\n");
  }
  fprintf(f, "</svg>\n");
}

/* ---- stacked bars -------------------------------------------------------------------- */

typedef struct {
  const char *label;   /* the bar's name (left) */
  double seg[MEM_COUNT];
  char right[96];      /* after the bar */
  double mark;         /* a dashed line at this value (capacity; 0: none) */
} Bar;

typedef void (*Fmt)(char *buf, size_t cap, double v);

static void fmt_bytes(char *buf, size_t cap, double v) { snprintf(buf, cap, "%.0f B", v); }
static void fmt_secs(char *buf, size_t cap, double v) { snprintf(buf, cap, "%.6g s", v); }

/* n bars of nseg segments from y; returns the y below them. */
static double bars(FILE *f, double y, const char *caption, const Bar *b, int n, int nseg, const char *const *names,
                   const char *const *colors, Fmt fmt) {
  const double left = 150, W = 560, bh = 18;
  double max = 0;
  for (int i = 0; i < n; i++) {
    double t = 0;
    for (int s = 0; s < nseg; s++) t += b[i].seg[s];
    if (t > max) max = t;
    if (b[i].mark > max && b[i].mark < 4 * max) max = b[i].mark;
  }
  for (int i = 0; i < n; i++)
    if (b[i].mark > max && b[i].mark < 4 * max) max = b[i].mark;
  double scale = max > 0 ? W / max : 0;
  fprintf(f, "<g class=\"chart\"><text x=\"10\" y=\"%.0f\" font-size=\"12\">", y + 12);
  esc(f, caption);
  fprintf(f, "</text>\n");
  double lx = 10; /* legend */
  for (int s = 0; s < nseg; s++) {
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
            lx, y + 20, colors[s], lx + 13, y + 29, names[s]);
    lx += 24 + 7.0 * (double)strlen(names[s]);
  }
  y += 38;
  for (int i = 0; i < n; i++, y += bh + 8) {
    fprintf(f, "<g class=\"bar\" data-label=\"");
    esc(f, b[i].label);
    fprintf(f, "\"><text x=\"10\" y=\"%.0f\">", y + 13);
    esc(f, b[i].label);
    fprintf(f, "</text>\n");
    double x = left;
    for (int s = 0; s < nseg; s++) {
      if (b[i].seg[s] <= 0) continue;
      char v[48];
      fmt(v, sizeof v, b[i].seg[s]);
      fprintf(f, "<rect class=\"seg\" data-kind=\"%s\" data-value=\"%.17g\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" "
                 "height=\"%.0f\" fill=\"%s\"><title>%s: %s</title></rect>\n",
              names[s], b[i].seg[s], x, y, b[i].seg[s] * scale, bh, colors[s], names[s], v);
      x += b[i].seg[s] * scale;
    }
    if (b[i].mark > 0 && b[i].mark <= max)
      fprintf(f, "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"red\" stroke-dasharray=\"3,2\"/>\n",
              left + b[i].mark * scale, left + b[i].mark * scale, y - 3, y + bh + 3);
    fprintf(f, "<text x=\"%.2f\" y=\"%.0f\">", x + 6, y + 13);
    esc(f, b[i].right);
    fprintf(f, "</text></g>\n");
  }
  fprintf(f, "</g>\n");
  return y + 6;
}

static const char *const mem_colors[MEM_COUNT] = {"#5a8fe8", "#e8a25a", "#999999", "#8fd19e", "#d46a6a", "#c9b458", "#a77fd4"};

static double memory_bars(FILE *f, double y, const CompareCol *cols, int n) {
  Bar b[COMPARE_MAX];
  const char *names[MEM_COUNT];
  int m = 0;
  for (int k = 0; k < MEM_COUNT; k++) names[k] = memplan_class_names[k];
  for (int i = 0; i < n && m < COMPARE_MAX; i++) {
    if (!cols[i].ok) continue;
    memset(&b[m], 0, sizeof b[m]);
    b[m].label = cols[i].label;
    for (int k = 0; k < MEM_COUNT; k++) b[m].seg[k] = (double)cols[i].by_class[k];
    b[m].mark = cols[i].capacity;
    char t[32], c[32];
    if (cols[i].capacity > 0)
      snprintf(b[m].right, sizeof b[m].right, "%s of %s (%s)", ir_human_bytes(t, sizeof t, cols[i].mem_total),
               ir_human_bytes(c, sizeof c, cols[i].capacity), cols[i].fits ? "fits" : "does NOT fit");
    else snprintf(b[m].right, sizeof b[m].right, "%s", ir_human_bytes(t, sizeof t, cols[i].mem_total));
    m++;
  }
  return bars(f, y, "memory per rank at the peak, by class (red dashes: the device's capacity, where within 4x of the bars)",
              b, m, MEM_COUNT, names, mem_colors, fmt_bytes);
}

/* the picture's height for `charts` charts of `nbars` bars in all */
static double height(int nbars, int charts) { return 50 + charts * 44 + nbars * 26 + 20; }

void plan_svg_memory(FILE *f, const char *title, const CompareCol *cols, int n) {
  header(f, 1000, height(n, 1), title, "the memory plan (passes/memplan.c): bytes live at the peak of the step");
  memory_bars(f, 44, cols, n);
  fprintf(f, "</svg>\n");
}

void plan_svg_compare(FILE *f, const char *title, const CompareCol *cols, int n) {
  header(f, 1000, height(4 * n, 3), title, "predictions of the cost model (passes/cost.c) and passes/storage.c");
  double y = memory_bars(f, 44, cols, n);
  static const char *const step_names[] = {"compute", "exposed communication", "pipeline bubble"};
  static const char *const step_colors[] = {"#5a8fe8", "#d46a6a", "#cccccc"};
  static const char *const ck_names[] = {"all ranks write", "rank 0 gathers", "rank 0 writes"};
  static const char *const ck_colors[] = {"#8fd19e", "#e8a25a", "#c9b458"};
  Bar b[COMPARE_MAX], c[2 * COMPARE_MAX];
  int m = 0, mc = 0;
  char t[32];
  for (int i = 0; i < n && m < COMPARE_MAX; i++) {
    if (!cols[i].ok) continue;
    const CompareCol *k = &cols[i];
    memset(&b[m], 0, sizeof b[m]);
    b[m].label = k->label;
    b[m].seg[0] = k->cost.compute_s, b[m].seg[1] = k->cost.exposed_comm_s, b[m].seg[2] = k->cost.bubble_s;
    char rate[32];
    snprintf(b[m].right, sizeof b[m].right, "%s, %s tokens/s, MFU %.1f%%", cost_human_time(t, sizeof t, k->cost.step_s),
             cost_human_rate(rate, sizeof rate, k->cost.tokens_per_s), 100 * k->cost.mfu);
    m++;
    memset(&c[mc], 0, sizeof c[mc]); /* the checkpoint: all ranks, then rank 0 */
    c[mc].label = k->label;
    c[mc].seg[0] = k->ckpt.sharded_s;
    snprintf(c[mc].right, sizeof c[mc].right, "%s by %d ranks", cost_human_time(t, sizeof t, k->ckpt.sharded_s), k->ckpt.writers);
    mc++;
    memset(&c[mc], 0, sizeof c[mc]);
    c[mc].label = "  rank 0";
    c[mc].seg[1] = k->ckpt.rank0_gather_s, c[mc].seg[2] = k->ckpt.rank0_write_s;
    snprintf(c[mc].right, sizeof c[mc].right, "%s",
             cost_human_time(t, sizeof t, k->ckpt.rank0_gather_s + k->ckpt.rank0_write_s));
    mc++;
  }
  y = bars(f, y, "predicted step per rank", b, m, 3, step_names, step_colors, fmt_secs);
  char cap[128];
  double storage = 0;
  for (int i = 0; i < n && !storage; i++) storage = cols[i].ok ? cols[i].ckpt.storage_Bps : 0;
  snprintf(cap, sizeof cap, "checkpoint write (%.4g GB/s of storage)", storage * 1e-9);
  bars(f, y, cap, c, mc, 3, ck_names, ck_colors, fmt_secs);
  fprintf(f, "</svg>\n");
}
