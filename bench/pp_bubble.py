#!/usr/bin/env python3
"""The measured pipeline bubble of a trainer's --trace file (runtime/ops/trace.h): per step (the
first skipped: warm-up), one rank per stage (the first rank of each pp coordinate); the busy time
is the sum of its F / B / W spans (a receive's wait is not in them), the makespan from the first
instruction's start to the last one's end over the stages, and the bubble 1 - busy / (pp x
makespan), as the plan's prediction defines it (passes/pipe_sched.c). Prints the median over
steps, and the spread (min, max).

    pp_bubble.py TRACE.json
"""
import json
import statistics
import sys

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
out = []
for k in steps[1:] if len(steps) > 1 else steps:
    mine = [e for e in ins if e["args"]["step"] == k]
    lo = min(e["ts"] for e in mine)
    hi = max(e["ts"] + e["dur"] for e in mine)
    busy = sum(e["dur"] for e in mine)
    out.append(1 - busy / (pp * (hi - lo)))
print(f"{statistics.median(out):.4f} {min(out):.4f} {max(out):.4f} {len(out)}")
