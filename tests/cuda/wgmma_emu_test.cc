/* tests/cuda/wgmma_emu_test.cc — the emulator's wgmma model (runtime/cuda/kernels/sk_emu_wgmma.h) on
 * hand-computed cases: compiled by the host C++ compiler with -DSK_EMU (tests/cuda/wgmma_emu.sh).
 *  1. element addresses decoded from descriptors, for every swizzle mode and both transposes, against
 *     byte addresses worked out by hand;
 *  2. m64nNk16 products for every swizzle mode, A from shared memory (both transposes) or registers and
 *     B in both transposes, the operands placed by this file's own description of each layout (a
 *     row-major tile whose 16-byte chunks are permuted by XOR with the row bits), small integers so
 *     that fp32 sums are exact: equal to a plain product;
 *  3. the asynchrony: accumulators unchanged until wait_group, wait_group 1 completing all but the last
 *     group, scale-d 0 ignoring the accumulators;
 *  4. a descriptor with the wrong swizzle mode or SBO computes something else (the model reads what the
 *     bits say);
 *  5. refused (the run stops): warps of one warpgroup giving different descriptors, a wgmma without a
 *     wgmma.fence before it.
 */
#include "sk_emu.h"

#include <cstdio>

#include <sys/wait.h>
#include <unistd.h>

#include "emu_expect.h"

static uint64_t desc(uint32_t start, uint32_t lbo, uint32_t sbo, int mode) {
  return (uint64_t)((start >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
         (uint64_t)((sbo >> 4) & 0x3fff) << 32 | (uint64_t)mode << 62;
}

/* 1. by hand: (start, LBO, SBO, mode, transpose, mn, k) -> byte address */
static void addresses() {
  struct {
    uint32_t lbo, sbo;
    int mode, mn_major, mn, k;
    uint32_t want;
  } c[] = {
      /* K-major, 128-byte swizzle (mode 1): rows of 128 bytes, chunk ^= row % 8 */
      {16, 1024, 1, 0, 1, 0, 144},  /* 128 + chunk 0 ^ 1 -> 144 */
      {16, 1024, 1, 0, 1, 8, 128},  /* 144: chunk 1 ^ 1 = 0 -> 128 */
      {16, 1024, 1, 0, 9, 3, 1174}, /* 1024 + 128 + 6 = 1158, row bits 1 -> 1174 */
      {16, 1024, 1, 0, 7, 15, 1006}, /* 896 + 16 + 14 = 926, row bits 7 -> chunk 1 ^ 7 = 6: 896 + 96 + 14 */
      /* K-major, 64-byte swizzle (mode 2): rows of 64 bytes, bits 4-5 ^= bits 7-8 */
      {16, 512, 2, 0, 3, 9, 194},   /* 192 + 16 + 2 = 210, bits 7-8 = 1 -> 194 */
      /* K-major, 32-byte swizzle (mode 3): rows of 32 bytes, bit 4 ^= bit 7 */
      {16, 256, 3, 0, 5, 8, 160},   /* 160 + 16 = 176, bit 7 set -> 160 */
      /* K-major, no swizzle: core matrices of 128 bytes, LBO along k, SBO along mn */
      {128, 256, 0, 0, 9, 10, 404}, /* 256 + 16 + 128 + 4 */
      /* MN-major, 128-byte swizzle: rows of 64 mn elements (k % 8 at 128 bytes), SBO per 8 k, LBO per 64 mn */
      {8192, 1024, 1, 1, 10, 3, 420},  /* 16 + 384 + 4 = 404, row bits 3 -> 404 ^ 48 */
      {8192, 1024, 1, 1, 70, 9, 9372}, /* 8192 + 1024 + 128 + 12 = 9356, row bits 1 -> + 16 */
      /* MN-major, no swizzle: SBO per 8 mn, LBO per 8 k */
      {256, 128, 0, 1, 11, 9, 406},   /* 128 + 16 + 256 + 6 */
      /* MN-major, 64-byte swizzle: rows of 32 mn elements, LBO per 32 mn */
      {4096, 512, 2, 1, 37, 2, 4250}, /* 4096 + 128 + 10 = 4234, bits 7-8 = 1 -> + 16 */
      /* MN-major, 32-byte swizzle: rows of 16 mn elements, LBO per 16 mn */
      {2048, 256, 3, 1, 13, 11, 378}, /* 16 + 96 + 256 + 10, bit 7 clear */
  };
  for (auto &x : c) {
    uint32_t got = sk_emu::wgmma_elem_addr(desc(0, x.lbo, x.sbo, x.mode), x.mn, x.k, x.mn_major);
    char what[160];
    snprintf(what, sizeof what, "address mode %d %s (mn %d, k %d): %u, by hand %u", x.mode,
             x.mn_major ? "MN-major" : "K-major", x.mn, x.k, got, x.want);
    expect(got == x.want, what);
  }
  /* the start address moves the whole operand (a k16 step inside a 128-byte row: + 32 bytes, swizzled after) */
  expect(sk_emu::wgmma_elem_addr(desc(32, 16, 1024, 1), 1, 0, 0) == ((128 + 32) ^ 16), "start address + 32, 128B");
}

/* 2. operand placement, this test's own description: element (mn, k) of an operand stored as a tile
 * whose rows are `rows` (mn for K-major, k for MN-major) and whose columns the other index */
static int swz_bits(int mode) { return mode == 1 ? 3 : mode == 2 ? 2 : mode == 3 ? 1 : 0; }
struct Layout {
  int mode, mn_major;
  uint32_t base, lbo, sbo; /* the descriptor's fields */
};
/* byte offset of (mn, k) in the operand's tile, and the descriptor fields that describe it */
static uint32_t place(const Layout &L, int mn, int k) {
  if (L.mode == 0) { /* core matrices: 8 rows x 16 bytes, contiguous; K-major: [mn/8][k/8][8][8], MN-major: [mn/8][k/8][8 k][8 mn] */
    if (!L.mn_major) return L.base + (uint32_t)(mn / 8) * L.sbo + (uint32_t)(k / 8) * L.lbo + (uint32_t)(mn % 8) * 16 + (uint32_t)(k % 8) * 2;
    return L.base + (uint32_t)(mn / 8) * L.sbo + (uint32_t)(k / 8) * L.lbo + (uint32_t)(k % 8) * 16 + (uint32_t)(mn % 8) * 2;
  }
  const int W = 16 << swz_bits(L.mode), per = W / 2; /* bytes and elements per row of the swizzle atom */
  int row, col;
  uint32_t atom;
  if (!L.mn_major) row = mn, col = k, atom = 0;
  else row = k, col = mn % per, atom = (uint32_t)(mn / per) * L.lbo;
  /* rows of W bytes, 8-row groups at SBO (K-major: SBO 8 W here; MN-major: 8 k rows a group) */
  uint32_t r = L.base + atom + (uint32_t)(row / 8) * L.sbo + (uint32_t)(row % 8) * (uint32_t)W;
  int chunk = col / 8, rb = (int)((r >> 7) & ((1u << swz_bits(L.mode)) - 1u)); /* the row's bits 7.. of its address */
  return r + (uint32_t)((chunk ^ rb) * 16) + (uint32_t)(col % 8) * 2;
}

static uint16_t bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

template <int N>
static void product(int mode, int a_src, int b_mn, const char *name) {
  /* A 64 x 16, B N x 16 (B[n][k]); small integers */
  static float A[64][16], B[256][16];
  for (int m = 0; m < 64; m++)
    for (int k = 0; k < 16; k++) A[m][k] = (float)((m * 7 + k * 3) % 9 - 4);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < 16; k++) B[n][k] = (float)((n * 5 + k * 11) % 7 - 3);
  const int W = mode ? 16 << swz_bits(mode) : 0;
  /* A at 0 (K-major: 64 rows; MN-major: 16 k rows of 64 mn), B at 16384 */
  Layout la, lb;
  if (a_src == 1) la = {mode, 1, 0, mode ? (uint32_t)(16 * W) : 256u, mode ? 8u * (uint32_t)W : 128u};
  else la = {mode, 0, 0, mode ? 16u : 128u, mode ? 8u * (uint32_t)W : 256u};
  if (a_src == 1 && !mode) la.lbo = 1024u; /* MN-major, no swizzle: 8 core matrices along m, then the next 8 k */
  if (b_mn) lb = {mode, 1, 16384, mode ? (uint32_t)(16 * W) : (uint32_t)(N / 8) * 128u, mode ? 8u * (uint32_t)W : 128u};
  else lb = {mode, 0, 16384, mode ? 16u : 128u, mode ? 8u * (uint32_t)W : 256u};
  static float want[64][256];
  for (int m = 0; m < 64; m++)
    for (int n = 0; n < N; n++) {
      float s = 0.0f;
      for (int k = 0; k < 16; k++) s += A[m][k] * B[n][k];
      want[m][n] = s + 1.0f; /* D starts at 1 (scale-d 1) */
    }
  const uint64_t ad = desc(la.base, la.lbo, la.sbo, mode), bd = desc(lb.base, lb.lbo, lb.sbo, mode);
  int bad = 0, stale = 0;
  sk_emu::launch(1, 1, 1, 128, 1, 1, 65536, [&]() {
    unsigned char *sm = (unsigned char *)SK_DYN_SMEM();
    const int tid = (int)threadIdx.x;
    if (tid == 0) {
      memset(sm, 0xff, 65536); /* NaN everywhere a wrong decode might read */
      for (int m = 0; m < 64; m++)
        for (int k = 0; k < 16; k++) {
          uint16_t h = bf(A[m][k]);
          memcpy(sm + place(la, m, k), &h, 2);
        }
      for (int n = 0; n < N; n++)
        for (int k = 0; k < 16; k++) {
          uint16_t h = bf(B[n][k]);
          memcpy(sm + place(lb, n, k), &h, 2);
        }
    }
    __syncthreads();
    const int l = tid & 31, g = l >> 2, t = l & 3, w = tid >> 5;
    float d[N / 2];
    for (int i = 0; i < N / 2; i++) d[i] = 1.0f;
    sk_emu::wgmma_fence();
    if (a_src == 2) {
      uint32_t a[4];
      int r0 = 16 * w + g;
      auto pk = [&](int r, int c) { return (uint32_t)bf(A[r][c]) | (uint32_t)bf(A[r][c + 1]) << 16; };
      a[0] = pk(r0, 2 * t), a[1] = pk(r0 + 8, 2 * t), a[2] = pk(r0, 2 * t + 8), a[3] = pk(r0 + 8, 2 * t + 8);
      sk_emu::wgmma_rs<N>(d, a, bd, 1, b_mn);
    } else {
      sk_emu::wgmma_ss<N>(d, ad, bd, 1, a_src == 1, b_mn);
    }
    sk_emu::wgmma_commit();
    for (int i = 0; i < N / 2; i++) stale += d[i] != 1.0f; /* not complete before the wait */
    sk_emu::wgmma_wait(0);
    for (int i = 0; i < N / 8; i++)
      for (int v = 0; v < 4; v++) {
        int row = 16 * w + g + 8 * (v >> 1), col = 8 * i + 2 * t + (v & 1);
        bad += d[4 * i + v] != want[row][col];
      }
  });
  char what[200];
  snprintf(what, sizeof what, "m64n%dk16 %s: %d of %d accumulators wrong, %d changed before the wait", N, name, bad,
           64 * N, stale);
  expect(bad == 0 && stale == 0, what);
}

/* 3 and 4: wait_group 1 and scale-d 0; a wrong swizzle mode / SBO reads other elements */
static void async_and_wrong() {
  int bad = 0;
  sk_emu::launch(1, 1, 1, 128, 1, 1, 16384, [&]() {
    unsigned char *sm = (unsigned char *)SK_DYN_SMEM();
    const int tid = (int)threadIdx.x;
    if (tid == 0) { /* A row m all m + 1 (64 x 16, K-major 128B), B row n: n + 1 (k < 8), 2 (n + 1) (8 x 16 K-major 128B) */
      memset(sm, 0, 16384);
      Layout la = {1, 0, 0, 16, 1024}, lb = {1, 0, 8192, 16, 1024};
      for (int m = 0; m < 64; m++)
        for (int k = 0; k < 16; k++) {
          uint16_t h = bf((float)(m + 1));
          memcpy(sm + place(la, m, k), &h, 2);
        }
      for (int n = 0; n < 8; n++)
        for (int k = 0; k < 16; k++) {
          uint16_t h = bf((float)(n + 1) * (k < 8 ? 1.0f : 2.0f));
          memcpy(sm + place(lb, n, k), &h, 2);
        }
    }
    __syncthreads();
    const int t = tid & 3, g = (tid & 31) >> 2, w = tid >> 5;
    auto D = [&](int v) { return 24.0f * (float)(2 * t + (v & 1) + 1) * (float)(16 * w + g + 8 * (v >> 1) + 1); };
    float d1[4] = {5, 5, 5, 5}, d2[4] = {5, 5, 5, 5}, d3[4] = {0, 0, 0, 0}, d4[4] = {0, 0, 0, 0};
    const uint64_t ad = desc(0, 16, 1024, 1), bd = desc(8192, 16, 1024, 1);
    sk_emu::wgmma_fence();
    sk_emu::wgmma_ss<8>(d1, ad, bd, 0, 0, 0); /* scale-d 0: D = A B = 24 (n + 1) (m + 1) */
    sk_emu::wgmma_commit();
    sk_emu::wgmma_ss<8>(d2, ad, bd, 1, 0, 0); /* D += A B */
    sk_emu::wgmma_commit();
    sk_emu::wgmma_wait(1); /* the first group only */
    for (int v = 0; v < 4; v++) {
      bad += d1[v] != D(v);
      bad += d2[v] != 5.0f; /* still pending */
    }
    sk_emu::wgmma_wait(0);
    for (int v = 0; v < 4; v++) bad += d2[v] != 5.0f + D(v);
    /* the same B read through a 64-byte-swizzle descriptor, and through the wrong SBO: other elements */
    sk_emu::wgmma_fence();
    sk_emu::wgmma_ss<8>(d3, ad, desc(8192, 16, 1024, 2), 1, 0, 0);
    sk_emu::wgmma_ss<8>(d4, desc(0, 16, 512, 1), bd, 1, 0, 0);
    sk_emu::wgmma_commit();
    sk_emu::wgmma_wait(0);
    int same3 = 0, same4 = 0;
    for (int v = 0; v < 4; v++) same3 += d3[v] == D(v), same4 += d4[v] == D(v);
    bad += same3 == 4; /* B's rows 1..7 (every lane holds one) move under another swizzle */
    bad += same4 == 4; /* A's rows 8.. (every lane holds some) move under another SBO */
  });
  char what[120];
  snprintf(what, sizeof what, "wait_group / scale-d / wrong descriptors: %d wrong", bad);
  expect(bad == 0, what);
}

/* 5. body, run in a child, must stop the run */
static void refused(const char *what, int diverge, int fence) {
  fflush(stdout);
  pid_t p = fork();
  if (p == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(3);
    sk_emu::launch(1, 1, 1, 128, 1, 1, 8192, [&]() {
      float d[4] = {0, 0, 0, 0};
      if (fence) sk_emu::wgmma_fence();
      uint64_t bd = desc(diverge && threadIdx.x >= 32 ? 1024 : 0, 16, 1024, 1);
      sk_emu::wgmma_ss<8>(d, desc(0, 16, 1024, 1), bd, 1, 0, 0);
      sk_emu::wgmma_commit();
      sk_emu::wgmma_wait(0);
    });
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  expect(WIFSIGNALED(st), what);
}

int main() {
  addresses();
  const char *mn[] = {"none", "128B", "64B", "32B"};
  for (int mode = 0; mode < 4; mode++) {
    char nm[80];
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 2; b++) {
        snprintf(nm, sizeof nm, "swizzle %s, A %s, B %s", mn[mode], a == 0 ? "K-major" : a == 1 ? "MN-major" : "registers",
                 b ? "MN-major" : "K-major");
        product<16>(mode, a, b, nm);
        product<64>(mode, a, b, nm);
      }
  }
  product<128>(1, 2, 1, "swizzle 128B, A registers, B MN-major (two 64-column atoms at LBO)");
  product<128>(1, 0, 0, "swizzle 128B, A K-major, B K-major");
  async_and_wrong();
  refused("refused: a warpgroup whose warps give different descriptors", 1, 1);
  refused("refused: a wgmma with no wgmma.fence before it", 0, 0);
  { /* and the same run with the fence and one descriptor is not */
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
      sk_emu::launch(1, 1, 1, 128, 1, 1, 8192, [&]() {
        float d[4] = {0, 0, 0, 0};
        sk_emu::wgmma_fence();
        sk_emu::wgmma_ss<8>(d, desc(0, 16, 1024, 1), desc(0, 16, 1024, 1), 1, 0, 0);
        sk_emu::wgmma_commit();
        sk_emu::wgmma_wait(0);
      });
      _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the same wgmma with a fence and one descriptor runs");
  }
  return expect_done("wgmma model checks");
}
