"""bench/gpt2_tokens.py PATH [N] — N random GPT-2 token ids (seed 1) in llm.c's uint16 shard format.

The CPU benchmarks' data: a step's time does not depend on the text."""
import random
import struct
import sys

random.seed(1)
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300000
hdr = [0] * 256
hdr[0], hdr[1], hdr[2] = 20240520, 1, n
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
