/* passes/cost_profile.c — the cost model's device profile: read and written as `key value` lines
 * (docs/planner.md). bench/calibrate.c measures one on this machine; `shardc plan --profile FILE`
 * reads it over the topology's defaults. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "diag.h"

/* Every key, its field and what it means (bench/calibrate.c writes them). */
typedef struct {
  const char *key;
  size_t off;     /* offset of the double in CostDevice */
  const char *unit;
} ProfileKey;

#define F(field) offsetof(CostDevice, field)
static const ProfileKey keys[] = {
    {"gemm_flops", F(gemm_flops), "FLOP/s per rank, large GEMMs"},
    {"gemm_half_flops", F(gemm_half_flops), "FLOPs of a GEMM that runs at half gemm_flops"},
    {"gemm_out_s", F(gemm_out_s), "seconds per GEMM output element on top of its FLOPs (C's beta pass, the stores)"},
    {"gemm_in_s", F(gemm_in_s), "seconds per GEMM operand element on top of its FLOPs (packing)"},
    {"gemm_cold_bytes", F(gemm_cold_bytes_per_s), "bytes/s of a GEMM operand out of the caches (a saved activation), on top"},
    {"attention_flops", F(attn_flops), "FLOP/s per rank, attention"},
    {"attention_score_flops", F(attn_score_flops), "attention's forward: its work per score element, in FLOPs at its rate"},
    {"attention_bwd_ratio", F(attn_bwd_ratio), "attention's backward rate over its forward's"},
    {"attention_bwd_score_flops", F(attn_bwd_score_flops), "attention's backward: its work per score element, in FLOPs at its rate"},
    {"bandwidth", F(bytes_per_s), "bytes/s read + written by bandwidth-bound kernels"},
    {"kernel_overhead", F(op_overhead_s), "seconds per kernel call"},
    {"overlap", F(overlap), "fraction of an asynchronous collective hidden behind compute"},
    {"node_latency", F(link[0].latency_s), "seconds per ring step inside a node"},
    {"node_bandwidth", F(link[0].bytes_per_s), "bytes/s per rank inside a node"},
    {"network_latency", F(link[1].latency_s), "seconds per ring step across nodes"},
    {"network_bandwidth", F(link[1].bytes_per_s), "bytes/s per node across nodes"},
    {"peak_flops", F(peak_flops), "FLOP/s per rank, the MFU's denominator"},
    {"elem_flat_s", F(elem_s[COST_EL_FLAT]), "seconds per element, CPU flat / bias elementwise loops"},
    {"elem_indexed_s", F(elem_s[COST_EL_INDEXED]), "seconds per element, CPU broadcasts through computed indices"},
    {"elem_reduce_s", F(elem_s[COST_EL_REDUCE]), "seconds per input element, CPU reductions through computed indices"},
    {"elem_tanh_s", F(elem_s[COST_EL_TANH]), "seconds per element, CPU tanh and gelu (libm tanhf)"},
    {"elem_exp_s", F(elem_s[COST_EL_EXP]), "seconds per element, CPU exp, log, sigmoid, silu (libm)"},
    {"elem_xent_s", F(elem_s[COST_EL_XENT]), "seconds per logit, CPU cross-entropy (forward and backward in one pass)"},
    {"llvm_elem_flat_s", F(llvm_elem_s[COST_EL_FLAT]), "seconds per element, the LLVM kernels' flat / bias / per-row loops"},
    {"llvm_elem_tanh_s", F(llvm_elem_s[COST_EL_TANH]), "seconds per element, the LLVM kernels' tanh and gelu"},
    {"llvm_elem_exp_s", F(llvm_elem_s[COST_EL_EXP]), "seconds per element, the LLVM kernels' exp, log, sigmoid, silu"},
    {"host_link_bandwidth", F(host_link.bytes_per_s), "bytes/s per direction between host and device (PCIe), plan offload's copies"},
    {"host_link_latency", F(host_link.latency_s), "seconds per host <-> device copy"},
    {"host_bandwidth", F(host_bytes_per_s), "bytes/s read + written by the host's kernels (plan offload's update)"},
    {"time_spread", F(time_spread), "robust coefficient of variation of a block of work of time_spread_block seconds (wall clock); 0: none"},
    {"time_spread_block", F(time_spread_s), "seconds of the block time_spread was measured on"},
    {"offload_sync", F(offload_sync), "1: plan offload's copies synchronous where they start (SHARDRT_OFFLOAD_SYNC=1), 0: overlapped"},
};
#undef F
enum { NKEYS = sizeof keys / sizeof keys[0] };

static int key_index(const char *k) {
  for (int i = 0; i < NKEYS; i++)
    if (strcmp(keys[i].key, k) == 0) return i;
  return 0; /* (every caller names a key of the table) */
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
    n += k;
    if (n + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

bool cost_profile_read(const char *path, CostDevice *d) {
  char *text = slurp(path);
  if (!text) {
    error_plain("--profile %s: cannot read it", path);
    return false;
  }
  /* the text must outlive diagnostics that quote it: it is kept (one small file per run) */
  diag_add_source(path, text);
  CostDevice out = *d;
  bool ok = true, seen[NKEYS] = {false};
  int line = 1;
  for (char *p = text; *p;) {
    char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), p);
    char *hash = strchr(buf, '#');
    if (hash) *hash = 0;
    char *k = buf;
    while (isspace((unsigned char)*k)) k++;
    if (*k) {
      SrcLoc loc = {path, line, (int)(k - buf) + 1};
      char *ke = k;
      while (*ke && !isspace((unsigned char)*ke)) ke++;
      char *v = ke;
      while (isspace((unsigned char)*v)) v++;
      *ke = 0;
      const ProfileKey *pk = NULL;
      const char *names[NKEYS];
      for (int i = 0; i < NKEYS; i++) {
        names[i] = keys[i].key;
        if (strcmp(keys[i].key, k) == 0) pk = &keys[i];
      }
      if (strcmp(k, "source") == 0) {
        char *e = v + strlen(v);
        while (e > v && isspace((unsigned char)e[-1])) *--e = 0;
        snprintf(out.source, sizeof out.source, "profile %s (%s)", path, v);
      } else if (!pk) {
        const char *near = diag_nearest(k, names, NKEYS);
        error_at(loc, "unknown profile key '%s'%s%s%s", k, near ? " (did you mean '" : "", near ? near : "",
                 near ? "'?)" : "");
        ok = false;
      } else {
        errno = 0;
        char *num_end;
        double x = strtod(v, &num_end);
        while (isspace((unsigned char)*num_end)) num_end++;
        bool frac = strcmp(k, "overlap") == 0, flag = strcmp(k, "offload_sync") == 0;
        static const char *const may_be_zero[] = {"kernel_overhead", "gemm_half_flops", "gemm_out_s", "gemm_in_s",
                                                   "gemm_cold_bytes", "host_link_latency",
                                                   "attention_score_flops", "attention_bwd_ratio", "attention_bwd_score_flops",
                                                   "time_spread"};
        bool zero_ok = frac || flag || strncmp(k, "elem_", 5) == 0 || strncmp(k, "llvm_elem_", 10) == 0;
        for (size_t z = 0; z < sizeof may_be_zero / sizeof *may_be_zero; z++) zero_ok |= strcmp(k, may_be_zero[z]) == 0;
        if (v == num_end || *num_end || errno || !(x >= 0) || (frac && x > 1) || (flag && x != 0 && x != 1) ||
            (!zero_ok && x <= 0)) {
          SrcLoc vl = {path, line, (int)(v - buf) + 1};
          error_at(vl, "profile key '%s' needs %s, got '%s'", k,
                   flag ? "0 or 1" : frac ? "a fraction in [0, 1]" : "a positive number", v);
          ok = false;
        } else {
          *(double *)((char *)&out + pk->off) = x;
          seen[pk - keys] = true;
        }
      }
    }
    if (!end) break;
    p = end + 1;
    line++;
  }
  if (!ok) return false;
  /* A GEMM rate measured without the per-element terms (a profile from before them) was fitted with their time
   * in it: the defaults' terms on top would count it twice, so they are 0 (the flat rate, as it was measured). */
  if (seen[key_index("gemm_flops")] && !seen[key_index("gemm_out_s")]) out.gemm_out_s = 0;
  if (seen[key_index("gemm_flops")] && !seen[key_index("gemm_in_s")]) out.gemm_in_s = 0;
  /* A loop the profile measured for the C kernels only (a profile from before the LLVM ones were measured): the
   * LLVM kernels' at that figure too, as such a profile was read then (not the defaults' machine's) */
  static const char *const pairs[][2] = {{"elem_flat_s", "llvm_elem_flat_s"}, {"elem_tanh_s", "llvm_elem_tanh_s"},
                                         {"elem_exp_s", "llvm_elem_exp_s"}};
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
    const ProfileKey *c = &keys[key_index(pairs[i][0])], *l = &keys[key_index(pairs[i][1])];
    if (seen[c - keys] && !seen[l - keys]) *(double *)((char *)&out + l->off) = *(double *)((char *)&out + c->off);
  }
  if (strncmp(out.source, "profile ", 8) != 0) snprintf(out.source, sizeof out.source, "profile %s", path);
  *d = out;
  return true;
}
