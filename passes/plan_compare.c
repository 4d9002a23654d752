/* passes/plan_compare.c — `shardc plan --compare` (see plan_compare.h). */
#include "plan_compare.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "diag.h"
#include "fit.h"

bool plan_compare_parse(const char *spec, const char *input, CompareCol *cols, int *ncols) {
  char knob[COMPARE_KV][COMPARE_KV_LEN], vals[COMPARE_KV][COMPARE_MAX][COMPARE_KV_LEN];
  int nknob = 0, nval[COMPARE_KV] = {0}, nfile = 1;
  const char *files[COMPARE_MAX] = {input}; /* with files: the command line's first */
  char items[COMPARE_MAX * 2][256];
  int nitems = 0;
  for (const char *p = spec; *p;) {
    while (*p && (isspace((unsigned char)*p) || *p == ';')) p++;
    size_t len = strcspn(p, " \t\n;");
    if (!len) break;
    if (nitems == COMPARE_MAX * 2 || len >= sizeof items[0]) {
      error_plain("--compare: too many or too long items in '%s'", spec);
      return false;
    }
    snprintf(items[nitems++], sizeof items[0], "%.*s", (int)len, p);
    p += len;
  }
  static char file_store[COMPARE_MAX][256]; /* the driver keeps the columns for its whole run */
  for (int i = 0; i < nitems; i++) {
    char *eq = strchr(items[i], '=');
    if (!eq) {
      if (nfile == COMPARE_MAX) { /* (the rest were dropped without a word) */
        error_plain("--compare: '%s': at most %d plans side by side (the command line's file and %d more)", items[i],
                    COMPARE_MAX, COMPARE_MAX - 1);
        return false;
      }
      snprintf(file_store[nfile], sizeof file_store[0], "%.255s", items[i]);
      files[nfile] = file_store[nfile];
      nfile++;
      continue;
    }
    if (nknob == COMPARE_KV || eq == items[i] || (size_t)(eq - items[i]) >= COMPARE_KV_LEN - 8) {
      error_plain("--compare: '%s': at most %d knobs, each KEY=V1,V2,...", items[i], COMPARE_KV);
      return false;
    }
    snprintf(knob[nknob], COMPARE_KV_LEN, "%.*s", (int)(eq - items[i]), items[i]);
    for (int k = 0; k < nknob; k++)
      if (strcmp(knob[k], knob[nknob]) == 0) { /* (each variant took the last value without a word) */
        error_plain("--compare: '%s' is given twice in '%s': list its values once (%s=V1,V2,...)", knob[nknob], spec,
                    knob[nknob]);
        return false;
      }
    for (char *v = eq + 1; *v;) {
      size_t l = strcspn(v, ",");
      if (!l || nval[nknob] == COMPARE_MAX || strlen(knob[nknob]) + l + 2 > COMPARE_KV_LEN) {
        error_plain("--compare: '%s': an empty, too long value or more than %d values", items[i], COMPARE_MAX);
        return false;
      }
      snprintf(vals[nknob][nval[nknob]++], COMPARE_KV_LEN, "%.*s", (int)l, v);
      v += l + (v[l] == ',');
    }
    if (!nval[nknob]) {
      error_plain("--compare: '%s' has no values", items[i]);
      return false;
    }
    nknob++;
  }
  if (nknob && nfile > 1) {
    error_plain("--compare: either knobs (KEY=V1,V2) or .model files, not both: '%s'", spec);
    return false;
  }
  int n = nfile > 1 ? nfile : 0;
  if (nknob) {
    n = 1;
    for (int k = 0; k < nknob; k++) n *= nval[k];
  }
  if (n < 1 || n > COMPARE_MAX) {
    error_plain("--compare '%s': %d variants; between 1 and %d can be compared", spec, n, COMPARE_MAX);
    return false;
  }
  for (int i = 1; i < nfile; i++)
    if (access(files[i], R_OK) != 0) { /* (was a column 'refused' and exit 0) */
      error_plain("--compare: '%s' is neither KEY=V1,V2,... nor a .model file: %s", files[i], strerror(errno));
      return false;
    }
  memset(cols, 0, (size_t)n * sizeof *cols);
  for (int c = 0; c < n; c++) {
    CompareCol *col = &cols[c];
    if (!nknob) {
      col->file = files[c];
      const char *base = strrchr(files[c], '/');
      snprintf(col->label, sizeof col->label, "%s", base ? base + 1 : files[c]);
      continue;
    }
    int rest = c, len = 0;
    for (int k = nknob - 1; k >= 0; k--) { /* the last knob fastest */
      snprintf(col->kv[k], COMPARE_KV_LEN, "%s=%s", knob[k], vals[k][rest % nval[k]]);
      rest /= nval[k];
    }
    col->nkv = nknob;
    for (int k = 0; k < nknob; k++)
      len += snprintf(col->label + len, sizeof col->label - (size_t)len, "%s%s", k ? " " : "", col->kv[k]);
  }
  *ncols = n;
  return true;
}

void plan_compare_measure(const Module *m, const CostDevice *dev, double storage_Bps, CompareCol *col) {
  col->ok = true;
  col->dev = *dev;
  col->fits = fit_plan_fits(m, &col->mem_total, &col->capacity);
  memcpy(col->by_class, m->memplan->by_class, sizeof col->by_class);
  for (int a = 0; a < RT_AX_COUNT; a++) col->dim[a] = m->mesh ? m->mesh->dim[a] : 1;
  cost_estimate(m, dev, &col->cost);
  storage_traffic(m, dev, &col->traffic);
  storage_ckpt(m, dev, storage_Bps, col->cost.step_s, &col->ckpt);
}

/* ---- the table --------------------------------------------------------------------- */

enum { CELL = 15 };

/* Bytes with four significant digits: "1.38 MiB", "706.5 KiB", "0 B". */
static void bytes_cell(char *buf, double b) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, u++;
  snprintf(buf, CELL, "%.4g %s", b, units[u]);
}

typedef void (*CellFn)(const CompareCol *c, int arg, char *buf);

static void c_mesh(const CompareCol *c, int arg, char *buf) {
  (void)arg;
  snprintf(buf, CELL, "%d.%d.%d.%d", c->dim[RT_AX_DP], c->dim[RT_AX_PP], c->dim[RT_AX_CP], c->dim[RT_AX_TP]);
}
static void c_class(const CompareCol *c, int cls, char *buf) { bytes_cell(buf, (double)c->by_class[cls]); }
static void c_total(const CompareCol *c, int arg, char *buf) { (void)arg, bytes_cell(buf, c->mem_total); }
static void c_fits(const CompareCol *c, int arg, char *buf) {
  (void)arg;
  if (c->capacity > 0)
    snprintf(buf, CELL, "%s %s", c->fits ? "yes" : "NO", fit_share((char[16]){0}, 16, c->mem_total, c->capacity));
  else snprintf(buf, CELL, "?");
}
static void c_rank_bytes(const CompareCol *c, int side, char *buf) { bytes_cell(buf, c->traffic.rank_bytes[side]); }
static void c_busiest(const CompareCol *c, int arg, char *buf) {
  (void)arg;
  char t[32];
  if (c->traffic.busiest < 0) snprintf(buf, CELL, "-");
  else snprintf(buf, CELL, "%s %s", c->traffic.busiest ? "net" : "node",
                cost_human_time(t, sizeof t, c->traffic.link_s[c->traffic.busiest]));
}
static void c_time(const CompareCol *c, int which, char *buf) {
  const double v[] = {c->cost.compute_s, c->cost.exposed_comm_s, c->cost.bubble_s, c->cost.step_s,
                      c->ckpt.sharded_s, c->ckpt.rank0_gather_s + c->ckpt.rank0_write_s};
  char t[32];
  snprintf(buf, CELL, "%s", cost_human_time(t, sizeof t, v[which]));
}
static void c_tokens(const CompareCol *c, int arg, char *buf) { (void)arg, cost_human_rate(buf, CELL, c->cost.tokens_per_s); }
static void c_mfu(const CompareCol *c, int arg, char *buf) { (void)arg, snprintf(buf, CELL, "%.1f%%", 100 * c->cost.mfu); }
static void c_ckpt(const CompareCol *c, int which, char *buf) {
  bytes_cell(buf, which == 0 ? c->ckpt.total_bytes : c->ckpt.max_rank_bytes);
}
static void c_writers(const CompareCol *c, int arg, char *buf) { (void)arg, snprintf(buf, CELL, "%d", c->ckpt.writers); }

static void row(FILE *f, const char *name, const CompareCol *cols, int n, CellFn fn, int arg) {
  fprintf(f, "#   %-24s", name);
  for (int i = 0; i < n; i++) {
    char buf[CELL] = "";
    if (cols[i].ok) fn(&cols[i], arg, buf);
    else snprintf(buf, CELL, "refused");
    fprintf(f, " %*s", CELL, buf);
  }
  fprintf(f, "\n");
}

void plan_compare_print(FILE *f, const Module *first, const CompareCol *cols, int n, double storage_Bps) {
  fprintf(f, "# plan comparison: %s on %s, %d variants (memory per rank at the peak; traffic per rank per step; "
             "checkpoint writes at %.4g GB/s of storage; device: %s)\n",
          first->name ? first->name : "model", first->has_topology && first->topo.name ? first->topo.name : "no topology",
          n, storage_Bps * 1e-9, cols[0].ok ? cols[0].dev.source : "-");
  fprintf(f, "#   %-24s", "");
  for (int i = 0; i < n; i++) fprintf(f, " %*.*s", CELL, CELL, cols[i].label);
  fprintf(f, "\n");
  row(f, "mesh dp.pp.cp.tp", cols, n, c_mesh, 0);
  static const int order[] = {MEM_PARAM, MEM_GRAD, MEM_OPTIM, MEM_ACT, MEM_INPUT, MEM_WORKSPACE, MEM_COMM};
  for (int k = 0; k < (int)(sizeof order / sizeof order[0]); k++) {
    char nm[40];
    snprintf(nm, sizeof nm, "memory %s", memplan_class_names[order[k]]);
    row(f, nm, cols, n, c_class, order[k]);
  }
  row(f, "memory total", cols, n, c_total, 0);
  row(f, "fits (of capacity)", cols, n, c_fits, 0);
  row(f, "traffic in node", cols, n, c_rank_bytes, 0);
  row(f, "traffic across nodes", cols, n, c_rank_bytes, 1);
  row(f, "busiest link (s/step)", cols, n, c_busiest, 0);
  row(f, "compute", cols, n, c_time, 0);
  row(f, "exposed communication", cols, n, c_time, 1);
  row(f, "pipeline bubble", cols, n, c_time, 2);
  row(f, "step", cols, n, c_time, 3);
  row(f, "tokens/s", cols, n, c_tokens, 0);
  row(f, "MFU", cols, n, c_mfu, 0);
  row(f, "checkpoint size", cols, n, c_ckpt, 0);
  row(f, "checkpoint writers", cols, n, c_writers, 0);
  row(f, "checkpoint per writer", cols, n, c_ckpt, 1);
  row(f, "checkpoint write, all", cols, n, c_time, 4);
  row(f, "checkpoint write, rank 0", cols, n, c_time, 5);
  for (int i = 0; i < n; i++)
    if (!cols[i].ok) fprintf(f, "# %s refused: %s\n", cols[i].label, cols[i].err[0] ? cols[i].err : "(no message)");
}
