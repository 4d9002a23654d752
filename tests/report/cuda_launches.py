#!/usr/bin/env python3
"""tests/report/cuda_launches.py — the kernels one training step of a CUDA program launches, counted in
the C that `shardc plan ... --target cuda --emit-c DIR` writes (its `step` function), for
tests/report/gpu_cost.sh to hold the cost model's kernel calls to.

    cuda_launches.py FILE.c

Counted: each rt_cu_launch and rt_cu_launch_tuned (one kernel each), each GEMM (rt_cu_matmul,
rt_cu_matmul_ep, rt_cu_matmul_dgelu, and rt_cu_matmul_pair, two sibling GEMMs as one strided batch
(passes/hfuse.c): one cuBLASLt call; a split-K reduction the library may add at run
time is not the program's). A `for (int64_t iN = A; iN < B; iN++)` or `(iN = A; iN >= 0; iN--)` block
multiplies what it holds by its count; the path the runtime takes by default is followed: a GEMM's
epilogue taken (the block run when rt_cu_matmul_ep or rt_cu_matmul_dgelu refuses, and the
`ep == RT_CU_EP_NONE` block, are skipped), the bias gradient after DGELU by the program's kernels
(`ep != RT_CU_EP_ALL`: run; SHARDRT_GEMM_BGRAD=split). Prints the count; exit 1 on a file it cannot
read that way.
"""
import re
import sys

FOR_UP = re.compile(r"for \(int64_t (i\d+) = (-?\d+); \1 < (-?\d+); \1\+\+\) \{$")
FOR_DOWN = re.compile(r"for \(int64_t (i\d+) = (-?\d+); \1 >= 0; \1--\) \{$")
SKIP = ("if (!rt_cu_matmul_ep(", "if (!rt_cu_matmul_dgelu(", "if (ep == RT_CU_EP_NONE) {")
KERNEL = re.compile(r"\brt_cu_(launch|launch_tuned|matmul|matmul_ep|matmul_dgelu|matmul_pair)\(")


def count(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = lines.index("static void step(char *M, RtCtx *ctx) {")
    except ValueError:
        raise SystemExit("%s: no step function (is it shardc's --emit-c output for --target cuda?)" % path)
    mult = [1]  # the multiplier of each open block
    total = 0
    for n, line in enumerate(lines[start + 1:], start + 2):
        s = line.strip()
        if s.startswith("/*") or not s:
            continue
        if s in ("}", "};"):  # (a block, or an array's initializer)
            mult.pop()
            if not mult:
                return total
            continue
        if s.startswith("}"):
            raise SystemExit("%s:%d: a block closed and opened on one line: not read" % (path, n))
        total += mult[-1] * len(KERNEL.findall(s))
        if s.endswith("{") or s.startswith("{"):  # (a block may open with a comment after it)
            m = FOR_UP.search(s)
            d = FOR_DOWN.search(s)
            if m:
                mult.append(mult[-1] * (int(m.group(3)) - int(m.group(2))))
            elif d:
                mult.append(mult[-1] * (int(d.group(2)) + 1))
            elif s.startswith(SKIP):
                mult.append(0)
            elif s.startswith("for") or s.startswith("while"):
                raise SystemExit("%s:%d: a loop this script cannot count: %s" % (path, n, s[:80]))
            else:
                mult.append(mult[-1])
    raise SystemExit("%s: the step function does not end" % path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: cuda_launches.py FILE.c")
    print(count(sys.argv[1]))
