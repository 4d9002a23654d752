/* tests/train/bigram_prog.c — the bigram program's layout and tensors (bigram_prog.h). */
#include "bigram_prog.h"

static long long place(long long *top, long long bytes, long long align) {
  long long at = *top;
  *top += (bytes + align - 1) / align * align;
  return at;
}

static RtTensor tensor(const char *name, int kind, int dtype, int rank, int64_t d0, int64_t d1, int64_t off,
                       int stacked, int init, double a, double b) {
  RtTensor t = {.name = name, .kind = kind, .dtype = dtype, .rank = rank, .offset = off, .stacked = stacked,
                .init = init, .init_a = a, .init_b = b};
  t.dims[0] = d0;
  t.dims[1] = d1;
  return t;
}

void bg_program(const BgShape *s, BgLayout *L, RtTensor *tens, RtProgram *p) {
  long long top = s->base, V = s->V, al = s->align, nl = BG_LAYERS;
  *L = (BgLayout){.V = V, .VP = s->VP, .BT = (long long)s->mb * s->seq};
  L->o_wte = place(&top, V * V * 4, al);
  L->o_bias = place(&top, nl * V * 4, al);
  L->o_mw = place(&top, V * V * 4, al);
  L->o_vw = place(&top, V * V * 4, al);
  L->o_mb = place(&top, nl * V * 4, al);
  L->o_vb = place(&top, nl * V * 4, al);
  L->o_tok = place(&top, L->BT * 4, al);
  L->o_tgt = place(&top, L->BT * 4, al);
  L->o_lr = place(&top, 4, al);
  L->o_step = place(&top, 4, al);
  L->o_loss = place(&top, 4, al);
  L->o_gn = place(&top, 4, al);
  L->o_logits = place(&top, L->BT * L->VP * 4, al);
  L->o_gw = place(&top, V * V * 4, al);
  L->o_gb = place(&top, nl * V * 4, al);
  int n = 0;
  tens[n++] = tensor("wte", RT_T_PARAM, RT_F32, 2, V, V, L->o_wte, 0, RT_INIT_NORMAL, 0, 0.02);
  tens[n++] = tensor("blocks.bias", RT_T_PARAM, RT_F32, 2, nl, V, L->o_bias, 1, RT_INIT_UNIFORM, -0.01, 0.01);
  tens[n++] = tensor("adam_m:wte", RT_T_STATE, RT_F32, 2, V, V, L->o_mw, 0, 0, 0, 0);
  tens[n++] = tensor("adam_v:wte", RT_T_STATE, RT_F32, 2, V, V, L->o_vw, 0, 0, 0, 0);
  tens[n++] = tensor("adam_m:blocks.bias", RT_T_STATE, RT_F32, 2, nl, V, L->o_mb, 1, 0, 0, 0);
  /* unflagged (as codegen emits states), it is written per layer because its parameter is */
  tens[n++] = tensor("adam_v:blocks.bias", RT_T_STATE, RT_F32, 2, nl, V, L->o_vb, s->v_stacked, 0, 0, 0);
  tens[n++] = tensor("tokens", RT_T_INPUT, RT_I32, 2, s->mb, s->seq, L->o_tok, 0, 0, 0, 0);
  tens[n++] = tensor("targets", RT_T_INPUT, RT_I32, 2, s->mb, s->seq, L->o_tgt, 0, 0, 0, 0);
  tens[n++] = tensor("lr", RT_T_INPUT, RT_F32, 0, 0, 0, L->o_lr, 0, 0, 0, 0);
  tens[n++] = tensor("step", RT_T_INPUT, RT_F32, 0, 0, 0, L->o_step, 0, 0, 0, 0);
  tens[n++] = tensor("loss", RT_T_RESULT, RT_F32, 0, 0, 0, L->o_loss, 0, 0, 0, 0);
  tens[n++] = tensor("grad_norm", RT_T_RESULT, RT_F32, 0, 0, 0, L->o_gn, 0, 0, 0, 0);
  tens[n++] = tensor("grad:wte", RT_T_RESULT, RT_F32, 2, V, V, L->o_gw, 0, 0, 0, 0);
  tens[n++] = tensor("grad:blocks.bias", RT_T_RESULT, RT_F32, 2, nl, V, L->o_gb, 1, 0, 0, 0);
  *p = (RtProgram){.mem_bytes = top,
                   .mem_peak = top,
                   .batch = s->mb,
                   .seq = s->seq,
                   .vocab = V,
                   .vocab_padded = L->VP,
                   .nparams = V * V + nl * V,
                   .flops_per_token = 6.0 * (double)(V * V + nl * V),
                   .ntensors = n,
                   .tensors = tens,
                   .logits_offset = L->o_logits,
                   .recipe = {.optimizer = RT_OPT_ADAMW, .lr = 1e-2, .min_lr = 1e-3, .seed = 1337}};
}
