/* runtime/device.h — RtDevice: how rt_train_main reaches a program whose memory lives on a device.
 *
 * A device program (RtProgram.device != NULL, shardc --target cuda) keeps its one allocation
 * (mem_bytes + workspace) in device memory; the step functions get its base as `mem` and
 * enqueue kernels there. The trainer never dereferences it: it initialises parameters, writes
 * the inputs and reads results, checkpoints and logits in host buffers and moves them with
 * upload / download. libshardrt (CPU) does not depend on CUDA: these are plain C function
 * pointers, filled by the backend (runtime/cuda/: `rt_cuda_device`, CUDA or its CPU emulation,
 * chosen at run time by SHARDRT_DEVICE=cuda|emu).
 *
 * Every hook but open takes the ctx that open filled (ctx->kernels holds the backend's state).
 * Errors after open are fatal (a message naming the call, exit status 1).
 */
#ifndef SHARDRT_DEVICE_H
#define SHARDRT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "program.h"

struct RtDevice {
  const char *name; /* "cuda" */
  /* Finds the device (local_rank % devices), compiles and loads p's kernels, allocates `bytes`
   * (mem_bytes + workspace) and zeroes them; sets ctx->kernels and *mem (the device base).
   * Returns 0, or -1 after printing "error: ..." on stderr (no device, driver too old, kernel
   * compile failure with its log, out of memory with planned versus available bytes). */
  int (*open)(const RtProgram *p, RtCtx *ctx, int64_t bytes, char **mem);
  /* Host -> device / device -> host copies of `bytes`; both return when the copy is done (download
   * after everything queued before it). */
  void (*upload)(RtCtx *ctx, void *dev_dst, const void *host_src, int64_t bytes);
  void (*download)(RtCtx *ctx, void *host_dst, const void *dev_src, int64_t bytes);
  void (*zero)(RtCtx *ctx, void *dev_dst, int64_t bytes); /* enqueued */
  void (*sync)(RtCtx *ctx);                               /* waits for everything enqueued */
  /* Runs the training step fn(M, ctx) on the device; the CUDA device may record it once and replay the
   * recording (the step launches the same work on the same addresses every time). NULL: call fn. */
  void (*run)(RtCtx *ctx, void (*fn)(char *M, RtCtx *ctx), char *M);
  /* Pins / unpins a host buffer the trainer downloads into again and again (the checkpoint snapshot):
   * copies to pinned memory run at the bus's speed. NULL: nothing to do. */
  void (*pin)(RtCtx *ctx, void *host, int64_t bytes);
  void (*unpin)(RtCtx *ctx, void *host);
  /* Bytes of device memory in use (everything on the device: the allocation, libraries' workspaces, the
   * context) and *total; -1 where the device is host memory (the emulation). NULL: host memory. */
  int64_t (*mem_in_use)(RtCtx *ctx, int64_t *total);
  /* One line for the banner: "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB (device 0 of 1)". */
  void (*describe)(RtCtx *ctx, char *out, size_t n);
  /* FLOP/s the MFU is measured against: the dense bf16 peak, measured (a large GEMM). */
  double (*peak_flops)(RtCtx *ctx);
  /* Frees the allocation and everything open made; ctx->kernels = NULL. */
  void (*close)(RtCtx *ctx);
  /* Compiles p's kernels for arch ("sm_90a", "sm_80": a cubin; "compute_90": PTX) into the kernel cache
   * without opening a device (NVRTC alone: a machine without a GPU fills a cache that GPU machines then
   * read: SHARDRT_CUBIN_CACHE). Returns 0, or -1 after printing "error: ...". */
  int (*compile)(const RtProgram *p, const char *arch);
};

/* The device of every CUDA trainer (runtime/cuda/device.c, in libshardrt_cuda): a generated
 * program sets RtProgram.device = &rt_cuda_device. */
extern const RtDevice rt_cuda_device;

#endif
