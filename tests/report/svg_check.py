#!/usr/bin/env python3
"""tests/report/svg_check.py — reads the planner's SVGs back (compare.sh, section 5).

  svg_check.py mesh FILE             GPT-2 tp 8 x dp 4 on 4 p4d nodes: 4 nodes, 32 devices, rank r on
                                     node r // 8 with tp coordinate r % 8, in tp group r // 8 and
                                     dp group r % 8
  svg_check.py memory FILE PLAN.txt  tiny's one bar: params 482,304 B, optimizer 964,608 B (hand-
                                     computed), every class the memory table's (`shardc plan --bytes`)
  svg_check.py compare FILE TABLE.txt  zero=0..3: four memory bars (optimizer 964,608 then 482,304 B),
                                     four step bars labelled with the table's step, their parts
                                     summing to it (within its three printed digits)
Exits non-zero with the failed assertion. Every file must parse as XML (xml.etree)."""
import re
import sys
import xml.etree.ElementTree as E

NS = '{http://www.w3.org/2000/svg}'


def bars(path):
    out = []
    for g in E.parse(path).getroot().iter(NS + 'g'):
        if g.get('class') == 'bar':
            segs = {r.get('data-kind'): float(r.get('data-value')) for r in g.iter(NS + 'rect') if r.get('class') == 'seg'}
            text = [x.text for x in g.iter(NS + 'text')]
            out.append((g.get('data-label'), segs, text[-1]))
    return out


def mesh(path):
    nodes = [g for g in E.parse(path).getroot().iter(NS + 'g') if g.get('class') == 'node']
    assert len(nodes) == 4, len(nodes)
    seen = 0
    for n in nodes:
        for d in n.iter(NS + 'g'):
            if d.get('class') != 'device':
                continue
            r = int(d.get('data-rank'))
            seen += 1
            assert int(n.get('data-node')) == r // 8, (r, n.get('data-node'))
            assert (int(d.get('data-tp')), int(d.get('data-dp'))) == (r % 8, r // 8), r
            st = {s.get('data-axis'): int(s.get('data-group')) for s in d.iter(NS + 'rect') if s.get('class') == 'stripe'}
            assert st == {'tp': r // 8, 'dp': r % 8}, (r, st)
    assert seen == 32, seen


def memory(path, plan):
    table = dict(re.findall(r'^#   (parameters|gradients|optimizer state|activations|inputs) +(\d+) B',
                            open(plan).read(), re.M))
    names = {'params': 'parameters', 'grads': 'gradients', 'optimizer': 'optimizer state',
             'activations': 'activations', 'inputs': 'inputs'}
    (label, segs, _), = bars(path)
    assert segs['params'] == 482304 and segs['optimizer'] == 964608, segs
    for k, v in names.items():
        assert segs.get(k, 0) == int(table[v]), (k, segs.get(k), table[v])


def compare(path, table):
    b = bars(path)
    assert len(b) == 4 + 4 + 8, len(b)  # memory, step, checkpoint (all ranks and rank 0 per variant)
    assert [x[0] for x in b[:4]] == ['zero=0', 'zero=1', 'zero=2', 'zero=3'], b[:4]
    assert [x[1]['optimizer'] for x in b[:4]] == [964608, 482304, 482304, 482304], b[:4]
    row = re.search(r'^#   step {20}(.*)$', open(table).read(), re.M).group(1)
    steps = [s.strip() for s in re.split(r'\s{2,}', row) if s.strip()]
    assert len(steps) == 4, steps
    unit = {'s': 1, 'ms': 1e-3, 'us': 1e-6}
    for i in range(4):
        lab, segs, right = b[4 + i]
        assert lab == 'zero=%d' % i and right.startswith(steps[i] + ','), (lab, right, steps[i])
        v, u = steps[i].split()
        total = sum(segs.values())
        assert abs(total - float(v) * unit[u]) <= 0.006 * total, (total, steps[i])


if __name__ == '__main__':
    kind = sys.argv[1]
    {'mesh': mesh, 'memory': memory, 'compare': compare}[kind](*sys.argv[2:])
    print('ok:', kind, sys.argv[2])
