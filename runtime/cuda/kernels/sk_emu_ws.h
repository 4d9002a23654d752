/* runtime/cuda/kernels/sk_emu_ws.h — the emulator's (sk_emu.h) model of what a warp-specialized kernel
 * (shardk_wgmma_ws.cuh) adds: named barriers with a thread count, copies that land only at their wait, and
 * setmaxnreg. Included by sk_emu.h; a test tool.
 *
 * Named barriers (PTX bar.sync / bar.arrive a, b: barrier a of 16, b threads, a multiple of the warp size):
 * a barrier's phase completes when b threads have arrived (bar.arrive) or arrived and wait (bar.sync); the
 * waiters then continue (a fiber switch point: the others run meanwhile). Reported, never hung on: a thread
 * count that differs from the phase's first arrival's, or not a multiple of 32, or above the block; barrier 0
 * (__syncthreads' own) or one past 15; a thread arriving twice in one phase (its second arrival would count
 * toward the phase that is still open: the GPU merges them); threads that can no longer run while some wait at
 * a barrier (sk_emu.h's deadlock error, with each waiting barrier's count); and a block that ends with a
 * phase begun but not complete (arrivals no one consumed: the next phase's count would be off).
 *
 * Copies (cp.async as the producer of shardk_wgmma_ws.cuh issues them, sk::ws_cp16): the source is read at
 * issue, the destination's 16 bytes become 0xff (bf16 NaNs) at once and take the data only when the thread's
 * wait for the copy's group (cp_async_wait) completes it, after letting the block's other threads run up to
 * their next switch point, so that a reader that does not wait for the producer's signal (or a signal given
 * before the wait) reads NaNs, as on the GPU it may read anything. A block that ends with copies not waited for is
 * reported. (sk::cp16, the other kernels' copy, lands at once.)
 *
 * setmaxnreg (moving registers between warpgroups) is a no-op here.
 */
#ifndef SK_EMU_WS_H
#define SK_EMU_WS_H

#include <vector>

namespace sk_emu {

enum { ST_NAMED_BAR = ST_DONE + 1, NBAR = 16 };

struct NamedBar {
  int count, want;      /* threads arrived in the open phase; its thread count (0: no phase open) */
  unsigned gen;         /* phases completed */
  std::vector<int> who; /* the waiting threads (bar.sync) */
};
struct WsCopy {
  unsigned char *dst;
  unsigned char data[16];
  int group;
};
struct WsState {
  unsigned long long block = 0; /* Block::blocks_run this state is of (0: none) */
  NamedBar bar[NBAR];
  unsigned arrived[NBAR][1024];      /* per thread: 1 + the phase (gen) it last arrived in */
  std::vector<WsCopy> copies[1024];  /* per thread: copies issued, not yet landed */
  int groups[1024];                  /* per thread: groups committed */
};
inline WsState &ws() {
  static thread_local WsState *s = new WsState();
  return *s;
}
/* the state of the running block (reset at its first use in a block) */
inline WsState &ws_blk() {
  WsState &s = ws();
  Block &b = fblk();
  if (s.block != b.blocks_run) {
    for (int i = 0; i < NBAR; i++) s.bar[i].count = s.bar[i].want = 0, s.bar[i].gen = 0, s.bar[i].who.clear();
    memset(s.arrived, 0, sizeof s.arrived);
    for (int t = 0; t < 1024; t++) s.copies[t].clear(), s.groups[t] = 0;
    s.block = b.blocks_run;
  }
  return s;
}

[[noreturn]] inline void ws_fail(const char *what, int id) {
  Block &b = fblk();
  fprintf(stderr, "sk_emu: block (%u,%u,%u) thread %d: %s (named barrier %d)\n", b.block_idx.x, b.block_idx.y,
          b.block_idx.z, me().linear, what, id);
  abort();
}

/* bar.arrive id, n (wait: bar.sync) */
inline void named_bar(int id, int n, bool wait) {
  WsState &s = ws_blk();
  Block &b = fblk();
  const int t = me().linear, nt = (int)(b.block_dim.x * b.block_dim.y * b.block_dim.z);
  if (id <= 0 || id >= NBAR) ws_fail("a named barrier outside 1 .. 15", id);
  if (n <= 0 || n % 32 != 0 || n > nt) ws_fail("a thread count that is not a positive multiple of 32 within the block", id);
  NamedBar &nb = s.bar[id];
  if (nb.want == 0) nb.want = n;
  else if (nb.want != n) ws_fail("a thread count unlike the one the barrier's open phase began with", id);
  if (s.arrived[id][t] == nb.gen + 1) ws_fail("a second arrival in one phase", id);
  s.arrived[id][t] = nb.gen + 1;
  if (++nb.count == nb.want) { /* the phase completes: its waiters continue */
    for (int w : nb.who) b.fibers[(size_t)w].state = ST_RUN;
    nb.who.clear();
    nb.count = nb.want = 0;
    nb.gen++;
    return;
  }
  if (wait) {
    nb.who.push_back(t);
    yield(ST_NAMED_BAR);
  }
}

/* sk_emu.h's deadlock error: each named barrier with threads waiting */
inline void named_bar_report(Block &b) {
  WsState &s = ws();
  if (s.block != b.blocks_run) return;
  for (int i = 1; i < NBAR; i++)
    if (s.bar[i].count)
      fprintf(stderr, "sk_emu:   named barrier %d: %d of %d threads arrived, %zu of them waiting\n", i,
              s.bar[i].count, s.bar[i].want, s.bar[i].who.size());
}

/* after a block: no phase left open, no copy left in flight */
inline void named_bar_end(Block &b) {
  WsState &s = ws();
  if (s.block != b.blocks_run) return;
  for (int i = 1; i < NBAR; i++)
    if (s.bar[i].count) {
      fprintf(stderr, "sk_emu: block (%u,%u,%u) ended with named barrier %d's phase open (%d of %d threads arrived)\n",
              b.block_idx.x, b.block_idx.y, b.block_idx.z, i, s.bar[i].count, s.bar[i].want);
      abort();
    }
  for (int t = 0; t < b.nthreads; t++)
    if (!s.copies[t].empty()) {
      fprintf(stderr, "sk_emu: block (%u,%u,%u) thread %d ended with %zu copies not waited for\n", b.block_idx.x,
              b.block_idx.y, b.block_idx.z, t, s.copies[t].size());
      abort();
    }
}

/* cp.async of 16 bytes (zeros when !valid) landing at the wait for its group */
inline void cp_async16(void *dst, const void *src, bool valid) {
  WsState &s = ws_blk();
  WsCopy c;
  c.dst = (unsigned char *)dst;
  if (valid) memcpy(c.data, src, 16);
  else memset(c.data, 0, 16);
  c.group = -1;
  memset(dst, 0xff, 16);
  s.copies[me().linear].push_back(c);
}
inline void cp_async_commit() {
  WsState &s = ws_blk();
  const int t = me().linear;
  for (WsCopy &c : s.copies[t])
    if (c.group < 0) c.group = s.groups[t];
  s.groups[t]++;
}
/* cp.async.wait_group n: every committed group but the n most recent lands; a switch point before (the
 * copies take their time: the block's other threads run first, up to their next switch point, so that a
 * reader that does not wait for the producer's signal runs before the data is there) */
inline void cp_async_wait(int n) {
  WsState &s = ws_blk();
  const int t = me().linear;
  bool any = false;
  for (const WsCopy &c : s.copies[t]) any |= c.group >= 0 && c.group < s.groups[t] - n;
  static const int rounds = getenv("SK_EMU_COPY_ROUNDS") ? atoi(getenv("SK_EMU_COPY_ROUNDS")) : 2;
  for (int r = 0; any && r < rounds; r++) yield(ST_RUN);
  std::vector<WsCopy> &v = s.copies[t], keep;
  for (const WsCopy &c : v) {
    if (c.group >= 0 && c.group < s.groups[t] - n) memcpy(c.dst, c.data, 16);
    else keep.push_back(c);
  }
  v.swap(keep);
}

} // namespace sk_emu

#endif
