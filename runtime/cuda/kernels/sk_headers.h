/* runtime/cuda/kernels/sk_headers.h — the kernel library's headers (the .cuh files and sk_emu.h)
 * as C strings, for NVRTC's in-memory headers (nvrtcCreateProgram's headers/includeNames).
 * The definitions are generated at build time by sk_embed_headers() of embed.cmake. */
#ifndef SHARDRT_SK_HEADERS_H
#define SHARDRT_SK_HEADERS_H

extern const char *const sk_header_names[];   /* "shardk.cuh", ... (the #include names) */
extern const char *const sk_header_sources[]; /* their text, NUL-terminated */
extern const int sk_nheaders;

#endif
