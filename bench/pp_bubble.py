#!/usr/bin/env python3
"""The measured pipeline bubble of a trainer's --trace file (runtime/ops/trace.h) and the bubble
predicted from the same run's own instruction times: per step (the first skipped: warm-up), one
rank per stage (the first rank of each pp coordinate).

measured:  the busy time is the sum of the stages' F / B / W spans (a receive's wait is not in
           them), the makespan from the first instruction's start to the last one's end over the
           stages, and the bubble 1 - busy / (pp x makespan), as the plan's prediction defines it
           (passes/pipe_sched.c).
replayed:  the step's instructions played again in each stage's measured order, each taking its
           own measured duration, with the prediction's rules (transfers free, a stage runs one
           instruction at a time): F(i) of virtual stage k starts once F(i) of k - 1 ended, B(i) of
           k once B(i) of k + 1 ended (the last virtual stage's: its own F(i), earlier in its
           order); W after its B (its order). The bubble of that timeline is what the plan would
           predict with the measured F / B / W times in place of its FLOP-proportional ones, so
           measured / replayed is the schedule model's error alone, apart from the cost model's.

steady:    the same replay with each instruction taking its kind's median duration over the steps
           (per stage, F / B / W, chunk) in place of its own: the schedule with steady times. It
           splits measured / predicted in three: measured / replayed is what the transfers and
           waits add, replayed / steady what the instructions' spread adds (a noisy run's
           makespan follows its slowest paths: the bubble of varying times exceeds that of their
           medians), steady / predicted the cost model's per-stage times against the medians.

Prints the median of the measured bubbles over the steps, their min and max, the step count, the
median of the replayed ones, that of the steady ones, and the instructions' spread: the root mean
square over the kinds of each kind's coefficient of variation (standard deviation / mean). With --times, instead, what the plan's "predicted instruction
times" lines predict, measured: per stage the median F, B (and W) span, the median transfer into
its F's and B's (the instruction's start less its producer's end, where the stage was free before the
producer ended: the wire, the receive and the work between two instructions).

    pp_bubble.py TRACE.json [--times]
"""
import json
import statistics
import sys


def replay(ins, pp):
    """Makespan of the stages' instructions (per stage, in order) replayed with their durations."""
    nchunks = 1 + max(e["args"]["chunk"] for lst in ins.values() for e in lst)
    last = nchunks * pp - 1
    end = {}  # (cat, mb, virtual stage) -> end time
    free = {s: 0.0 for s in ins}
    nxt = {s: 0 for s in ins}
    left = sum(len(v) for v in ins.values())
    while left:
        moved = False
        for s, lst in ins.items():
            while nxt[s] < len(lst):
                e = lst[nxt[s]]
                a = e["args"]
                k = a["chunk"] * pp + s
                dep = None
                if e["cat"] == "F" and k > 0:
                    dep = ("F", a["mb"], k - 1)
                elif e["cat"] == "B":
                    dep = ("B", a["mb"], k + 1) if k < last else ("F", a["mb"], k)
                if dep is not None and dep not in end:
                    break
                t0 = max(free[s], end[dep] if dep is not None else 0.0)
                free[s] = end[(e["cat"], a["mb"], k)] = t0 + e["dur"]
                nxt[s] += 1
                left -= 1
                moved = True
        if not moved:
            sys.exit("pp_bubble.py: the recorded instruction order cannot be replayed (a wait with no end)")
    return max(free.values())


def times(per_step, pp):
    """Per stage: median F / B / W spans and the median transfer into F's and B's."""
    nchunks = 1 + max(e["args"]["chunk"] for per in per_step for lst in per.values() for e in lst)
    last = nchunks * pp - 1
    dur = {(s, c): [] for s in range(pp) for c in "FBW"}
    xfer = {(s, c): [] for s in range(pp) for c in "FB"}
    for per in per_step:
        end = {}
        for s, lst in per.items():
            for e in lst:
                a = e["args"]
                end[(e["cat"], a["mb"], a["chunk"] * pp + s)] = e["ts"] + e["dur"]
        for s, lst in per.items():
            prev = None
            for e in lst:
                a = e["args"]
                k = a["chunk"] * pp + s
                dur[(s, e["cat"])].append(e["dur"])
                src = ("F", a["mb"], k - 1) if e["cat"] == "F" and k > 0 else \
                    ("B", a["mb"], k + 1) if e["cat"] == "B" and k < last else None
                if src is not None and prev is not None and src in end and prev <= end[src]:
                    xfer[(s, e["cat"])].append(e["ts"] - end[src])
                prev = e["ts"] + e["dur"]
    med = lambda v: statistics.median(v) / 1e3 if v else 0.0  # ms
    for s in range(pp):
        parts = [f"F {med(dur[(s, 'F')]):.3f} ms", f"B {med(dur[(s, 'B')]):.3f} ms"]
        if dur[(s, "W")]:
            parts.append(f"W {med(dur[(s, 'W')]):.3f} ms")
        for c, what in (("F", "activation"), ("B", "gradient")):
            if xfer[(s, c)]:
                parts.append(f"{what} in {1e3 * med(xfer[(s, c)]):.1f} us")
        print(f"stage {s}: " + ", ".join(parts))


with open(sys.argv[1]) as f:
    ev = json.load(f)["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
stage_rank = {}
for pid in sorted(names):
    st = int(names[pid].split("pp ")[1].split(",")[0])
    stage_rank.setdefault(st, pid)
pp = len(stage_rank)
ins = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("F", "B", "W") and e["pid"] in stage_rank.values()]
steps = sorted({e["args"]["step"] for e in ins})
if "--times" in sys.argv[2:]:
    per_step = []
    for k in steps[1:] if len(steps) > 1 else steps:
        mine = [e for e in ins if e["args"]["step"] == k]
        per_step.append({s: sorted((e for e in mine if e["pid"] == pid), key=lambda e: e["ts"])
                         for s, pid in stage_rank.items()})
    times(per_step, pp)
    sys.exit(0)
used = steps[1:] if len(steps) > 1 else steps
kind = lambda e: (e["pid"], e["cat"], e["args"]["chunk"])
durs = {}
for e in ins:
    if e["args"]["step"] in used:
        durs.setdefault(kind(e), []).append(e["dur"])
steady_dur = {k: statistics.median(v) for k, v in durs.items()}
cv = [statistics.pstdev(v) / statistics.mean(v) for v in durs.values() if len(v) > 1 and statistics.mean(v) > 0]
spread = (sum(c * c for c in cv) / len(cv)) ** 0.5 if cv else 0.0
out, rep, std = [], [], []
for k in used:
    mine = [e for e in ins if e["args"]["step"] == k]
    lo = min(e["ts"] for e in mine)
    hi = max(e["ts"] + e["dur"] for e in mine)
    busy = sum(e["dur"] for e in mine)
    out.append(1 - busy / (pp * (hi - lo)))
    per = {s: sorted((e for e in mine if e["pid"] == pid), key=lambda e: e["ts"]) for s, pid in stage_rank.items()}
    rep.append(1 - busy / (pp * replay(per, pp)))
    per = {s: [dict(e, dur=steady_dur[kind(e)]) for e in lst] for s, lst in per.items()}
    std.append(1 - sum(e["dur"] for lst in per.values() for e in lst) / (pp * replay(per, pp)))
print(f"{statistics.median(out):.4f} {min(out):.4f} {max(out):.4f} {len(out)} {statistics.median(rep):.4f} "
      f"{statistics.median(std):.4f} {spread:.4f}")
