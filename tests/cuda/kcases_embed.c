/* tests/cuda/kcases_embed.c — the kernel cases of the embedding, forward and backward (whole and vocab-sharded; the
 * bucketed backward and the one-pass variant's, bit for bit the same); the rest and the driver in kcases.c, whose
 * header comment states the tolerances. */
#include <stdlib.h>
#include <string.h>

#include "kcases.h"

#include "kcases_int.h"

/* ---- embeddings ---------------------------------------------------------------------------------------- */

void kc_cases_embed(KC *c) {
  /* d 100: embed_bwd scanning the ids; d a multiple of 8: by buckets (sorted in shared memory; n 3000 with most
   * ids on 3 rows: a bucket past the shared-memory sort's 2048 keys, sorted in device memory). One-pass
   * (embed_bwd_own): n 3000 puts 2400 hits in one block, past its 1504 in shared memory (the warps' scans of the
   * ids); n 9001 (ids spread: about 9 a row, 45 sharded) two chunks of ids, the last id alone (scalar loads), 32
   * blocks of 32 rows. */
  struct {
    int64_t n, d, V;
  } ec[] = {{300, 100, 97}, {300, 96, 97}, {3000, 16, 150}, {9001, 8, 1000}};
  for (size_t t = 0; t < sizeof ec / sizeof ec[0]; t++) {
    for (int bfv = 0; bfv < 2; bfv++) {
      DType dt = bfv ? DT_BF16 : DT_F32;
      for (int sharded = 0; sharded < 2; sharded++) {
        int64_t n = ec[t].n, d = ec[t].d, V = ec[t].V, row0 = sharded ? 40 : 0, Vall = sharded ? 200 : V;
        float *table = fvec(c, V * d, 1.0f), *dy = fvec(c, n * d, 1.0f);
        if (n > 1000 && n < 5000) /* 800 hits a row: dy in multiples of 1/256, so that every partial sum is exact
                                     in f32 (|sum| <= 800: 18 bits) and any order gives the double reference's
                                     value; the rounding of a long sum would otherwise decide the check (it
                                     failed at 1.5e-5 against 1.3e-5 on one draw of the data) */
          for (int64_t i = 0; i < n * d; i++) dy[i] = (float)((int)(dy[i] * 256.0f)) / 256.0f;
        round_to(dt, table, V * d);
        round_to(dt, dy, n * d);
        int32_t *idx = arena_alloc(c->a, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
          idx[i] = (int32_t)(n > 1000 && n < 5000 && i % 5 ? row0 + 3 + i % 3 : (i * 7919 + i / 3) % Vall);
        idx[5] = idx[6] = idx[200] = (int32_t)(row0 + 3); /* a repeated row */
        KT tt = kt_new(c, dt, V * d), ti = kt_new(c, DT_I32, n), ty = kt_new(c, dt, n * d), tdy = kt_new(c, dt, n * d),
           tdt = kt_new(c, dt, V * d);
        kt_put(c, tt, table);
        kt_put_i32(c, ti, idx);
        kt_put(c, tdy, dy);
        const char *r0 = sharded ? "40" : "0";
        run(c, cuk_embed(c->k, P(c, ty), dt, P(c, tt), dt, P(c, ti), n, d, V, r0));
        run(c, cuk_embed_bwd(c->k, P(c, tdt), dt, P(c, ti), P(c, tdy), dt, n, d, V, r0));
        KT tdt2 = kt_new(c, dt, V * d); /* determinism: again into another buffer */
        run(c, cuk_embed_bwd(c->k, P(c, tdt2), dt, P(c, ti), P(c, tdy), dt, n, d, V, r0));
        if (!c->be) continue;
        float *y = kt_get(c, ty), *dtab = kt_get(c, tdt);
        float *ry = arena_alloc(c->a, (size_t)(n * d) * 4), *rdt = arena_alloc(c->a, (size_t)(V * d) * 4);
        double *acc = calloc((size_t)(V * d), sizeof(double));
        for (int64_t i = 0; i < n; i++) {
          int64_t r = idx[i] - row0;
          for (int64_t j = 0; j < d; j++) {
            ry[i * d + j] = r >= 0 && r < V ? table[r * d + j] : 0.0f;
            if (r >= 0 && r < V) acc[r * d + j] += dy[i * d + j];
          }
        }
        for (int64_t i = 0; i < V * d; i++) rdt[i] = (float)acc[i];
        free(acc);
        const char *tag =
            arena_printf(c->a, "n %lld d %lld %s%s", (long long)n, (long long)d, dn(dt), sharded ? " sharded" : "");
        cmp(c, arena_printf(c->a, "embed %s", tag), y, ry, n * d, 0, 0);
        cmp(c, arena_printf(c->a, "embed_bwd %s", tag), dtab, rdt, V * d, tol(dt), bfv ? 1e-2 : 1e-5);
        expect(c, arena_printf(c->a, "embed_bwd deterministic %s", tag),
               memcmp(dtab, kt_get(c, tdt2), (size_t)(V * d) * 4) == 0);
        if (c->variant == CUK_VAR_ONE) { /* the sums in the same order as the default's: the same bits */
          KT tdt3 = kt_new(c, dt, V * d);
          cuk_set_variant(c->k, CUK_VAR_DEFAULT);
          run(c, cuk_embed_bwd(c->k, P(c, tdt3), dt, P(c, ti), P(c, tdy), dt, n, d, V, r0));
          cuk_set_variant(c->k, CUK_VAR_ONE);
          expect(c, arena_printf(c->a, "embed_bwd %s: the default's bits", tag),
                 memcmp(dtab, kt_get(c, tdt3), (size_t)(V * d) * 4) == 0);
        }
        expect(c, arena_printf(c->a, "embed %s: no error flag", tag), dev_flag(c) == 0);
      }
    }
  }
  { /* y one element past 16-byte alignment: embed_vec's element-by-element path */
    int64_t n = 20, d = 16, V = 30;
    float *table = fvec(c, V * d, 1.0f);
    round_to(DT_BF16, table, V * d);
    int32_t idx[20];
    for (int i = 0; i < 20; i++) idx[i] = (i * 7) % 30;
    KT tt = kt_new(c, DT_BF16, V * d), ti = kt_new(c, DT_I32, n), ty = kt_new(c, DT_BF16, n * d + 1);
    kt_put(c, tt, table);
    kt_put_i32(c, ti, idx);
    run(c, cuk_embed(c->k, arena_printf(c->a, "(b%d + 2)", ty.id), DT_BF16, P(c, tt), DT_BF16, P(c, ti), n, d, V, "0"));
    if (c->be) {
      float *ref = arena_alloc(c->a, (size_t)(n * d) * 4);
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) ref[i * d + j] = table[idx[i] * d + j];
      cmp(c, "embed bf16 misaligned", kt_get(c, ty) + 1, ref, n * d, 0, 0);
    }
  }
  { /* an id out of range raises the flag */
    int64_t n = 4, d = 8, V = 10;
    KT tt = kt_new(c, DT_F32, V * d), ti = kt_new(c, DT_I32, n), ty = kt_new(c, DT_F32, n * d);
    int32_t idx[4] = {1, 2, 10, 3};
    kt_put_i32(c, ti, idx);
    run(c, cuk_embed(c->k, P(c, ty), DT_F32, P(c, tt), DT_F32, P(c, ti), n, d, V, "0"));
    expect(c, "embed: an id >= V sets the error flag", dev_flag(c) == CUK_ERR_EMBED_ID);
  }
}

