/* tests/cuda/nvrtc_util.c — see nvrtc_util.h. */
#include "nvrtc_util.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_headers.h"

#define NVRTC_TRY(call)                                                                         \
  do {                                                                                          \
    nvrtcResult r_ = (call);                                                                    \
    if (r_ != NVRTC_SUCCESS) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, nvrtcGetErrorString(r_));   \
      return -1;                                                                                \
    }                                                                                           \
  } while (0)

int cudak_nvrtc(const char *src, const char *arch, char **image, size_t *bytes, char **log) {
  return cudak_nvrtc_opt(src, arch, NULL, image, bytes, log);
}

int cudak_nvrtc_opt(const char *src, const char *arch, const char *opt, char **image, size_t *bytes, char **log) {
  nvrtcProgram prog;
  *image = NULL;
  *log = NULL;
  NVRTC_TRY(nvrtcCreateProgram(&prog, src, "program.cu", sk_nheaders, (const char *const *)sk_header_sources,
                               (const char *const *)sk_header_names));
  char archopt[64], inc[4096];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  snprintf(inc, sizeof inc, "-I%s", CUDA_INCLUDE_DIR);
  const char *opts[] = {archopt, inc, "-std=c++17", opt};
  nvrtcResult rc = nvrtcCompileProgram(prog, opt ? 4 : 3, opts);
  size_t n = 0;
  NVRTC_TRY(nvrtcGetProgramLogSize(prog, &n));
  *log = calloc(1, n + 1);
  if (!*log) return -1;
  NVRTC_TRY(nvrtcGetProgramLog(prog, *log));
  if (rc != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    return -1;
  }
  int cubin = strncmp(arch, "sm_", 3) == 0;
  if (cubin) {
    NVRTC_TRY(nvrtcGetCUBINSize(prog, bytes));
    *image = malloc(*bytes);
    if (!*image) return -1;
    NVRTC_TRY(nvrtcGetCUBIN(prog, *image));
  } else {
    NVRTC_TRY(nvrtcGetPTXSize(prog, bytes));
    *image = malloc(*bytes);
    if (!*image) return -1;
    NVRTC_TRY(nvrtcGetPTX(prog, *image));
  }
  nvrtcDestroyProgram(&prog);
  return 0;
}
