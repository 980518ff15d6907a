"""``python -m aotbench``: command-line entry points (``demo``, ``doctor``, ``cache info|prune``, ``run``; more commands join as subparsers)."""

from __future__ import annotations

import argparse
import shlex
import sys
import timeit

import numpy as np

from ..run.memory import size_text


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


def cache_info(args: argparse.Namespace) -> int:
    """Print what the cache holds: totals, then the largest and the most recently used libraries."""
    import json
    import time

    from ..build import cache, cache_admin

    root = args.cache_dir if args.cache_dir is not None else cache.default_cache_dir()
    u = cache_admin.usage(root)
    if args.json:
        print(json.dumps({
            "root": str(u.root), "total_bytes": u.total_bytes, "total_files": u.total_files,
            "libraries": len(u.entries), "library_bytes": u.library_bytes, "cell_sources": u.cell_sources,
            "cell_bytes": u.cell_bytes, "tmp_files": u.tmp_files, "tmp_bytes": u.tmp_bytes,
            "index_files": u.index_files, "pch_headers": u.pch_headers, "pch_bytes": u.pch_bytes,
            "unpaired": [str(p) for p in u.unpaired],
            "entries": [{"key": e.key, "source": e.source, "size_bytes": e.size_bytes, "created": e.created,
                         "last_used": e.last_used, "library": str(e.library)} for e in u.entries],
        }, indent=2))
        return 0
    print(f"cache:     {u.root}")
    print(f"total:     {size_text(u.total_bytes)} in {u.total_files} files")
    print(f"libraries: {len(u.entries)} ({size_text(u.library_bytes)} with manifests); {u.index_files} index files; "
          f"{u.cell_sources} cell sources ({size_text(u.cell_bytes)}); {u.tmp_files} tmp files ({size_text(u.tmp_bytes)})")
    print(f"headers:   {u.pch_headers} precompiled ({size_text(u.pch_bytes)}; made again when needed)")
    for title, rows in (("largest", sorted(u.entries, key=lambda e: e.size_bytes, reverse=True)[:10]),
                        ("most recently used", u.entries[:10])):
        if rows:
            print(f"\n{title}:")
            print(f"  {'size':>10}  {'last used':<16}  key / source")
            for e in rows:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
                print(f"  {size_text(e.size_bytes):>10}  {when:<16}  {e.key}  {e.source}")
    return 0


def cache_prune(args: argparse.Namespace) -> int:
    """Remove least recently used libraries down to --max-size (or everything with --all); list what went."""
    from ..build import cache, cache_admin

    if args.max_size is None and not args.all:
        print("aotbench: nothing to prune by size: give --max-size SIZE or --all (stale temporary files and "
              "dangling index entries are cleaned either way)", file=sys.stderr)
    root = args.cache_dir if args.cache_dir is not None else cache.default_cache_dir()
    removed = cache_admin.prune(root, max_bytes=args.max_size, everything=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for path in removed:
        print(f"{verb} {path}")
    after = cache_admin.usage(root)
    print(f"{verb} {len(removed)} files; the cache {'is' if not args.dry_run else 'stays at'} "
          f"{size_text(after.total_bytes)} ({len(after.entries)} libraries)")
    return 0


def _max_size(text: str) -> int:
    from ..build.cache_admin import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


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
    sub.add_parser("run", help="run a MindSpore aot script or module (-m) with aotbench's MindSpore stand-in",
                   add_help=False)
    p = sub.add_parser("cache", help="inspect or prune the build cache")
    cache_sub = p.add_subparsers(dest="cache_command", required=True)
    for name, helptext, run in (("info", "sizes and the largest / most recent libraries", cache_info),
                                ("prune", "remove least recently used libraries, stale temporary files", cache_prune)):
        q = cache_sub.add_parser(name, help=helptext)
        q.add_argument("--cache-dir", default=None, help="build cache directory (default: AOTBENCH_CACHE_DIR or "
                       "~/.cache/aotbench)")
        q.set_defaults(run=run)
    info, prune = cache_sub.choices["info"], cache_sub.choices["prune"]
    info.add_argument("--json", action="store_true", help="print the numbers as a JSON object")
    prune.add_argument("--max-size", type=_max_size, default=None, metavar="SIZE",
                       help="keep the cache at most this big (bytes, or 500M, 2G ...), least recently used first")
    prune.add_argument("--all", action="store_true", help="remove every library, manifest, index and cell source")
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":  # python's own argument shapes (run -m pytest -q ...), parsed by hand
        from .run import run

        return run(argv[1:])
    args = build_parser().parse_args(argv)
    from ..errors import AotbenchError

    try:
        return args.run(args)
    except AotbenchError as exc:
        print(f"aotbench: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
