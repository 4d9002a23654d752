/* tests/cuda/nvrtc_util.h — compiles a program's CUDA source with NVRTC, the kernel library's
 * headers given in memory (sk_headers.h), as the runtime does. */
#ifndef TESTS_NVRTC_UTIL_H
#define TESTS_NVRTC_UTIL_H

#include <stddef.h>

/* arch: "compute_90" (PTX) or "sm_90" (cubin). Returns 0 and the image (malloc'd; *bytes) and the
 * log (malloc'd, may be empty), or -1 with the log. */
int cudak_nvrtc(const char *src, const char *arch, char **image, size_t *bytes, char **log);
/* ... with one more NVRTC option (NULL: none), e.g. "--ptxas-options=-v" */
int cudak_nvrtc_opt(const char *src, const char *arch, const char *opt, char **image, size_t *bytes, char **log);

/* The options those compile with (arch, the toolkit's include directory, C++17, opt unless NULL) into
 * opts, their text in store; returns how many. */
int cudak_nvrtc_options(const char *arch, const char *opt, char store[2][4096], const char *opts[4]);

#endif
