"""The same aot kernels through real MindSpore (PyNative and graph mode) and through aotbench, side by side.

For each case: the outputs of MindSpore in both modes against aotbench's, bit for bit, on fresh random inputs,
and the median time per call of ``net(*tensors).asnumpy()`` (MindSpore) and ``op(*arrays)`` (aotbench), measured
in alternation in this one process. Needs a Python where MindSpore is installed and aotbench importable
(``PYTHONPATH=<checkout>``); tests/mindspore/test_mindspore.py runs it that way.

Usage: PYTHONPATH=. python bench/mindspore_side_by_side.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

import numpy as np

import aotbench

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "support" / "kernels" / "ms_roundtrip.cc"
ADD_REDUCE = Path(aotbench.examples_dir()) / "add_reduce.cc"
MIX_ATTRS = {"scale": 0.37, "bias": 5, "negate": True, "label": "h\u00e9llo", "steps": [1, -2, 3],
             "weights": [0.25, -1.5], "grid": [[1, 2], [3]], "table": [[0.5], [], [2.25, -0.75]]}


def cases(rng: np.random.Generator, quick: bool) -> list[dict]:
    """(name, source:function, attrs, out dtypes, number of outputs, inputs) for every case."""
    big = 256 if quick else 1024
    found = [
        {"name": "add_reduce 4x5 (tutorial, fixed)", "func": f"{ADD_REDUCE}:CustomKernel", "attrs": {"axis": 1,
         "keep_dim": False}, "out": ("float32",), "inputs": [rng.random((4, 5), np.float32) for _ in range(2)]},
        {"name": f"add_reduce {big}x{big} axis 0", "func": f"{ADD_REDUCE}:CustomKernel", "attrs": {"axis": 0,
         "keep_dim": True}, "out": ("float32",), "inputs": [rng.random((big, big), np.float32) for _ in range(2)]},
        {"name": "AttrMix 17x5, eight attribute kinds", "func": f"{KERNELS}:AttrMix", "attrs": MIX_ATTRS,
         "out": ("float32",), "inputs": [rng.standard_normal((17, 5)).astype(np.float32)], "same_shape": True},
        {"name": "RowStats 9x13, two outputs", "func": f"{KERNELS}:RowStats", "attrs": {},
         "out": ("float32", "float32"), "inputs": [rng.standard_normal((9, 13)).astype(np.float32)]},
    ]
    for dtype in ("float32", "float64", "int32", "int64"):
        data = (rng.standard_normal((6, 11)) * 100).astype(dtype)
        found.append({"name": f"Scan 6x11 {dtype}, workspace", "func": f"{KERNELS}:Scan", "attrs": {},
                      "out": (dtype,), "inputs": [data]})
    return found


def median_call_us(fn) -> float:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return statistics.median(timer.repeat(repeat=5, number=number)) / number * 1e6


def mindspore_net(case: dict, workdir: Path):
    """A Cell around ``ops.Custom`` for this case; its kernel is copied into ``workdir`` beside the header, as
    a MindSpore user has it (MindSpore compiles it itself, with its documented command)."""
    import mindspore as ms
    from mindspore import nn, ops

    path, _, func = case["func"].partition(":")
    kernel = workdir / f"{func.lower()}_{abs(hash(case['name'])) % 10**6}{Path(path).suffix}"
    kernel.write_text(Path(path).read_text())
    (workdir / "custom_aot_extra.h").write_text(Path(aotbench.get_include(), "custom_aot_extra.h").read_text())
    reg = ops.CustomRegOp(func.lower())
    for i in range(len(case["inputs"])):
        reg = reg.input(i, f"x{i}")
    for i in range(len(case["out"])):
        reg = reg.output(i, f"y{i}")
    reg = reg.dtype_format(*[ops.DataType.None_None] * (len(case["inputs"]) + len(case["out"])))  # MindSpore needs one
    for name, value in case["attrs"].items():
        reg = reg.attr(name, "required", "all", value=value)
    info = reg.target("CPU").get_op_info()
    dtypes = tuple(getattr(ms, d) for d in case["out"])
    out_shape = (lambda s: s) if case.get("same_shape") else None
    custom = ops.Custom(f"{kernel}:{func}", out_shape, dtypes if len(dtypes) > 1 else dtypes[0], "aot",
                        reg_info=info)

    class One(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = custom

        def construct(self, x):
            return self.op(x)

    class Two(One):
        def construct(self, x, y):
            return self.op(x, y)

    return One() if len(case["inputs"]) == 1 else Two()


def run_case(case: dict, workdir: Path, timing: bool = True) -> dict:
    import mindspore as ms

    op = aotbench.Custom(case["func"], (lambda s: s) if case.get("same_shape") else None,
                         tuple(np.dtype(d) for d in case["out"]) if len(case["out"]) > 1 else np.dtype(case["out"][0]),
                         attrs=case["attrs"] or None)
    arrays = case["inputs"]
    ours = op(*arrays)
    ours = ours if isinstance(ours, tuple) else (ours,)
    row = {"case": case["name"]}
    for label, mode in (("pynative", ms.PYNATIVE_MODE), ("graph", ms.GRAPH_MODE)):
        ms.set_context(mode=mode)
        net = mindspore_net(case, workdir)
        tensors = [ms.Tensor(a) for a in arrays]

        def call(net=net, tensors=tensors):
            result = net(*tensors)
            return [t.asnumpy() for t in (result if isinstance(result, (tuple, list)) else (result,))]

        theirs = call()
        row[f"{label}_equal"] = len(theirs) == len(ours) and all(
            t.dtype == o.dtype and t.shape == o.shape and t.tobytes() == o.tobytes() for t, o in zip(theirs, ours))
        row[f"{label}_us"] = median_call_us(call) if timing else None
    row["aotbench_us"] = median_call_us(lambda: op(*arrays)) if timing else None
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 256x256 large case instead of 1024x1024")
    parser.add_argument("--no-timing", action="store_true", help="compare the outputs only")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    import mindspore as ms

    ms.set_device("CPU")
    rng = np.random.default_rng()
    rows = []
    with tempfile.TemporaryDirectory(prefix="aotbench-ms-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # MindSpore writes its compiled kernels under the working directory
        try:
            for case in cases(rng, args.quick):
                rows.append(run_case(case, Path(tmp), timing=not args.no_timing))
        finally:
            os.chdir(cwd)
    print(f"MindSpore {ms.__version__} and aotbench {aotbench.__version__}, median us per call")
    print(f"{'case':<38} {'equal (PyN/GRAPH)':<18} {'MS PyNative':>12} {'MS GRAPH':>10} {'aotbench':>10}")
    for r in rows:
        equal = f"{'yes' if r['pynative_equal'] else 'NO'} / {'yes' if r['graph_equal'] else 'NO'}"
        times = "".join(f"{t:>11.1f}" if t is not None else f"{'-':>11}" for t in
                        (r["pynative_us"], r["graph_us"], r["aotbench_us"]))
        print(f"{r['case']:<38} {equal:<18}{times}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r["pynative_equal"] and r["graph_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
