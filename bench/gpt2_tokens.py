"""bench/gpt2_tokens.py PATH [N] [--vocab V] [--repeat P] — N random token ids below V (default 50257,
GPT-2's; seed 1) in llm.c's uint16 shard format; with --repeat P, a random sequence of P ids repeated to
N (the GPU runs' data: the loss must fall well below ln V).

The benchmarks' data: a step's time does not depend on the text."""
import argparse
import random
import struct

ap = argparse.ArgumentParser()
ap.add_argument("path")
ap.add_argument("n", nargs="?", type=int, default=300000)
ap.add_argument("--vocab", type=int, default=50257)
ap.add_argument("--repeat", type=int, default=0)
a = ap.parse_args()
random.seed(1)
if a.repeat > 0:
    base = [random.randrange(a.vocab) for _ in range(a.repeat)]
    toks = (base * (a.n // a.repeat + 1))[:a.n]
else:
    toks = [random.randrange(a.vocab) for _ in range(a.n)]
hdr = [0] * 256
hdr[0], hdr[1], hdr[2] = 20240520, 1, len(toks)
with open(a.path, "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % len(toks), *toks))
