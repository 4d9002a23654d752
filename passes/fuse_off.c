/* passes/fuse_off.c — `shardc --no-fuse LIST`: the CUDA target's fusions turned off one by one, so
 * that each one's effect can be timed side by side with the same compiler (bench/gpu_compare.sh's
 * `llamanofuse` part). The names, decided here once; the bits live in Module.no_fuse and each pass
 * asks fuse_on (passes/passes.h). The cost model follows: it reads what the passes marked. */
#include <string.h>

#include "diag.h"
#include "passes.h"

static const char *const fuse_names[FUSE_COUNT] = {
    [FUSE_RESIDUAL] = "residual", [FUSE_SWIGLU] = "swiglu", [FUSE_NORMRES] = "normres", [FUSE_EPILOGUE] = "epilogue",
    [FUSE_GROUPS] = "groups",     [FUSE_CE] = "ce",         [FUSE_SUMSQ] = "sumsq",
    [FUSE_HFUSE] = "hfuse",
};

bool fuse_off_parse(const char *list, unsigned *bits) {
  const char *p = list;
  for (;;) {
    size_t len = strcspn(p, ",");
    int k = 0;
    if (len == 3 && strncmp(p, "all", 3) == 0) {
      *bits |= (1u << FUSE_COUNT) - 1;
    } else {
      while (k < FUSE_COUNT && !(strlen(fuse_names[k]) == len && strncmp(p, fuse_names[k], len) == 0)) k++;
      if (k == FUSE_COUNT) {
        char valid[128] = "";
        for (int j = 0; j < FUSE_COUNT; j++) {
          strcat(valid, fuse_names[j]);
          strcat(valid, ", ");
        }
        error_plain("--no-fuse %s: no fusion named '%.*s' (valid: %sall)", list, (int)len, p, valid);
        return false;
      }
      *bits |= 1u << k;
    }
    if (!p[len]) return true;
    p += len + 1;
  }
}

const char *fuse_off_name(FuseKind k) { return k >= 0 && k < FUSE_COUNT ? fuse_names[k] : "?"; }
