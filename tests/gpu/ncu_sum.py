#!/usr/bin/env python3
"""tests/gpu/ncu_sum.py — per-kernel sums of the launches in an `ncu --csv` log (tests/gpu/session.sh's ncu
part; tested in CI by tests/gpu/ncu_sum_test.sh on a sample it has never run: tests/gpu/data/).

    ncu_sum.py [--tsv] [--top N] [BASE.csv] RUN.csv

RUN.csv: what `LC_ALL=C ncu --csv --metrics gpu__time_duration.sum[,...] PROGRAM` printed (stdout and
stderr together are fine: only lines that start with a quote are CSV). Two layouts are read:
  - the details page (ncu's default): a header naming "Kernel Name", "Metric Name", "Metric Unit" and
    "Metric Value", then a row per launch and metric; the rows of gpu__time_duration.sum are the
    launches (other metrics' rows are skipped);
  - the raw page (`--page raw`): a header whose columns are "Kernel Name" and the metrics, then a units
    row (its ID cell empty), then a row per launch.
Values are in the unit beside them (ncu scales each one: nsecond, usecond, msecond, second; ns, us, ms, s in
ncu 2025 (CUDA 13), measured on the H100), with the C
locale's thousands separators ("2,812.61"); anything else (another unit, "n/a", a decimal comma) is
refused, never read as a guess. Kernel names are CSV-quoted and may hold commas (C++ signatures).

BASE.csv: the same program run for one step fewer: its launches must be the first of RUN.csv, in order,
kernel by kernel, but for a tail after its last step (the trainer's end-of-run validation) that must be
RUN.csv's last launches, in order (else refused: the runs did not launch the same sequence); the RUN.csv
launches between are the last step's. The sums are per full kernel name (launches of one name: one line).

Output: "kernels of the last step: T ms in N launches", then the top N (default 25) kernels by time,
"%9.1f us %4d x  name" (a name over 70 characters shown as its first 40 and last 27); --tsv: every kernel, a line
each, "name<TAB>microseconds<TAB>launches", by time then name. Exit 1 with a message on bad input.
"""
import collections
import csv
import re
import sys

METRIC = "gpu__time_duration.sum"
US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,
      "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}  # the long names (ncu 2023-2024) or the short (ncu 2025+)
NUMBER = re.compile(r"^[0-9]{1,3}(,[0-9]{3})*(\.[0-9]+)?$|^[0-9]+(\.[0-9]+)?$")


class Bad(Exception):
    pass


def number(text, where):
    t = text.strip()
    if not NUMBER.match(t):
        raise Bad("%s: value %r is not a number in the C locale (run ncu with LC_ALL=C)" % (where, text))
    return float(t.replace(",", ""))


def micro(value, unit, where):
    if unit not in US:
        raise Bad("%s: unit %r of %s is not a time unit this parser knows (%s)" % (where, unit, METRIC, ", ".join(US)))
    return number(value, where) * US[unit]


def body(path, rows):
    """The rows after the header, each with where it is ("PATH: CSV row N"): a repeated header skipped,
    a row of another width refused."""
    head = rows[0]
    for n, r in enumerate(rows[1:], 2):
        if r == head:
            continue
        where = "%s: CSV row %d" % (path, n)
        if len(r) != len(head):
            raise Bad("%s: %d fields, the header has %d" % (where, len(r), len(head)))
        yield where, r


def launches(path):
    """The launches of one ncu CSV log, in order: (kernel name, microseconds)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [l for l in f if l.startswith('"')]
    except OSError as e:
        raise Bad("%s: %s" % (path, e.strerror))
    rows = list(csv.reader(lines))
    if not rows:
        raise Bad("%s: no CSV rows (is it ncu --csv output?)" % path)
    head = rows[0]
    if "Kernel Name" not in head:
        raise Bad("%s:1: the first CSV row has no \"Kernel Name\" column: %s" % (path, ",".join(head)[:120]))
    col = {name: i for i, name in enumerate(head)}
    kname = col["Kernel Name"]
    out = []
    if METRIC in col:  # the raw page: a units row, then a row per launch
        unit = None
        for where, r in body(path, rows):
            if r[kname] == "" or (col.get("ID") is not None and r[col["ID"]] == ""):
                unit = r[col[METRIC]]
                continue
            if unit is None:
                raise Bad("%s: a launch before the units row" % where)
            out.append((r[kname], micro(r[col[METRIC]], unit, where)))
    else:  # the details page: a row per launch and metric
        for need in ("Metric Name", "Metric Unit", "Metric Value"):
            if need not in col:
                raise Bad("%s:1: no \"%s\" column and no %s column" % (path, need, METRIC))
        for where, r in body(path, rows):
            if r[col["Metric Name"]] == METRIC:
                out.append((r[kname], micro(r[col["Metric Value"]], r[col["Metric Unit"]], where)))
    if not out:
        raise Bad("%s: no %s values (ncu --metrics %s)" % (path, METRIC, METRIC))
    return out


def main(argv):
    tsv, top, files = False, 25, []
    i = 0
    while i < len(argv):
        if argv[i] == "--tsv":
            tsv = True
        elif argv[i] == "--top" and i + 1 < len(argv) and argv[i + 1].isdigit():
            top = int(argv[i + 1])
            i += 1
        elif argv[i].startswith("-"):
            raise Bad("unknown option %s (usage: ncu_sum.py [--tsv] [--top N] [BASE.csv] RUN.csv)" % argv[i])
        else:
            files.append(argv[i])
        i += 1
    if len(files) not in (1, 2):
        raise Bad("usage: ncu_sum.py [--tsv] [--top N] [BASE.csv] RUN.csv")
    run = launches(files[-1])
    skip, end = 0, len(run)
    if len(files) == 2:
        base = launches(files[0])
        if len(base) >= len(run):
            raise Bad("%s has %d launches, %s %d: no step past the base" % (files[0], len(base), files[1], len(run)))
        # the base's launches are the run's first, but for its end-of-run tail (the validation both runs
        # make after their last step): that tail must be the run's last launches, in order
        pre = 0
        while pre < len(base) and base[pre][0] == run[pre][0]:
            pre += 1
        tail = base[pre:]
        if tail and [b[0] for b in tail] != [r[0] for r in run[len(run) - len(tail):]]:
            raise Bad("launch %d is %s in %s but %s in %s, and the rest of %s is not %s's end: "
                      "the runs launched different sequences" %
                      (pre + 1, base[pre][0][:60], files[0], run[pre][0][:60], files[1], files[0], files[1]))
        skip, end = pre, len(run) - len(tail)
    tot, cnt = collections.defaultdict(float), collections.Counter()
    for name, us in run[skip:end]:
        tot[name] += us
        cnt[name] += 1
    order = sorted(tot, key=lambda k: (-tot[k], k))
    if tsv:
        for k in order:
            print("%s\t%.3f\t%d" % (k, tot[k], cnt[k]))
        return 0
    print("kernels of the last step: %.2f ms in %d launches (ncu, clocks not locked)" %
          (sum(tot.values()) / 1e3, sum(cnt.values())))
    for k in order[:top]:
        print("%9.1f us %4d x  %s" % (tot[k], cnt[k], k if len(k) <= 70 else k[:40] + "..." + k[-27:]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Bad as e:
        print("ncu_sum.py: %s" % e, file=sys.stderr)
        sys.exit(1)
