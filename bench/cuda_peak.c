/* bench/cuda_peak.c — the device's dense GEMM peak (what MFU is measured against) and copy bandwidth.
 *
 *   cuda_peak_bench [N...]     (default 4096 8192; SHARDRT_DEVICE=emu runs it on the CPU emulation)
 *
 * For each N: N^3 GEMMs through rt_cu_matmul (cuBLASLt) — bf16 in / bf16 out and bf16 in / f32 out
 * (fp32 accumulation), f32 (exact fp32, no TF32) — best of 5 rounds of 5 after a warm-up, in
 * TFLOP/s; then a device-to-device copy of 1 GiB (GB/s, read + write counted once each: 2 x bytes)
 * and the trainer's own peak measurement (RtDevice.peak_flops).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ops.h"
#include "device.h"
#include "dtype.h"
#include "train/ctx.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int64_t sizes[8] = {4096, 8192};
  int nsizes = 2;
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 8; i++) sizes[nsizes++] = atoll(argv[i]);
  }
  int64_t maxn = 0;
  for (int i = 0; i < nsizes; i++) maxn = sizes[i] > maxn ? sizes[i] : maxn;
  int64_t copy_bytes = 1ll << 30, gemm_bytes = 3 * maxn * maxn * 4;
  int64_t bytes = (gemm_bytes > 2 * copy_bytes ? gemm_bytes : 2 * copy_bytes) + 4096;
  const char *sel = getenv("SHARDRT_DEVICE");
  if (sel && !strcmp(sel, "emu")) copy_bytes = 1 << 26, bytes = gemm_bytes + 2 * copy_bytes + 4096;
  RtProgram p;
  memset(&p, 0, sizeof p);
  p.model = "cuda_peak_bench";
  p.mem_bytes = bytes;
  p.device = &rt_cuda_device;
  RtCtx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.world = 1;
  ctx.threads = 1;
  char *M = NULL;
  if (rt_cuda_device.open(&p, &ctx, bytes, &M) != 0) return 1;
  char desc[512];
  rt_cuda_device.describe(&ctx, desc, sizeof desc);
  printf("device: %s\n", desc);
  printf("%8s  %-22s %10s %12s\n", "N", "GEMM", "ms", "TFLOP/s");
  for (int si = 0; si < nsizes; si++) {
    int64_t n = sizes[si];
    struct {
      const char *name;
      int ab, y;
    } kinds[] = {{"bf16 x bf16 -> bf16", RT_BF16, RT_BF16}, {"bf16 x bf16 -> f32", RT_BF16, RT_F32},
                 {"f32 x f32 -> f32", RT_F32, RT_F32}};
    for (int ki = 0; ki < 3; ki++) {
      size_t es = rt_dtype_size(kinds[ki].ab);
      char *a = M, *b = M + n * n * (int64_t)es, *y = b + n * n * (int64_t)es;
      rt_cu_zero(&ctx, M, 3 * n * n * 4);
      rt_cu_matmul(&ctx, y, kinds[ki].y, a, b, kinds[ki].ab, 1, n, n, n, 0, 0, 1, 1.0f, 0.0f); /* warm-up */
      rt_cuda_device.sync(&ctx);
      double best = 1e30;
      int reps = sel && !strcmp(sel, "emu") ? 1 : 5;
      for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int i = 0; i < reps; i++)
          rt_cu_matmul(&ctx, y, kinds[ki].y, a, b, kinds[ki].ab, 1, n, n, n, 0, 0, 1, 1.0f, 0.0f);
        rt_cuda_device.sync(&ctx);
        double t = (now_s() - t0) / reps;
        best = t < best ? t : best;
      }
      printf("%8lld  %-22s %10.3f %12.1f\n", (long long)n, kinds[ki].name, best * 1e3,
             2.0 * (double)n * (double)n * (double)n / best / 1e12);
    }
  }
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now_s();
    rt_cu_copy(&ctx, M + copy_bytes, M, copy_bytes);
    rt_cuda_device.sync(&ctx);
    double t = now_s() - t0;
    best = t < best ? t : best;
  }
  printf("device copy of %lld MiB: %.3f ms, %.1f GB/s (read + write)\n", (long long)(copy_bytes >> 20), best * 1e3,
         2.0 * (double)copy_bytes / best / 1e9);
  printf("trainer's peak (RtDevice.peak_flops): %.1f TFLOP/s\n", rt_cuda_device.peak_flops(&ctx) / 1e12);
  rt_cuda_device.close(&ctx);
  return 0;
}
