"""``python -m aotbench``: command-line entry points (``demo``, ``doctor``; more commands join as subparsers)."""

from __future__ import annotations

import argparse
import shlex
import sys
import timeit

import numpy as np


def _median_call_us(fn, *args) -> tuple[float, int]:
    """Median per-call time in microseconds over five autoranged runs, and the calls per run."""
    timer = timeit.Timer(lambda: fn(*args))
    number, _ = timer.autorange()
    runs = timer.repeat(repeat=5, number=number)
    return float(np.median(runs)) / number * 1e6, number


def demo(args: argparse.Namespace) -> int:
    """Build the tutorial's Add + ReduceSum kernel (corrected), run it on 4x5 ones, print what happened."""
    import aotbench

    source = aotbench.examples_dir() / "add_reduce.cc"
    reg = (aotbench.CustomRegOp("reduce_kernel_cpu")
           .input(0, "x1").input(0, "x2").output(0, "y")
           .dtype_format(aotbench.DataType.None_None, aotbench.DataType.None_None, aotbench.DataType.None_None)
           .attr("axis", "required", "all", value=1)
           .attr("keep_dim", "required", "all", value=False)
           .target("CPU").get_op_info())
    op = aotbench.Custom(f"{source}:CustomKernel", None, np.float32, "aot", reg_info=reg,
                         cache_dir=args.cache_dir, force=args.force)
    x = np.ones((4, 5), dtype=np.float32)
    y = np.ones((4, 5), dtype=np.float32)
    result = op(x, y)
    built = "cache hit, compiler not run" if op.artifact.cache_hit else f"compiled in {op.artifact.build_time_s:.2f} s"
    print("aotbench demo: Add + ReduceSum (the aot tutorial's kernel, corrected), axis=1, keep_dim=False")
    print(f"compile: {shlex.join(op.command)}")
    print(f"         ({built}; library {op.artifact.path})")
    print("inputs:  x = y = np.ones((4, 5), float32)")
    print(f"result:  {result}")
    print(f"numpy:   {(x + y).sum(axis=1)}")
    op_us, n = _median_call_us(op, x, y)
    np_us, _ = _median_call_us(lambda a, b: (a + b).sum(axis=1), x, y)
    print(f"timing:  op(x, y) {op_us:.2f} us per call (median of 5 runs x {n} calls); "
          f"numpy (x + y).sum(1) {np_us:.2f} us")
    return 0 if np.array_equal(result, (x + y).sum(axis=1)) else 1


def doctor(args: argparse.Namespace) -> int:
    """Print the environment report a user pastes into a bug report (``--json``: the same as JSON)."""
    import json

    from . import doctor as doctor_module

    report = doctor_module.report(cache_dir=args.cache_dir)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m aotbench", description="aot custom-operator workbench")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="build and run the tutorial's Add+ReduceSum kernel")
    p.add_argument("--cache-dir", default=None, help="build cache directory (default: AOTBENCH_CACHE_DIR or "
                   "~/.cache/aotbench)")
    p.add_argument("--force", action="store_true", help="rebuild even if the library is cached")
    p.set_defaults(run=demo)
    p = sub.add_parser("doctor", help="print versions, compilers, GPU and cache details for a bug report")
    p.add_argument("--cache-dir", default=None, help="build cache directory to report on (default: "
                   "AOTBENCH_CACHE_DIR or ~/.cache/aotbench)")
    p.add_argument("--json", action="store_true", help="print the report as a JSON object")
    p.set_defaults(run=doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .errors import AotbenchError

    try:
        return args.run(args)
    except AotbenchError as exc:
        print(f"aotbench: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
