/* tests/cuda/emu_expect.h — the checks of the emulator's hand-computed model tests (wgmma_emu_test.cc,
 * ws_emu_test.cc): each expect() counted, a failure printed with what it checked, and the summary line. */
#ifndef SHARDC_EMU_EXPECT_H
#define SHARDC_EMU_EXPECT_H

#include <cstdio>

static int fails, checks;
static void expect(bool ok, const char *what) {
  checks++;
  if (!ok) {
    fails++;
    printf("FAIL %s\n", what);
  }
}
/* prints "ok: N of M WHAT" (or FAIL) and returns main's status */
static int expect_done(const char *what) {
  printf("%s: %d of %d %s\n", fails ? "FAIL" : "ok", checks - fails, checks, what);
  return fails != 0;
}

#endif
