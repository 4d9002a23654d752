# bench/pp_gaps.py TRACE.json: from a trainer's --trace (Chrome trace JSON), per rank over the steps
# after the first: the median F and B durations (us), and the median per step of the time between
# the rank's pipeline instructions not spent in a receive (us). bench/pp_fold.sh prints it.
import json, sys, statistics, collections
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
by = collections.defaultdict(list)
for e in ev:
    if e.get('ph') == 'X' and e.get('args', {}).get('step', 1) > 1:
        by[(e['pid'], e['args']['step'])].append(e)
out = []
for rank in sorted({k[0] for k in by}):
    F, B, between = [], [], []
    for (r, st), es in by.items():
        if r != rank: continue
        ins = sorted([e for e in es if e['name'][0] in 'FBW' and e['name'][1:].isdigit()], key=lambda e: e['ts'])
        recv = [e for e in es if e['name'].startswith('recv')]
        F += [e['dur'] for e in ins if e['name'][0] == 'F']
        B += [e['dur'] for e in ins if e['name'][0] == 'B']
        gap = 0
        for a, b in zip(ins, ins[1:]):
            lo, hi = a['ts'] + a['dur'], b['ts']
            w = sum(max(0, min(hi, x['ts'] + x['dur']) - max(lo, x['ts'])) for x in recv)
            gap += max(0, hi - lo - w)
        between.append(gap)
    out.append('rank %d: F %.0f B %.0f between %.0f' % (rank, statistics.median(F), statistics.median(B), statistics.median(between)))
print('; '.join(out))
