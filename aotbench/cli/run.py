"""``python -m aotbench run SCRIPT [ARGS...]`` / ``run -m MODULE [ARGS...]``: run a MindSpore aot script as
``python`` would, with ``import mindspore`` resolving to aotbench's stand-in (:mod:`aotbench.mindspore`)."""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys

USAGE = """usage: python -m aotbench run SCRIPT [ARGS...]
       python -m aotbench run -m MODULE [ARGS...]

Runs a MindSpore aot script (or module, e.g. -m pytest test_custom_aot.py) unmodified, as python would, with
`import mindspore` resolving to aotbench's stand-in for this run only: Tensor, nn.Cell, ops.Custom(..., "aot"),
CustomRegOp, DataType, the dtypes, set_context / set_device. Kernels are built and called by aotbench (guarded
first calls, the build cache); any other MindSpore API raises an error that names it."""


def parse(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """(script, module, arguments) from ``run``'s arguments, in the shapes ``python`` itself takes."""
    if not argv or argv[0] in ("-h", "--help"):
        return None, None, []
    if argv[0] == "-m":
        if len(argv) < 2:
            raise ValueError("-m needs a module name")
        return None, argv[1], argv[2:]
    if argv[0].startswith("-m"):
        return None, argv[0][2:], argv[1:]
    if argv[0].startswith("-"):
        raise ValueError(f"unknown option {argv[0]}")
    return argv[0], None, argv[1:]


def run(argv: list[str]) -> int:
    """Run the script or module; its exit status (2 for a usage error, as python gives)."""
    try:
        script, module, rest = parse(argv)
    except ValueError as exc:
        print(f"python -m aotbench run: {exc}\n\n{USAGE}", file=sys.stderr)
        return 2
    if script is None and module is None:
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if script is not None and not os.path.exists(script):
        print(f"python -m aotbench run: can't open file {script!r}: no such file", file=sys.stderr)
        return 2
    if module is not None and not _importable(module):
        print(f"python -m aotbench run: {_missing(module)}", file=sys.stderr)
        return 2
    from ..mindspore.importer import activate

    print("aotbench run: `import mindspore` is aotbench's stand-in in this run (aot Custom ops only)",
          file=sys.stderr)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    with activate():
        try:
            return _run(script, module, rest)
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path  # as they were, for a caller in this process


#: Modules a user runs with ``run -m`` that come from PyPI under the same name: a missing one is named with its fix.
INSTALLABLE = ("pytest",)


def _importable(module: str) -> bool:
    """Whether ``module``'s top-level package is found, looking where ``python -m`` would (the current folder
    first). Only found, not imported: an ImportError inside a module that exists is the module's own to show."""
    top = module.split(".")[0]
    saved = sys.path[:]
    sys.path[0:1] = [os.getcwd()]
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path[:] = saved


def _missing(module: str) -> str:
    top = module.split(".")[0]
    if top in INSTALLABLE:
        return f"{top} is not installed in this environment: pip install {top}"
    return (f"no module named {top!r} (looked for in the current folder and this environment, as python -m does); "
            "check its name, or install it")


def _run(script: str | None, module: str | None, rest: list[str]) -> int:
    """The run itself, with ``sys.argv`` and ``sys.path[0]`` set as ``python`` sets them."""
    if module is not None:
        sys.argv = [module, *rest]  # runpy replaces argv[0] with the module's file, as python -m does
        sys.path[0:1] = [os.getcwd()]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *rest]
        sys.path[0:1] = [os.path.dirname(os.path.abspath(script))]
        runpy.run_path(script, run_name="__main__")
    return 0
