#!/usr/bin/env python3
# bench/ir_flops.py — the GEMM and attention FLOPs of one step of a compiled plan, counted in its final IR
# (`shardc plan ... --dump-ir`): every stage's nodes (the SPMD program holds them all: the sum over the stages),
# a loop body's times its count; sdpa 4 q k hd (causal: half), its backward 2.5 x. Recomputed nodes count
# as they run. Usage: shardc plan MODEL [-D ..] --dump-ir | python3 bench/ir_flops.py
import re, sys
shape = {}
tot = {'gemm': 0.0, 'sdpa': 0.0, 'sdpa_bwd': 0.0}
stack = []  # repeat counts
defre = re.compile(r'%(\d+) : [a-z0-9]+\[([^\]]*)\]')
def dims(s):
    return [int(x.split('=')[-1]) for x in s.split(',') if x.strip()] if s.strip() else []
for line in sys.stdin:
    code = line.split('#')[0]
    for m in defre.finditer(code.split(' = ')[0]):
        shape[m.group(1)] = dims(m.group(2))
    mult = 1
    for c in stack: mult *= c
    m = re.search(r'= repeat \S+ x(\d+)', code)
    if m:
        stack.append(int(m.group(1))); continue
    if code.strip() == '}' and stack:
        stack.pop(); continue
    m = re.search(r'%(\d+) : .*? = matmul\(%(\d+), %(\d+)[^)]*\)\s+ta=(\d) tb=(\d)', code)
    if m:
        out, a, ta = m.group(1), m.group(2), int(m.group(4))
        k = shape[a][-2] if ta else shape[a][-1]
        n = 1
        for d in shape[out]: n *= d
        tot['gemm'] += 2.0 * n * k * mult
        continue
    m = re.search(r'= (sdpa|sdpa_bwd)\(%(\d+), %(\d+)', code)
    if m:
        q, kk = shape[m.group(2)], shape[m.group(3)]
        h = int(re.search(r'heads=(\d+)', code).group(1))
        causal = 'causal=1' in code
        f = 4.0 * q[0] * q[1] * kk[1] * q[2] * (0.5 if causal else 1)
        tot[m.group(1)] += f * (2.5 if m.group(1) == 'sdpa_bwd' else 1) * mult
print(' '.join('%s %.4g' % (k, v) for k, v in tot.items()), 'total %.4g' % sum(tot.values()))
