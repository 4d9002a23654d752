#!/usr/bin/env python3
"""Checks a trainer's --trace file (runtime/ops/trace.h): valid Chrome trace JSON, one process per
rank with its name, and per rank: STEPS steps in order, each holding the rank's pipeline
instructions in its stage's schedule order (EXPECT: per stage, a space-separated list such as
"F0 F1 B0 ..."), instructions that neither overlap nor leave their step, and an optimizer phase after
the last instruction of each step. Across ranks (one host: one time base), no instruction starts
before what it receives was made: F(i) of virtual stage k after F(i) of k - 1 ended, B(i) after
B(i) of k + 1 (the ranks of one dp x cp x tp coordinate). Exits 1 naming what is wrong.

    pp_trace.py TRACE.json WORLD PP STEPS 'STAGE0 LIST' 'STAGE1 LIST' ...
"""
import json
import sys


def fail(msg):
    print("FAIL trace:", msg)
    sys.exit(1)


def main():
    path, world, pp, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    expect = [s.split() for s in sys.argv[5:5 + pp]]
    with open(path) as f:
        doc = json.load(f)  # raises on invalid JSON: the test fails
    ev = doc.get("traceEvents")
    if not isinstance(ev, list) or not ev:
        fail("no traceEvents array")
    names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    if sorted(names) != list(range(world)):
        fail(f"process names for ranks {sorted(names)}, want 0..{world - 1}")
    for e in ev:
        if e.get("ph") == "X" and (e["dur"] < 0 or e["ts"] < 0 or not (0 <= e["pid"] < world)):
            fail(f"bad span {e}")
    for rank in range(world):
        stage = int(names[rank].split("pp ")[1].split(",")[0])
        mine = sorted((e for e in ev if e.get("ph") == "X" and e["pid"] == rank), key=lambda e: e["ts"])
        step_ev = [e for e in mine if e["name"] == "step"]
        if [e["args"]["step"] for e in step_ev] != list(range(1, steps + 1)):
            fail(f"rank {rank}: steps {[e['args']['step'] for e in step_ev]}, want 1..{steps}")
        for a, b in zip(step_ev, step_ev[1:]):
            if a["ts"] + a["dur"] > b["ts"]:
                fail(f"rank {rank}: step {a['args']['step']} overlaps the next")
        for s in step_ev if pp > 1 else []:  # one stage: the steps and the collectives only
            lo, hi = s["ts"], s["ts"] + s["dur"]
            k = s["args"]["step"]
            ins = [e for e in mine if e["cat"] in ("F", "B", "W") and e["args"]["step"] == k]
            got = [e["name"] for e in ins]
            if got != expect[stage]:
                fail(f"rank {rank} (stage {stage}) step {k}: instructions {' '.join(got)}, want {' '.join(expect[stage])}")
            if any(e["args"]["stage"] != stage for e in ins):
                fail(f"rank {rank}: an instruction of another stage")
            for a, b in zip(ins, ins[1:]):
                if a["ts"] + a["dur"] > b["ts"] + 1e-3:
                    fail(f"rank {rank} step {k}: {a['name']} overlaps {b['name']}")
            for e in ins:
                if e["ts"] < lo - 1e-3 or e["ts"] + e["dur"] > hi + 1e-3:
                    fail(f"rank {rank} step {k}: {e['name']} outside its step [{lo}, {hi}]")
            opt = [e for e in mine if e["name"] == "optimizer" and e["args"]["step"] == k]
            if len(opt) != 1 or opt[0]["ts"] < ins[-1]["ts"] + ins[-1]["dur"] - 1e-3 or opt[0]["ts"] + opt[0]["dur"] > hi + 1e-3:
                fail(f"rank {rank} step {k}: {len(opt)} optimizer phases, want one after the last instruction")
            comm = [e for e in mine if e["cat"] == "comm" and lo - 1e-3 <= e["ts"] <= hi + 1e-3]
            want = {"send pp"} if stage == 0 else {"recv pp"}
            if pp > 1 and not want <= {e["name"] for e in comm}:
                fail(f"rank {rank} step {k}: no {want} among its communication spans")
    # causality on the common clock: an instruction starts after its producer (on another rank) ended
    coords = {r: names[r].split("(")[1] for r in range(world)}  # "pp P, dp D, cp C, tp T)"
    group = {r: coords[r].split(", ", 1)[1] for r in range(world)}
    ins = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("F", "B")]
    nch = 1 + max((e["args"]["chunk"] for e in ins), default=0)
    end = {(group[e["pid"]], e["args"]["step"], e["cat"], e["args"]["mb"], e["args"]["chunk"] * pp + e["args"]["stage"]):
           e["ts"] + e["dur"] for e in ins}
    for e in ins:
        a, k = e["args"], e["args"]["chunk"] * pp + e["args"]["stage"]
        src = k - 1 if e["cat"] == "F" else k + 1
        key = (group[e["pid"]], a["step"], e["cat"], a["mb"], src)
        if 0 <= src < nch * pp and key in end and e["ts"] < end[key] - 1e-3:
            fail(f"rank {e['pid']} step {a['step']}: {e['name']} starts {end[key] - e['ts']:.1f} us before its input was made "
                 f"on virtual stage {src} (the ranks' clocks disagree)")
    n = sum(1 for e in ev if e.get("ph") == "X")
    print(f"trace {path}: {world} ranks, {n} spans" + (", every step's instructions in schedule order" if pp > 1 else ", the steps in order"))


main()
