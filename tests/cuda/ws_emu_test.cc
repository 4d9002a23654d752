/* tests/cuda/ws_emu_test.cc — the emulator's model of a warp-specialized kernel's primitives
 * (runtime/cuda/kernels/sk_emu_ws.h) on small hand-made blocks: compiled by the host C++ compiler with
 * -DSK_EMU (tests/cuda/wgmma_emu.sh runs it after wgmma_emu_test.cc).
 *  1. a producer warpgroup handing a ring of two stages to a consumer warpgroup through FULL / EMPTY named
 *     barriers (bar.arrive by one side, bar.sync by the other), the producer's copies landing at its wait:
 *     every value the consumer reads is the round's, whichever side has the lower thread indices (waiters
 *     released by a later thread run in the next round);
 *  2. a copy read before its wait holds 0xff bytes (NaNs in bf16), the data after it;
 *  3. refused (the run stops with the error named): a wait no one completes (deadlock, with the barrier's
 *     count), thread counts that differ in one phase, a thread arriving twice in one phase, a phase left
 *     open at the block's end, copies never waited for, barrier 0, a count not a multiple of 32.
 */
#include "sk_emu.h"

#include <cstdio>
#include <functional>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "emu_expect.h"

/* 1. rounds of values through a ring of two 16-byte stages; prod_hi: the producer is warpgroup 1 */
static void handoff(bool prod_hi) {
  int bad = 0;
  sk_emu::launch(1, 1, 1, 256, 1, 1, 2 * 128 * 16, [&]() {
    unsigned char *sm = (unsigned char *)sk_emu::dyn_smem(2 * 128 * 16);
    const int t = (int)threadIdx.x, wg = t / 128, i = t % 128;
    const int ROUNDS = 5, FULL = 1, EMPTY = 3;
    if (wg == (prod_hi ? 1 : 0)) {
      for (int r = 0; r < ROUNDS; r++) {
        const int s = r % 2;
        if (r >= 2) sk_emu::named_bar(EMPTY + s, 256, true);
        uint32_t src[4] = {(uint32_t)(r * 1000 + i), 1, 2, 3};
        sk_emu::cp_async16(sm + (s * 128 + i) * 16, src, true);
        sk_emu::cp_async_commit();
        sk_emu::cp_async_wait(0);
        sk_emu::named_bar(FULL + s, 256, false);
      }
    } else {
      for (int r = 0; r < ROUNDS; r++) {
        const int s = r % 2;
        sk_emu::named_bar(FULL + s, 256, true);
        uint32_t v;
        memcpy(&v, sm + (s * 128 + (127 - i)) * 16, 4); /* another thread's copy */
        bad += v != (uint32_t)(r * 1000 + 127 - i);
        if (r + 2 < ROUNDS) sk_emu::named_bar(EMPTY + s, 256, false);
      }
    }
  });
  expect(bad == 0, prod_hi ? "hand-off through named barriers, producer warpgroup 1"
                           : "hand-off through named barriers, producer warpgroup 0");
}

/* 2. a copy before and after its wait */
static void landing() {
  uint32_t before = 0, after = 0;
  sk_emu::launch(1, 1, 1, 32, 1, 1, 32 * 16, [&]() {
    unsigned char *sm = (unsigned char *)sk_emu::dyn_smem(32 * 16);
    const int t = (int)threadIdx.x;
    uint32_t src[4] = {7, 7, 7, 7};
    sk_emu::cp_async16(sm + t * 16, src, true);
    sk_emu::cp_async_commit();
    if (t == 0) memcpy(&before, sm, 4);
    sk_emu::cp_async_wait(0);
    if (t == 0) memcpy(&after, sm, 4);
  });
  expect(before == 0xffffffffu && after == 7, "a copy holds 0xff until its wait, then the data");
}

/* 3. body, run in a child, must stop the run with an error naming want */
static void refused(const char *what, const char *want, int threads, const std::function<void()> &body) {
  fflush(stdout);
  char path[] = "/tmp/ws_emu_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    expect(false, "mkstemp");
    return;
  }
  pid_t p = fork();
  if (p == 0) {
    dup2(fd, 2);
    sk_emu::launch(1, 1, 1, (unsigned)threads, 1, 1, 1024, body);
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  std::string err;
  char buf[512];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, buf, sizeof buf)) > 0) err.append(buf, (size_t)n);
  close(fd);
  unlink(path);
  bool ok = WIFSIGNALED(st) && err.find(want) != std::string::npos;
  if (!ok) printf("  (stderr: %s)\n", err.c_str());
  expect(ok, what);
}

int main() {
  handoff(false);
  handoff(true);
  landing();
  refused("refused: a wait no one completes", "named barrier 1: 128 of 256 threads arrived", 256, []() {
    if (threadIdx.x >= 128) sk_emu::named_bar(1, 256, true);
  });
  refused("refused: thread counts that differ in one phase", "unlike the one", 256, []() {
    sk_emu::named_bar(1, threadIdx.x < 128 ? 256 : 128, threadIdx.x >= 128);
  });
  refused("refused: a thread arriving twice in one phase", "a second arrival", 256, []() {
    if (threadIdx.x < 128) sk_emu::named_bar(1, 256, false), sk_emu::named_bar(1, 256, false);
    else sk_emu::named_bar(1, 256, true);
  });
  refused("refused: a phase left open at the block's end", "phase open", 256, []() {
    if (threadIdx.x < 128) sk_emu::named_bar(2, 256, false);
  });
  refused("refused: copies never waited for", "copies not waited for", 32, []() {
    unsigned char *sm = (unsigned char *)sk_emu::dyn_smem(1024);
    uint32_t src[4] = {1, 2, 3, 4};
    sk_emu::cp_async16(sm + threadIdx.x * 16, src, true);
    sk_emu::cp_async_commit();
  });
  refused("refused: barrier 0", "outside 1 .. 15", 64, []() { sk_emu::named_bar(0, 64, true); });
  refused("refused: a count not a multiple of 32", "multiple of 32", 64, []() { sk_emu::named_bar(1, 48, true); });
  return expect_done("named barrier / copy model checks");
}
