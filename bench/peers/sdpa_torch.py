"""bench/peers/sdpa_torch.py — the peers of shardc's attention kernels: PyTorch's
scaled_dot_product_attention on each backend it has (FlashAttention-2 "flash", cuDNN's fused
attention "cudnn", xFormers' memory-efficient kernel "efficient") and FlashAttention-3 when its
package (flash_attn_interface) is installed, at the shapes of cuda_kernels_gpu's attention sweep
(tests/cuda/flash_sweep.c): bf16, causal, T 1024; GPT-2's H 12, hd 64 at B 8 and 16, and the 509M
Llama shape's H 16, KV 8, hd 128 at B 8.

Counted as flash_sweep.c counts: causal FLOPs, forward 4 B H T^2 hd / 2, the backward 2.5x the
forward (5 products to the forward's 2), forward + backward 3.5x over both times (issue 17's 300
TFLOP/s). Times are CUDA-event medians of --iters runs after --warmup, the backward timed alone
(torch.autograd.grad of the output against a fixed dO, the forward outside the timed region).
Each backend's output is checked against the math backend in fp32 before it is timed (max
|err| / (|ref| + 1e-2) <= 2e-2 forward, 5e-2 for the gradients, the bf16 tolerances of the
sweep's checks); a backend that refuses the shape or fails the check prints why and is not timed.
A measurement tool, not part of shardc.

    python3 bench/peers/sdpa_torch.py [--iters 20] [--warmup 5] [--shapes gpt2b8,gpt2b16,llama]
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

SHAPES = {  # name: (B, T, H, KV, hd)
    "gpt2b8": (8, 1024, 12, 12, 64),
    "gpt2b16": (16, 1024, 12, 12, 64),
    "llama": (8, 1024, 16, 8, 128),
}


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)  # us
    return statistics.median(ts)


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]

    def run(q, k, v):  # q [B, H, T, hd], k / v [B, KV, T, hd]
        with sdpa_kernel([be]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
    return run


def fa3():
    try:
        import flash_attn_interface as fi  # FlashAttention-3 (hopper/), not PyTorch's own
    except ImportError:
        return None

    def run(q, k, v):  # its layout is [B, T, H, hd]
        o = fi.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        o = o[0] if isinstance(o, tuple) else o
        return o.transpose(1, 2)
    return run


def rel_err(x, ref):
    return ((x.float() - ref).abs() / (ref.abs() + 1e-2)).max().item()


def one(shape, name, run, iters, warmup, ref):
    B, T, H, KV, hd = shape
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(B, H, T, hd, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, KV, T, hd, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, KV, T, hd, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    do = torch.randn(B, H, T, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    try:
        o = run(q, k, v)
        grads = torch.autograd.grad(o, (q, k, v), do)
    except Exception as e:  # the backend refuses this shape (or is not built in)
        print("  %-10s refused: %s" % (name, str(e).splitlines()[0][:160]))
        return
    # the check on the first batch, against the math backend in fp32 (B 1: the batch is only the grid)
    sl = (slice(0, 1),)
    o1, g1 = ref(q[sl], k[sl], v[sl], do[sl])
    ef = rel_err(o[sl], o1)
    eg = max(rel_err(a[sl], b) for a, b in zip(grads, g1))
    if ef > 2e-2 or eg > 5e-2:
        print("  %-10s FAILED its check: forward %.3g, gradients %.3g (of |ref| + 1e-2)" % (name, ef, eg))
        return
    fwd = timed(lambda: run(q, k, v), iters, warmup)
    o = run(q, k, v)
    bwd = timed(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), iters, warmup)
    fa = 4.0 * B * H * T * T * hd / 2
    print("  %-10s fwd %8.1f us %6.1f TFLOP/s   bwd %8.1f us %6.1f TFLOP/s   fwd+bwd %6.1f TFLOP/s   "
          "(check: fwd %.2g, grads %.2g)" % (name, fwd, fa / fwd * 1e-6, bwd, 2.5 * fa / bwd * 1e-6,
                                             3.5 * fa / (fwd + bwd) * 1e-6, ef, eg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--shapes", default="gpt2b8,gpt2b16,llama")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("sdpa_torch.py: no CUDA device")
    print("torch %s, cuDNN %s, %s" % (torch.__version__, torch.backends.cudnn.version(),
                                      torch.cuda.get_device_name()))
    math_run = sdpa_backend("math")

    def ref(q, k, v, do):  # fp32 math backend: the reference
        qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
        o = math_run(qf, kf, vf)
        return o.detach(), torch.autograd.grad(o, (qf, kf, vf), do.float())

    runs = [(n, sdpa_backend(n)) for n in ("flash", "cudnn", "efficient")]
    f3 = fa3()
    if f3:
        runs.append(("fa3", f3))
    else:
        print("(FlashAttention-3's flash_attn_interface is not installed: not timed)")
    for s in a.shapes.split(","):
        B, T, H, KV, hd = SHAPES[s]
        print("%s: bf16 B%d T%d H%d KV%d hd%d causal" % (s, B, T, H, KV, hd))
        for name, run in runs:
            one(SHAPES[s], name, run, a.iters, a.warmup, ref)


if __name__ == "__main__":
    main()
