/* tests/train/bigram.h — a bigram language model over the offsets of one allocation, in code that
 * is both C (the CPU program of the trainer's tests and of test_cudart's `train`) and CUDA C++ (the
 * device program's kernels of test_cudart's `train`: the file is pasted into its RtCudaCode source
 * after `#define BG_FN __device__`), so the programs compute the same thing (bigram_prog.h lays
 * them out): logits[i] = wte[tokens[i]] + bias[0] + bias[1] (bias stacked,
 * 2 layers), mean softmax cross-entropy, AdamW with bias correction from the "step" input.
 * Serial on purpose (one thread): the test is about the trainer moving tensors, not the kernels.
 */
#ifndef SHARDC_TESTS_BIGRAM_H
#define SHARDC_TESTS_BIGRAM_H
#ifndef BG_FN
#define BG_FN static inline /* inline: a file may use a few of them */
#endif

typedef struct {
  long long V, VP, BT; /* vocabulary, padded logits width, tokens per step */
  long long o_wte, o_bias, o_mw, o_vw, o_mb, o_vb, o_tok, o_tgt, o_lr, o_step, o_loss, o_gn, o_logits, o_gw,
      o_gb; /* bytes from the base */
} BgLayout;

#define BG_F32(M, off) ((float *)((M) + (off)))
#define BG_I32(M, off) ((int *)((M) + (off)))

BG_FN void bg_forward(char *M, BgLayout L) {
  const int *tok = BG_I32(M, L.o_tok);
  const float *wte = BG_F32(M, L.o_wte), *bias = BG_F32(M, L.o_bias);
  float *lg = BG_F32(M, L.o_logits);
  for (long long i = 0; i < L.BT; i++) {
    float *row = lg + i * L.VP;
    for (long long v = 0; v < L.V; v++) row[v] = wte[tok[i] * L.V + v] + bias[v] + bias[L.V + v];
    for (long long v = L.V; v < L.VP; v++) row[v] = 0;
  }
}

/* Mean cross-entropy; with grad, the logits become d loss / d logits. */
BG_FN float bg_xent(char *M, BgLayout L, int grad) {
  const int *tgt = BG_I32(M, L.o_tgt);
  float *lg = BG_F32(M, L.o_logits), loss = 0;
  for (long long i = 0; i < L.BT; i++) {
    float *row = lg + i * L.VP, mx = row[0], sum = 0;
    for (long long v = 1; v < L.V; v++) mx = row[v] > mx ? row[v] : mx;
    for (long long v = 0; v < L.V; v++) sum += expf(row[v] - mx);
    loss += logf(sum) + mx - row[tgt[i]];
    if (grad) {
      for (long long v = 0; v < L.V; v++) row[v] = expf(row[v] - mx) / sum / (float)L.BT;
      row[tgt[i]] -= 1.0f / (float)L.BT;
    }
  }
  return loss / (float)L.BT;
}

BG_FN void bg_adamw(float *p, const float *g, float *m, float *v, long long n, float lr, float t) {
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.01f;
  float c1 = 1 - powf(b1, t), c2 = 1 - powf(b2, t);
  for (long long i = 0; i < n; i++) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * ((m[i] / c1) / (sqrtf(v[i] / c2) + eps) + wd * p[i]);
  }
}

BG_FN void bg_step(char *M, BgLayout L) {
  bg_forward(M, L);
  *BG_F32(M, L.o_loss) = bg_xent(M, L, 1);
  const int *tok = BG_I32(M, L.o_tok);
  float *gw = BG_F32(M, L.o_gw), *gb = BG_F32(M, L.o_gb), *lg = BG_F32(M, L.o_logits);
  for (long long i = 0; i < L.V * L.V; i++) gw[i] = 0;
  for (long long i = 0; i < 2 * L.V; i++) gb[i] = 0;
  for (long long i = 0; i < L.BT; i++)
    for (long long v = 0; v < L.V; v++) {
      float d = lg[i * L.VP + v];
      gw[tok[i] * L.V + v] += d;
      gb[v] += d;
      gb[L.V + v] += d;
    }
  double ss = 0;
  for (long long i = 0; i < L.V * L.V; i++) ss += (double)gw[i] * gw[i];
  for (long long i = 0; i < 2 * L.V; i++) ss += (double)gb[i] * gb[i];
  *BG_F32(M, L.o_gn) = (float)sqrt(ss);
  float lr = *BG_F32(M, L.o_lr), t = *BG_F32(M, L.o_step);
  bg_adamw(BG_F32(M, L.o_wte), gw, BG_F32(M, L.o_mw), BG_F32(M, L.o_vw), L.V * L.V, lr, t);
  bg_adamw(BG_F32(M, L.o_bias), gb, BG_F32(M, L.o_mb), BG_F32(M, L.o_vb), 2 * L.V, lr, t);
}

BG_FN void bg_eval(char *M, BgLayout L) {
  bg_forward(M, L);
  *BG_F32(M, L.o_loss) = bg_xent(M, L, 0);
}

#endif
