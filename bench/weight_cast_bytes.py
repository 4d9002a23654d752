#!/usr/bin/env python3
"""The bytes a training step spends on the weights' bf16 copies (issue 17, docs/performance.md).

Reads the final IR of `shardc plan ... --dump-ir=final` on stdin and counts
  - every cast f32 -> bf16 of a parameter or of a loop argument (a layer's row of a stacked weight):
    a read of 4 B and a write of 2 B per element, times the iterations of the loops around it
    (the layer loops, the accumulation region);
  - the persistent copies' writes (passes/wshadow.c): 2 B per element of each "next:bf16:" result,
    once a step (stored by the AdamW kernel beside the f32 parameter: no extra read).
Usage: build/shardc plan MODEL ... --dump-ir=final | bench/weight_cast_bytes.py
"""
import re
import sys


def numel(dims):
    n = 1
    for d in dims.split(','):
        d = d.strip()
        if d:
            n *= int(d.split('=')[-1])
    return n


types, ops, loops = {}, {}, []
cast_bytes = copy_bytes = 0
for line in sys.stdin:
    head = line.split(' = ')[0]
    for m in re.finditer(r'(%\d+) : (\w+)\[([^\]]*)\]', head):
        types[m.group(1)] = (m.group(2), m.group(3))
    d = re.match(r'\s*(%\d+) : \w+\[[^\]]*\](?:\{[^}]*\})? = (\w+)', line)
    if d:
        ops[d.group(1)] = d.group(2)
    r = re.search(r'= repeat \S+ x(\d+)', line)
    if r and line.rstrip().endswith('{') or (r and '{  #' in line):
        loops.append(int(r.group(1)))
        continue
    if re.match(r'^\s*}', line) and loops:
        loops.pop()
        continue
    c = re.search(r'(%\d+) : bf16\[([^\]]*)\](?:\{[^}]*\})? = cast\((%\d+)\)', line)
    if c and types.get(c.group(3), ('',))[0] == 'f32' and ops.get(c.group(3)) in ('param', 'arg'):
        k = 1
        for n in loops:
            k *= n
        cast_bytes += 6 * numel(c.group(2)) * k
    w = re.search(r'next:bf16:\S+ = (%\d+)', line)
    if w:
        copy_bytes += 2 * numel(types[w.group(1)][1])
print(f"weight casts: {cast_bytes / 1e9:.3f} GB a step (read 4 B + write 2 B per element); "
      f"persistent copies written by the update: {copy_bytes / 1e9:.3f} GB")
