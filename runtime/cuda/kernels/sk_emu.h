/* runtime/cuda/kernels/sk_emu.h — a CPU emulator of the CUDA execution model, so the kernel
 * library (shardk.cuh) and the emitted kernels compile with the host C++ compiler
 * (c++ -std=c++17 -DSK_EMU) and run on the CPU. A test tool, not product code.
 *
 * Model: blocks run one after another; inside a block every thread is a cooperative fiber
 * (switched as SK_EMU_FAST_SWITCH below says), run in thread order until it finishes or reaches a
 * barrier. __syncthreads waits for every live thread of the block, __syncwarp and the warp
 * collectives (shuffles, ballot) for every live thread of the warp. `__shared__` variables are
 * `static thread_local` (one copy, and blocks never overlap); dynamic shared memory is a buffer of
 * the launch's size exactly: a kernel that asks for more (sk::dyn_smem) stops the run, a launch above
 * the device's most (SK_EMU_SMEM_MAX) is refused, and a guard after the buffer, checked after every
 * block, stops a kernel that wrote past it. Atomics are plain read-modify-writes: fibers never run at the same time. Emulator
 * state is thread_local, so several host threads may each run launches.
 */
#ifndef SK_EMU_H
#define SK_EMU_H

/* Fiber switches. ucontext's swapcontext saves and restores the signal mask, a system call per
 * switch (and a warp shuffle was two switches per lane, one since 2026-11-26): 3/4 of the emulator's time on a tiny tp 2
 * training step (perf, 2026-11-26). With GCC or Clang on x86-64 or AArch64 a switch is instead
 * __builtin_setjmp / __builtin_longjmp (the stack and frame pointers and the resume address; the
 * compiler treats every other register as clobbered at the receiver, so nothing else needs
 * keeping), and a fiber starts on its own stack by an instruction pair; elsewhere, or with
 * -DSK_EMU_FAST_SWITCH=0 (SHARDRT_EMU_CXX="c++ -DSK_EMU_FAST_SWITCH=0": to compare), ucontext. */
#ifndef SK_EMU_FAST_SWITCH
#if (defined(__x86_64__) || defined(__aarch64__)) && (defined(__GNUC__) || defined(__clang__))
#define SK_EMU_FAST_SWITCH 1
#else
#define SK_EMU_FAST_SWITCH 0
#endif
#endif
#if !SK_EMU_FAST_SWITCH
#include <ucontext.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <cuda_bf16.h>

/* cuda_bf16.h's host definitions of these are replaced */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) alignas(n)
#define __constant__ static

struct sk_emu_dim3 {
  unsigned x, y, z;
};

namespace sk_emu {

enum { ST_RUN, ST_BLOCK_BAR, ST_WARP_BAR, ST_DONE };

struct Fiber {
#if SK_EMU_FAST_SWITCH
  void *jb[5];     /* where the fiber resumes (__builtin_setjmp's buffer) */
  int started;     /* 0: not yet entered in this block */
#else
  ucontext_t ctx;  /* the fiber's saved registers */
#endif
  int state;       /* ST_* */
  sk_emu_dim3 tid; /* threadIdx */
  int linear;      /* thread index in the block */
};

/* A warp's A (16 x 16) and B (16 x 8) of one mma call, widened from the fragments its lanes published:
 * by the first of its lanes past the barrier, read by all (mma_bf16_16816). */
struct MmaWide {
  float a[16][16], b[16][8];
  unsigned long long block; /* Block::blocks_run of the call (0: none yet) */
  unsigned call;            /* the lanes' count of warp calls (Block::parity) at it */
};

struct Block {
  std::vector<Fiber> fibers;      /* one per thread of the block */
  std::vector<char *> stacks;     /* fiber stacks, reused across blocks and launches */
#if SK_EMU_FAST_SWITCH
  void *sched_jb[5];              /* where the scheduler resumes */
#else
  ucontext_t sched;               /* the scheduler's context */
#endif
  int cur = -1;                   /* the running fiber */
  int nthreads = 0;               /* the running block's threads */
  uint64_t shfl[2][1024];         /* per-thread exchange slots of the warp collectives, by call parity */
  unsigned sparity[1024];         /* per-thread count of its warp collectives (selects shfl's buffer) */
  uint32_t frag[2][1024][6];      /* per-thread A and B fragments of a warp's mma, by call parity */
  const void *rows[2][1024];      /* per-thread row addresses of a warp's ldmatrix, by call parity */
  uint32_t wgfrag[2][1024][4];    /* per-thread register A fragments of a warp's wgmma, by call parity */
  unsigned char wgnew[1024];      /* per-thread: its wgmma state (sk_emu_wgmma.h) is a previous block's */
  unsigned long long blocks_run = 0; /* blocks started by this host thread (tells a block's state from an earlier one's) */
  unsigned parity[1024];          /* per-thread count of those calls (selects the buffer) */
  MmaWide wide[2][32];            /* per warp, by call parity: its mma operands widened */
  const std::function<void()> *body = nullptr;
  unsigned char *dyn_smem = nullptr; /* dynamic shared memory of the launch */
  unsigned dyn_bytes = 0;            /* its size: what the launch gave */
  sk_emu_dim3 block_idx, block_dim, grid_dim;
};

/* A fiber's stack: STACK_BYTES, aligned to STACK_BYTES, its lowest bytes a StackHead naming its block and
 * thread (a stack serves one thread index of one host thread's Block), so code on a fiber finds its
 * context from any of its own stack addresses (ctx()) instead of a thread_local lookup, which in the
 * dlopened object is a call to __tls_get_addr: a tenth of an emulated training step's time (perf,
 * 2026-11-26). The scheduler, on the host thread's stack, uses blk(). */
enum { STACK_BYTES = 256 * 1024, STACK_HEAD = 64 };
struct StackHead {
  Block *b;
  int t;
};
/* The most dynamic shared memory a block may have (sm_90's, with the opt-in attribute the runtime sets
 * at launch: cudaDevAttrMaxSharedMemoryPerBlockOptin), and the guard bytes after the launch's buffer. */
enum { SMEM_MAX = 227 * 1024, SMEM_GUARD = 64, SMEM_GUARD_BYTE = 0xa5 };

inline Block &blk() {
  static thread_local Block b;
  return b;
}
/* on a fiber: the head of the stack it runs on */
__attribute__((always_inline)) inline StackHead &ctx() {
  char here;
  uintptr_t a = (uintptr_t)&here;
  asm("" : "+r"(a)); /* opaque: else the compiler takes the head for `here` itself, a local it may drop stores to */
  return *(StackHead *)(a & ~(uintptr_t)(STACK_BYTES - 1));
}
/* on a fiber: its block (blk() of the host thread running it) and its Fiber */
__attribute__((always_inline)) inline Block &fblk() { return *ctx().b; }
__attribute__((always_inline)) inline Fiber &me() {
  StackHead &h = ctx();
  return h.b->fibers[(size_t)h.t];
}

#if SK_EMU_FAST_SWITCH
/* Continues where jb was set (by __builtin_setjmp in another function, as the builtins require). */
[[noreturn]] __attribute__((noinline)) inline void jump(void **jb) { __builtin_longjmp(jb, 1); }

/* Where thread t's fiber starts below its stack's top: the stacks are STACK_BYTES-aligned, so their tops (the
 * frames every switch touches) would share one set of the caches (a 4 KiB period in L1, 64 KiB in L2) and
 * evict each other in a block of more threads than the caches have ways; t's top moves down by a distinct
 * multiple of 64 bytes below 64 KiB (17 t mod 1024 lines: distinct for the 1024 threads of a block). */
#ifndef SK_EMU_STACK_COLOR /* -DSK_EMU_STACK_COLOR=0 (SHARDRT_EMU_CXX="c++ -DSK_EMU_STACK_COLOR=0"): every top at the top, to compare */
#define SK_EMU_STACK_COLOR 1
#endif
inline uintptr_t stack_color(int t) { return SK_EMU_STACK_COLOR ? (uintptr_t)((17 * t) % 1024) * 64u : 0; }

[[noreturn]] inline void to_next(Block &b, int from);
[[noreturn]] inline void fiber_main() {
  Block &b = fblk();
  (*b.body)();
  Fiber &f = me();
  f.state = ST_DONE;
  to_next(b, f.linear);
}

/* Enters fiber_main on the stack that ends at top (16-byte aligned); never returns here. */
[[noreturn]] __attribute__((noinline)) inline void start_on(char *top) {
#if defined(__x86_64__)
  asm volatile("mov %0, %%rsp\n\tcall *%1\n\tud2" : : "r"(top), "r"(&fiber_main) : "memory");
#else
  asm volatile("mov sp, %0\n\tblr %1\n\tbrk #0" : : "r"(top), "r"(&fiber_main) : "memory");
#endif
  __builtin_unreachable();
}

/* Continues the first runnable fiber after fiber `from` (-1: from the first), else the scheduler: a
 * fiber that stops hands on to the next one directly, one jump a switch instead of two through the
 * scheduler, in the scheduler's order (thread order), so every run goes as it went through it. */
[[noreturn]] inline void to_next(Block &b, int from) {
  for (int t = from + 1; t < b.nthreads; t++) {
    Fiber &f = b.fibers[(size_t)t];
    if (f.state != ST_RUN) continue;
    b.cur = t;
    if (f.started) jump(f.jb);
    f.started = 1;
    start_on(b.stacks[(size_t)t] + STACK_BYTES - stack_color(t));
  }
  jump(b.sched_jb);
}

inline void yield(int state) {
  Block &b = fblk();
  Fiber &f = me();
  f.state = state;
  if (__builtin_setjmp(f.jb) == 0) to_next(b, f.linear);
}

/* Runs every runnable fiber, in thread order, until each yields or finishes. */
__attribute__((noinline)) inline void run_round(Block &b) {
  if (__builtin_setjmp(b.sched_jb) == 0) to_next(b, -1);
}
#else
inline void fiber_main() {
  Block &b = fblk();
  (*b.body)();
  me().state = ST_DONE;
  /* returning continues at uc_link: the scheduler */
}

inline void yield(int state) {
  Block &b = fblk();
  Fiber &f = me();
  f.state = state;
  if (swapcontext(&f.ctx, &b.sched) != 0) {
    perror("sk_emu: swapcontext");
    abort();
  }
}

inline void resume(Block &b, int t) {
  b.cur = t;
  if (swapcontext(&b.sched, &b.fibers[(size_t)t].ctx) != 0) {
    perror("sk_emu: swapcontext");
    abort();
  }
}
#endif

/* named barriers (sk_emu_ws.h): the deadlock error's detail, the check after a block */
inline void named_bar_report(Block &b);
inline void named_bar_end(Block &b);

inline void syncthreads() { yield(ST_BLOCK_BAR); }
inline void syncwarp() { yield(ST_WARP_BAR); }

/* Runs one block to completion: every fiber until it blocks, then releases whole warps /
 * the whole block at their barriers, until all are done. */
inline void run_block(int nthreads) {
  Block &b = blk();
  b.blocks_run++;
  b.nthreads = nthreads;
  for (int t = 0; t < nthreads; t++) {
    Fiber &f = b.fibers[(size_t)t];
    f.state = ST_RUN;
    f.linear = t;
    b.parity[t] = 0;
    b.sparity[t] = 0;
    b.wgnew[t] = 1;
    f.tid.x = (unsigned)t % b.block_dim.x;
    f.tid.y = ((unsigned)t / b.block_dim.x) % b.block_dim.y;
    f.tid.z = (unsigned)t / (b.block_dim.x * b.block_dim.y);
#if SK_EMU_FAST_SWITCH
    f.started = 0;
#else
    if (getcontext(&f.ctx) != 0) {
      perror("sk_emu: getcontext");
      abort();
    }
    f.ctx.uc_stack.ss_sp = b.stacks[(size_t)t] + STACK_HEAD;
    f.ctx.uc_stack.ss_size = STACK_BYTES - STACK_HEAD;
    f.ctx.uc_link = &b.sched;
    makecontext(&f.ctx, fiber_main, 0);
#endif
  }
  int nwarps = (nthreads + 31) / 32;
  for (;;) {
#if SK_EMU_FAST_SWITCH
    run_round(b);
#else
    for (int t = 0; t < nthreads; t++) {
      if (b.fibers[(size_t)t].state == ST_RUN) resume(b, t);
    }
#endif
    b.cur = -1;
    int done = 0, at_block = 0, released = 0;
    for (int t = 0; t < nthreads; t++) {
      done += b.fibers[(size_t)t].state == ST_DONE;
      at_block += b.fibers[(size_t)t].state == ST_BLOCK_BAR;
    }
    if (done == nthreads) return;
    if (at_block + done == nthreads) {
      for (int t = 0; t < nthreads; t++)
        if (b.fibers[(size_t)t].state == ST_BLOCK_BAR) b.fibers[(size_t)t].state = ST_RUN;
      continue;
    }
    for (int w = 0; w < nwarps; w++) {
      int lo = w * 32, hi = lo + 32 < nthreads ? lo + 32 : nthreads, ok = 1, any = 0;
      for (int t = lo; t < hi; t++) {
        int s = b.fibers[(size_t)t].state;
        ok &= s == ST_WARP_BAR || s == ST_DONE;
        any |= s == ST_WARP_BAR;
      }
      if (ok && any) {
        for (int t = lo; t < hi; t++)
          if (b.fibers[(size_t)t].state == ST_WARP_BAR) b.fibers[(size_t)t].state = ST_RUN;
        released = 1;
      }
    }
    /* a fiber another released during the round (a named barrier's phase completing: sk_emu_ws.h) */
    for (int t = 0; t < nthreads && !released; t++) released = b.fibers[(size_t)t].state == ST_RUN;
    if (!released) {
      fprintf(stderr, "sk_emu: deadlock (threads wait at different barriers) in block (%u,%u,%u)\n",
              b.block_idx.x, b.block_idx.y, b.block_idx.z);
      named_bar_report(b);
      abort();
    }
  }
}

/* Runs body as a kernel over the grid; body calls the __global__ function. */
inline void launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,
                   const std::function<void()> &body) {
  Block &b = blk();
  int nthreads = (int)(bx * by * bz);
  if (nthreads <= 0 || nthreads > 1024 || gx == 0 || gy == 0 || gz == 0) {
    fprintf(stderr, "sk_emu: bad launch grid (%u,%u,%u) block (%u,%u,%u)\n", gx, gy, gz, bx, by, bz);
    abort();
  }
  if (b.fibers.size() < (size_t)nthreads) b.fibers.resize((size_t)nthreads);
  while (b.stacks.size() < (size_t)nthreads) {
    char *s = (char *)aligned_alloc(STACK_BYTES, STACK_BYTES);
    if (!s) {
      fprintf(stderr, "sk_emu: out of memory for fiber stacks\n");
      abort();
    }
    StackHead *h = (StackHead *)s;
    h->b = &b;
    h->t = (int)b.stacks.size();
    b.stacks.push_back(s);
  }
  if (smem > SMEM_MAX) {
    fprintf(stderr, "sk_emu: launch with %u bytes of dynamic shared memory: a block may have at most %d\n", smem,
            (int)SMEM_MAX);
    abort();
  }
  /* the shared window: dynamic shared memory at window address 0, 1024-aligned like the hardware's
   * swizzle atoms (sk_emu_wgmma.h decodes wgmma descriptors against it), the guard after it */
  std::vector<unsigned char> dyn((size_t)smem + SMEM_GUARD + 1024);
  unsigned char *win = dyn.data() + ((1024 - ((uintptr_t)dyn.data() & 1023)) & 1023);
  memset(win + smem, SMEM_GUARD_BYTE, SMEM_GUARD);
  b.dyn_smem = win;
  b.dyn_bytes = smem;
  b.body = &body;
  b.block_dim = {bx, by, bz};
  b.grid_dim = {gx, gy, gz};
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        b.block_idx = {x, y, z};
        run_block(nthreads);
        named_bar_end(b);
        for (int i = 0; i < SMEM_GUARD; i++)
          if (win[(size_t)smem + (size_t)i] != SMEM_GUARD_BYTE) {
            fprintf(stderr, "sk_emu: block (%u,%u,%u) wrote past the %u bytes of dynamic shared memory of its launch\n",
                    x, y, z, smem);
            abort();
          }
      }
  b.body = nullptr;
  b.dyn_smem = nullptr;
  b.dyn_bytes = 0;
}

/* A thread's wait until *p holds want, another block's count (shardk_wgmma_bwd1.cuh's ordered sums): a
 * launch's blocks run one after another on this host thread in linear block order, so the count is there
 * already, or the block that would set it comes later and cannot run while this one waits: a deadlock
 * (on the GPU too, where a block waiting on a later one hangs when that one finds no SM), reported here
 * instead of a hang. */
inline void wait_count(const int *p, int want) {
  const int v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  if (v == want) return;
  Block &b = fblk();
  fprintf(stderr,
          "sk_emu: deadlock: block (%u,%u,%u) waits for a count of %d that holds %d, and no block before it in the "
          "launch's order sets it\n",
          b.block_idx.x, b.block_idx.y, b.block_idx.z, want, v);
  abort();
}

inline int lane() { return me().linear & 31; }
inline int warp_base() { return me().linear & ~31; }
inline int warp_size_live() {
  Block &b = fblk();
  int n = (int)(b.block_dim.x * b.block_dim.y * b.block_dim.z) - warp_base();
  return n < 32 ? n : 32;
}

/* A warp collective's slots: the buffer of this call's parity, one barrier a call. A lane publishes into the
 * buffer of its call's parity, so the next call's writes go to the other buffer while slower lanes still read
 * this one, and no lane writes this buffer again (two calls on) before every lane has passed the next call's
 * barrier, after its read of this one. The warp's lanes make the same sequence of collectives (as CUDA's
 * *_sync with the full mask requires). */
inline uint64_t *collective_slots() {
  Block &b = fblk();
  const int t = me().linear;
  return b.shfl[b.sparity[t]++ & 1u];
}

/* Every live lane of the warp publishes v; returns the value of lane src (v itself when src
 * is outside the warp's live lanes). */
template <class T>
inline T exchange(T v, int src) {
  static_assert(sizeof(T) <= 8, "sk_emu: shuffle of a type wider than 8 bytes");
  uint64_t *slot = collective_slots(), bits = 0;
  memcpy(&bits, &v, sizeof(T));
  slot[me().linear] = bits;
  syncwarp();
  T r = v;
  if (src >= 0 && src < warp_size_live()) memcpy(&r, &slot[warp_base() + src], sizeof(T));
  return r;
}

/* mma.sync.m16n8k16.row.col, bf16 inputs, fp32 accumulation, as one warp: d[4] += A b. Each lane
 * holds its fragments of PTX's layout (lane = 4 g + t): a[0..3] = A rows g, g+8 at columns 2t, 2t+1
 * (a[0], a[1]) and 2t+8, 2t+9 (a[2], a[3]); b[0], b[1] = B rows 2t, 2t+1 and 2t+8, 2t+9 of column g;
 * d = rows g, g+8 at columns 2t, 2t+1. Low 16 bits hold the lower index. Every lane publishes its
 * fragments, then computes its own four sums in k order (the tensor core's order is unspecified). */
inline float bf16_lo(uint32_t w, int hi) {
  uint32_t u = (hi ? w >> 16 : w & 0xffffu) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* One warp barrier per call: a lane publishes into the buffer of its call's parity, so the next
 * call's writes go to the other buffer while slower lanes still read this one (and no lane passes
 * the next call's barrier before every lane has finished reading). */
inline unsigned next_parity() { return fblk().parity[me().linear]++ & 1u; }

/* acc[i] + a[i][0] b[i][0] + ... + a[i][15] b[i][15 bs] for i < 4, each sum one fmaf at a time in k order: with
 * the host's FMA instruction where it has one (x86-64: checked at run time; the same correctly rounded results
 * as libm's fmaf, without a call per product), else fmaf. The four sums go side by side, their latencies
 * overlapped (one chain of 16 dependent FMAs at a time was a quarter of the attention cases' time). */
inline float fma16_lib(const float *a, const float *b, int bs, float acc) {
  for (int k = 0; k < 16; k++) acc = fmaf(a[k], b[k * bs], acc);
  return acc;
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("fma"))) inline void fma16x4_hw(const float *const a[4], const float *const b[4], int bs,
                                                      float acc[4]) {
  float s0 = acc[0], s1 = acc[1], s2 = acc[2], s3 = acc[3];
  for (int k = 0; k < 16; k++) {
    s0 = __builtin_fmaf(a[0][k], b[0][k * bs], s0);
    s1 = __builtin_fmaf(a[1][k], b[1][k * bs], s1);
    s2 = __builtin_fmaf(a[2][k], b[2][k * bs], s2);
    s3 = __builtin_fmaf(a[3][k], b[3][k * bs], s3);
  }
  acc[0] = s0, acc[1] = s1, acc[2] = s2, acc[3] = s3;
}
inline void fma16x4(const float *const a[4], const float *const b[4], int bs, float acc[4]) {
  if (__builtin_cpu_supports("fma")) fma16x4_hw(a, b, bs, acc);
  else
    for (int i = 0; i < 4; i++) acc[i] = fma16_lib(a[i], b[i], bs, acc[i]);
}
#else
inline void fma16x4(const float *const a[4], const float *const b[4], int bs, float acc[4]) {
  for (int i = 0; i < 4; i++) acc[i] = fma16_lib(a[i], b[i], bs, acc[i]);
}
#endif

inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  Block &bk = fblk();
  const int me_t = me().linear;
  const unsigned call = bk.parity[me_t]++, par = call & 1u;
  uint32_t(*fr)[6] = bk.frag[par];
  uint32_t *mine = fr[me_t];
  for (int i = 0; i < 4; i++) mine[i] = a[i];
  mine[4] = b[0], mine[5] = b[1];
  syncwarp();
  const int base = me_t & ~31, l = me_t & 31, g = l >> 2, t = l & 3;
  MmaWide &w = bk.wide[par][base >> 5];
  if (w.block != bk.blocks_run || w.call != call) {
    for (int r = 0; r < 16; r++)
      for (int kk = 0; kk < 16; kk++)
        w.a[r][kk] = bf16_lo(fr[base + (r % 8) * 4 + (kk % 8) / 2][(r >= 8) + 2 * (kk >= 8)], kk & 1);
    for (int kk = 0; kk < 16; kk++)
      for (int c = 0; c < 8; c++) w.b[kk][c] = bf16_lo(fr[base + c * 4 + (kk % 8) / 2][4 + (kk >= 8)], kk & 1);
    w.block = bk.blocks_run, w.call = call;
  }
  const float *ar[4], *bc[4];
  for (int o = 0; o < 4; o++) {
    int r = g + (o >= 2 ? 8 : 0), c = 2 * t + (o & 1);
    ar[o] = w.a[r], bc[o] = &w.b[0][c];
  }
  fma16x4(ar, bc, 8, d);
}

/* ldmatrix.sync.m8n8.x4(.trans).b16 as one warp: lanes 8i..8i+7 give the row addresses of 8 x 8
 * matrix i; lane 4g + t receives r[i] = row g, columns 2t, 2t+1 of matrix i (with trans: rows 2t,
 * 2t+1 of column g). */
inline void ldmatrix_x4(uint32_t r[4], const void *row, bool trans) {
  Block &bk = fblk();
  const void **rows = bk.rows[next_parity()];
  rows[me().linear] = row;
  syncwarp();
  const int base = warp_base(), l = lane(), g = l >> 2, t = l & 3;
  for (int i = 0; i < 4; i++) {
    if (!trans) {
      memcpy(&r[i], (const uint16_t *)rows[base + 8 * i + g] + 2 * t, 4);
    } else {
      uint16_t lo, hi;
      memcpy(&lo, (const uint16_t *)rows[base + 8 * i + 2 * t] + g, 2);
      memcpy(&hi, (const uint16_t *)rows[base + 8 * i + 2 * t + 1] + g, 2);
      r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
  }
}

} // namespace sk_emu

#define threadIdx (sk_emu::me().tid)
#define blockIdx (sk_emu::fblk().block_idx)
#define blockDim (sk_emu::fblk().block_dim)
#define gridDim (sk_emu::fblk().grid_dim)
#define warpSize 32

inline void __syncthreads() { sk_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  sk_emu::syncwarp();
}
/* integer atomics: a block's fibers switch only at barriers and shuffles, but blocks may run on several host threads */
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  (void)mask;
  int l = sk_emu::lane();
  return sk_emu::exchange(v, (l / width) * width + (src % width));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
  (void)mask;
  int l = sk_emu::lane(), s = l ^ m;
  return sk_emu::exchange(v, (s / width == l / width) ? s : l);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  (void)mask;
  int l = sk_emu::lane(), s = l + (int)d;
  return sk_emu::exchange(v, (s / width == l / width) ? s : l);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  (void)mask;
  int l = sk_emu::lane(), s = l - (int)d;
  return sk_emu::exchange(v, (s >= 0 && s / width == l / width) ? s : l);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  (void)mask;
  uint64_t *slot = sk_emu::collective_slots();
  slot[sk_emu::me().linear] = pred != 0;
  __syncwarp();
  unsigned r = 0;
  int n = sk_emu::warp_size_live(), base = sk_emu::warp_base();
  for (int i = 0; i < n; i++) r |= (unsigned)(slot[base + i] != 0) << i;
  return r;
}
/* the live lanes whose v equals this lane's (CUDA's __match_any_sync, sm_70+) */
template <class T>
inline unsigned __match_any_sync(unsigned mask, T v) {
  (void)mask;
  static_assert(sizeof(T) <= 8, "sk_emu: match of a type wider than 8 bytes");
  uint64_t *slot = sk_emu::collective_slots(), bits = 0;
  memcpy(&bits, &v, sizeof(T));
  slot[sk_emu::me().linear] = bits;
  __syncwarp();
  unsigned r = 0;
  int n = sk_emu::warp_size_live(), base = sk_emu::warp_base();
  for (int i = 0; i < n; i++) r |= (unsigned)(slot[base + i] == bits) << i;
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  int n = sk_emu::warp_size_live();
  unsigned full = n == 32 ? 0xffffffffu : ((1u << n) - 1u);
  return __ballot_sync(mask, pred) == full;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }

template <class T>
inline T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
inline int atomicMax(int *p, int v) {
  int old = *p;
  if (v > old) *p = v;
  return old;
}
inline int atomicExch(int *p, int v) {
  int old = *p;
  *p = v;
  return old;
}

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
/* the rounded add and multiply the device never contracts into an FMA (the emulator's -O1 for x86-64 has none) */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __int_as_float(int x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
inline int __float_as_int(float f) {
  int x;
  memcpy(&x, &f, 4);
  return x;
}
inline unsigned __float_as_uint(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  return x;
}

/* Dynamic shared memory of the running launch. */
#define SK_DYN_SMEM() ((void *)sk_emu::fblk().dyn_smem)
namespace sk_emu {
/* The launch's dynamic shared memory for a kernel that uses need bytes of it: stops the run when the
 * launch gave fewer (on the GPU the kernel would read and write past its block's shared memory). */
inline void *dyn_smem(unsigned need) {
  Block &b = fblk();
  if (need > b.dyn_bytes) {
    fprintf(stderr, "sk_emu: block (%u,%u,%u) uses %u bytes of dynamic shared memory, its launch gave %u\n",
            b.block_idx.x, b.block_idx.y, b.block_idx.z, need, b.dyn_bytes);
    abort();
  }
  return b.dyn_smem;
}
} // namespace sk_emu

#include "sk_emu_wgmma.h"
#include "sk_emu_ws.h"

/* kN_emu: the launcher entry of kernel name; callargs is the parenthesised argument list of
 * the call, written with SK_ARG(i, type). */
#define SK_ARG(i, T) (*(T *)args[i])
#define SK_EMU_ENTRY(name, callargs)                                                                 \
  extern "C" void name##_emu(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                             unsigned smem, void **args) {                                           \
    sk_emu::launch(gx, gy, gz, bx, by, bz, smem, [&]() { name callargs; });                          \
  }

#endif
