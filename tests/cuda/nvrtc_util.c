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

int cudak_nvrtc_options(const char *arch, const char *opt, char store[2][4096], const char *opts[4]) {
  snprintf(store[0], 4096, "--gpu-architecture=%s", arch);
  snprintf(store[1], 4096, "-I%s", CUDA_INCLUDE_DIR);
  opts[0] = store[0], opts[1] = store[1], opts[2] = "-std=c++17", opts[3] = opt;
  return opt ? 4 : 3;
}

int cudak_nvrtc_opt(const char *src, const char *arch, const char *opt, char **image, size_t *bytes, char **log) {
  nvrtcProgram prog;
  *image = NULL;
  *log = NULL;
  NVRTC_TRY(nvrtcCreateProgram(&prog, src, "program.cu", sk_nheaders, (const char *const *)sk_header_sources,
                               (const char *const *)sk_header_names));
  char store[2][4096];
  const char *opts[4];
  int nopts = cudak_nvrtc_options(arch, opt, store, opts);
  nvrtcResult rc = nvrtcCompileProgram(prog, nopts, opts);
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
