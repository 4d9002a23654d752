"""bench/peers/llmc_weights.py PATH — a GPT-2 124M checkpoint for llm.c's train_gpt2 with random weights.

llm.c's model file: a header of 256 int32 (magic 20240326, version 3, max_seq_len 1024, vocab_size
50257, num_layers 12, num_heads 12, channels 768, padded_vocab_size 50304), then every parameter
as float32 in llm.c's order (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw,
fcb, fcprojw, fcprojb, lnfw, lnfb). Weights N(0, 0.02), norm weights 1, biases 0 (seed 1): a step's
time does not depend on the values. For bench/cpu_peers.sh; no download needed.
"""
import sys

import numpy as np

T, V, L, H, C, Vp = 1024, 50257, 12, 12, 768, 50304
shapes = [("wte", (Vp, C)), ("wpe", (T, C)), ("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, 3 * C, C)),
          ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)),
          ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
          ("lnfw", (C,)), ("lnfb", (C,))]
rng = np.random.default_rng(1)
hdr = np.zeros(256, dtype=np.int32)
hdr[:8] = [20240326, 3, T, V, L, H, C, Vp]
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes())
    for name, shape in shapes:
        if name.endswith("w") and name.startswith("ln"):
            a = np.ones(shape, dtype=np.float32)
        elif name.endswith("b"):
            a = np.zeros(shape, dtype=np.float32)
        else:
            a = (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        f.write(a.tobytes())
