"""bench/peers/gpt2_torch.py — the PyTorch peer of the GPU benchmarks (bench/gpu_compare.sh).

GPT-2 124M (12 layers, d 768, 12 heads, vocab 50257 padded to 50304 as llm.c does, tied
embedding), micro-batch B x T tokens of a repeated random sequence, bf16 autocast with fp32
master weights, scaled_dot_product_attention (causal, flash), fused AdamW (lr 6e-4, betas
0.9/0.95, weight decay 0.1), grad-norm clip 1.0. --model llama509: the Llama-shaped 509M model of
bench/gpu_compare.sh (8 layers, d 2048, 16 heads, 8 kv heads, SwiGLU 5632, RMSNorm, rotary theta
500000, vocab 32000, untied, no biases). Prints the median ms/step after warm-up and tokens/s, for
eager and/or torch.compile. --device cpu: fp32 throughout (no autocast), AdamW without `fused`,
--threads intra-op threads (bench/cpu_peers.sh); --device cpu --cpu-bf16: CPU autocast to bf16
(torch.autocast("cpu"): GEMMs in bf16 through oneDNN, fp32 master weights), the peer of shardc's
CPU `precision bf16`. A measurement tool, not part of shardc.

    python3 bench/peers/gpt2_torch.py [--model gpt2|llama509] [--mode eager|compile|both] [--steps 30] [-B 16] [-T 1024] [--device cuda|cpu] [--threads N] [--cpu-bf16] [--times]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab=50304, seq=1024, d=768, layers=12, heads=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if n.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class LBlock(nn.Module):
    def __init__(self, d, h, kv, ffn):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.wq, self.wk, self.wv = nn.Linear(d, d, bias=False), nn.Linear(d, kv * self.hd, bias=False), nn.Linear(d, kv * self.hd, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.w1, self.w3, self.w2 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False), nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        y = self.n1(x)
        q = self.wq(y).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.wk(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.wv(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        def rope(z):
            z1, z2 = z[..., ::2], z[..., 1::2]
            return torch.stack((z1 * cos - z2 * sin, z1 * sin + z2 * cos), dim=-1).flatten(-2)
        q, k = rope(q), rope(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.wo(y)
        y = self.n2(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Llama(nn.Module):
    def __init__(self, vocab=32000, seq=1024, d=2048, layers=8, heads=16, kv=8, ffn=5632, theta=500000.0):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LBlock(d, heads, kv, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.out = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        f = theta ** (-torch.arange(0, hd, 2).float() / hd)
        ang = torch.outer(torch.arange(seq).float(), f)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        for p in self.parameters():
            nn.init.normal_(p, 0.0, 0.02) if p.dim() == 2 else None

    def forward(self, idx, targets):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, self.cos[: idx.shape[1]], self.sin[: idx.shape[1]])
        logits = self.out(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def run(mode, steps, B, T, which="gpt2", dev="cuda", each=False, cpu_bf16=False):
    torch.manual_seed(1)
    cuda = dev == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = (GPT2(seq=T) if which == "gpt2" else Llama(seq=T)).to(dev)
    vocab = 50257 if which == "gpt2" else 32000
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    base = torch.randint(0, vocab, (4096,), device=dev)
    toks = base.repeat((B * T + 1) // 4096 + 2)
    step_fn = model
    if mode == "compile":
        step_fn = torch.compile(model)
    times, losses = [], []
    for s in range(steps):
        off = (s * B * T) % 4096
        x = toks[off:off + B * T].view(B, T)
        y = toks[off + 1:off + 1 + B * T].view(B, T)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=cuda or cpu_bf16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if each:
            print(f"step_ms {1e3 * times[-1]:.1f}", flush=True)
    steady = times[5:] if len(times) > 10 else times[1:]
    ms = 1e3 * statistics.median(steady)
    name = "GPT-2 124M" if which == "gpt2" else "llama-509m"
    print(f"pytorch {torch.__version__} {mode}: {name} B={B} T={T}: median {ms:.1f} ms/step, "
          f"{B * T / (ms / 1e3):.0f} tokens/s, {dev} {'bf16' if cuda or cpu_bf16 else 'fp32'}, loss {losses[0]:.3f} -> {losses[-1]:.3f} ({len(steady)} steps timed)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", choices=["gpt2", "llama509"])
    ap.add_argument("--mode", default="both", choices=["eager", "compile", "both"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("-B", type=int, default=16)
    ap.add_argument("-T", type=int, default=1024)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--times", action="store_true", help="print each step's time (step_ms)")
    ap.add_argument("--cpu-bf16", action="store_true", help="--device cpu: autocast to bf16")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    for m in (["eager", "compile"] if a.mode == "both" else [a.mode]):
        run(m, a.steps, a.B, a.T, a.model, a.device, a.times, a.cpu_bf16)
