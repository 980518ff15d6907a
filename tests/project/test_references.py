"""Every cross-reference in the package's docstrings and comments and in the docs (``:mod:``, ``:func:``,
``:class:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``) names something that exists, so a reader following
one lands on the code it describes; and so does every backticked module name and path of README.md,
CONTRIBUTING.md and the documentation site's pages (docs/**/*.md), none of them from the layout before issue 24
(:func:`walkthrough_problem`)."""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import re
from pathlib import Path

import pytest

import aotbench

PACKAGE = Path(aotbench.__file__).resolve().parent
ROOT = PACKAGE.parent
ROLE = re.compile(r":(mod|func|class|meth|attr|data|exc|obj):`~?([^`<>\s]+)`")
# The documentation site's pages (docs/**/*.md; not what a build wrote under docs/_build)
SITE = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.relative_to(ROOT / "docs").parts)
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *SITE, *sorted((ROOT / "notebooks").glob("*.md"))]
# Names that are not aotbench's: the standard library, numpy, IPython ... (resolved by importing them)
FOREIGN = ("numpy", "np.", "IPython", "ipywidgets", "cupy", "matplotlib", "dask", "concurrent", "multiprocessing",
           "ctypes", "warnings", "threading", "os.", "pickle", "weakref", "faulthandler", "signal", "mindspore")


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve_dotted(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - a module that cannot import here (cupy ...) still exists
            return True
        for attr in parts[cut:]:
            if attr.endswith("()"):
                attr = attr[:-2]
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                annotations = getattr(obj, "__annotations__", {}) if isinstance(obj, type) else {}
                slots = getattr(obj, "__slots__", ()) if isinstance(obj, type) else ()
                dataclass_fields = getattr(obj, "__dataclass_fields__", {})
                if attr in annotations or attr in slots or attr in dataclass_fields:
                    return True
                return False
        return True
    return False


def resolves(name: str, context: str | None) -> bool:
    """Whether ``name`` names something: as a full dotted name, relative to ``context`` (the module the
    reference is in, and its package), or relative to the top-level package."""
    name = name.rstrip(".,;:")
    if name.startswith(FOREIGN) or hasattr(builtins, name.split(".")[0]):
        return True
    candidates = [name]
    if name.startswith(".") and context:
        package = context.split(".")
        dots = len(name) - len(name.lstrip("."))
        candidates = [".".join(package[: len(package) - dots + cut] + [name.lstrip(".")]) for cut in (0, 1)]
    elif context:
        package = context.split(".")
        candidates += [".".join(package[:i] + [name]) for i in range(len(package), 0, -1)]
        module = importlib.import_module(context)  # a method or attribute of one of the module's classes
        candidates += [f"{context}.{cls}.{name}" for cls, obj in vars(module).items()
                       if isinstance(obj, type) and obj.__module__ == context]
    candidates.append(f"aotbench.{name}")
    return any(_resolve_dotted(c) for c in candidates if c)


def references() -> list[tuple[str, str | None, str]]:
    """(where, context module, name) for every reference in the package and the docs."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_of(path)
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for _, name in ROLE.findall(line):
                found.append((f"{path.relative_to(ROOT)}:{lineno}", module, name))
    for path in DOCS:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for _, name in ROLE.findall(line):
                found.append((f"{path.relative_to(ROOT)}:{lineno}", None, name))
    return found


def test_there_are_references_to_check():
    assert len(references()) > 100


def test_every_reference_resolves():
    broken = [f"{where}: {name}" for where, context, name in references() if not resolves(name, context)]
    assert broken == [], f"{len(broken)} references name nothing:\n" + "\n".join(broken)


@pytest.mark.parametrize("name, context, ok", [
    ("aotbench.run.plan_cache.PlanCache.call", None, True),
    ("aotbench.run.plan_cache.PlanCache.nothing", None, False),
    ("aotbench.plan", None, False),  # a module of an old layout
    ("plan.make_plan", "aotbench.run.kernel", True),  # relative to the module's package
    (".plan.signature_key", "aotbench.run.kernel", True),
    ("Op.check", "aotbench.op.op", True),
    ("reload_from", "aotbench.op.op", True),  # a method of a class of the module
    (".pch", "aotbench.build.cache", True),  # a sibling module
    ("numpy.ndarray", None, True),
])
def test_the_resolver_tells_real_names_from_stale_ones(name, context, ok):
    assert resolves(name, context) is ok


# -- backticked names and paths in README.md, CONTRIBUTING.md and the site's pages ---------------------------------
# The walk-throughs name code in backticks, not in Sphinx roles; these checks keep those names true.

WALKTHROUGHS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *SITE]
LAYER_NAMES = ("native", "build", "spec", "run", "op", "tools", "mindspore", "notebook", "cli", "aotbench",
               "errors", "plots")  # the layers' folders, the package, and its top-level modules
OLD_MODULES = ("abi", "call", "device", "safety", "measure", "custom", "travel", "codeview")  # before issue 24
OLD_FOLDERS = ("abi", "call", "device", "safety", "measure", "codeview")
OLD_FILES = ("custom.py", "travel.py")  # top-level modules then; op/custom.py and op/travel.py now
OLD_NAMES = re.compile(r"\bget_host\b|\bnative_host\b|(?<![\w.])Host\.")
# Dotted names under a layer's name that are not aotbench's: named on purpose, each with the reason.
NOT_AOTBENCH = {
    "mindspore.ops.Add": "real MindSpore's op, named as one the stand-in refuses",
    "notebook.codeMimetype": "JupyterLab's setting for a code cell's language",
}
SPAN = re.compile(r"`([^`]+)`")
LEADING_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")
FILE_SUFFIXES = (".py", ".cc", ".cu", ".h", ".c", ".ts", ".mjs", ".md", ".json", ".ipynb", ".toml")


@functools.cache
def _op_attributes() -> frozenset[str]:
    """What an op has: the class's attributes, and those its methods set on ``self``."""
    from aotbench.op.op import Op

    assigned = re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=(?!=)", inspect.getsource(Op))
    return frozenset(dir(Op)) | frozenset(assigned)


def _is_path(span: str) -> bool:
    return bool(PATH.fullmatch(span)) and ("/" in span or span.endswith(FILE_SUFFIXES))


def walkthrough_problem(span: str) -> str | None:
    """What is wrong with a backticked span of README.md, CONTRIBUTING.md or a page of docs/, or None.

    The rule, kept simple:

    * a path (``run/plan.py``, ``aotbench/run/plan.py``, ``native/src/runtime.cc``, ``tests/run/test_guard.py``:
      a ``/`` or a file suffix, nothing else than name characters) must not start with a folder of the old
      layout (``abi/``, ``call/`` ...) nor be one of its top-level files (``custom.py``); one whose first folder
      is a folder of the repository or of the package must exist there. Others (``tmp/``, a cache folder;
      ``scripts/build.mjs``, relative to the section's folder) are left alone;
    * otherwise the dotted name the span starts with (``run.plan.make_plan``; ``op.op(x, y)`` gives
      ``op.op``) must not start with a module of the old layout (``abi.``, ``safety.`` ...); when it starts with
      a layer's name it must resolve with ``aotbench.`` in front, but ``op.NAME`` may also be an attribute of an
      op (the tutorial's variable: ``op.bench``, ``op.artifact.manifest``), and :data:`NOT_AOTBENCH` lists the
      few names under a layer's name that are someone else's (real MindSpore's ``mindspore.ops.Add``);
    * ``Op.NAME`` must be an attribute of :class:`~aotbench.op.op.Op` (an ``Op.`` is the class, never a module);
    * nowhere ``get_host``, ``native_host`` or ``Host.`` (the runtime's old names).

    Other names (``Plan.fill``, ``KernelLibrary.signals``) are not checked.
    """
    if OLD_NAMES.search(span):
        return "an old name (the runtime is native.runtime.Runtime, from build.native_runtime.get_runtime)"
    if _is_path(span):
        first = span.split("/")[0]
        if first in OLD_FOLDERS or span in OLD_FILES:
            return "a path of the layout before issue 24"
        if "/" in span and not first.startswith(".") and any((base / first).is_dir() for base in (ROOT, PACKAGE)):
            if not any((base / span).exists() for base in (ROOT, PACKAGE)):
                return "no such file or folder"
        return None
    match = LEADING_NAME.match(span)
    if match is None:
        return None
    name = match.group(0)
    first, _, rest = name.partition(".")
    if first in OLD_MODULES:
        return "a module of the layout before issue 24"
    if first == "Op":
        return None if rest.split(".")[0] in _op_attributes() else "Op has no such attribute"
    if first not in LAYER_NAMES or name in NOT_AOTBENCH:
        return None
    if _resolve_dotted(name if first == "aotbench" else f"aotbench.{name}"):
        return None
    if first == "op" and rest.split(".")[0] in _op_attributes():
        return None
    return "names nothing in aotbench"


def walkthrough_spans() -> list[tuple[str, str]]:
    """(where, span) for every backticked span of README.md, CONTRIBUTING.md and docs/**/*.md: fenced code
    blocks left out, a span wrapped over two lines read as one (its white space collapsed)."""
    found = []
    for path in WALKTHROUGHS:
        lines, fenced = [], False
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                line = ""
            lines.append("" if fenced else line)
        text = "\n".join(lines)
        for match in SPAN.finditer(text):
            lineno = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(ROOT)}:{lineno}", " ".join(match.group(1).split())))
    return found


def test_there_are_walkthrough_names_to_check():
    spans = [span for _, span in walkthrough_spans()]
    assert sum(1 for s in spans if _is_path(s)) > 20
    assert sum(1 for s in spans if LEADING_NAME.match(s) and s.split(".")[0] in LAYER_NAMES) > 100
    site = [span for where, span in walkthrough_spans() if where.startswith("docs/")]
    assert sum(1 for s in site if _is_path(s)) > 10 and sum(1 for s in site if s.startswith("op.")) > 20


def test_the_walkthroughs_name_only_what_exists():
    broken = [f"{where}: `{span}`: {problem}" for where, span in walkthrough_spans()
              if (problem := walkthrough_problem(span)) is not None]
    assert broken == [], f"{len(broken)} stale names in the docs:\n" + "\n".join(broken)


@pytest.mark.parametrize("span, ok", [
    ("run.plan.make_plan", True),
    ("aotbench.run.plan_cache.PlanCache.call", True),
    ("run.plan.make_plans", False),  # a typo, or a function since renamed
    ("abi.host.Host", False),  # the old layout's module
    ("safety.check.check", False),
    ("custom._from_spec", False),  # custom.py was top-level; now op.custom._from_spec
    ("op.custom._from_spec", True),
    ("op.op(x, y)", True),  # the tutorial's call: op.op is a module too
    ("op.bench(*args)", True),  # an op's method, on the tutorial's variable
    ("op.artifact.manifest[\"arch_reason\"]", True),  # an op's property: what follows is its value's
    ("op.nothing", False),
    ("Op.check", True),  # the class, not the layer
    ("Op._call_slow", False),  # a method the op no longer has
    ("mindspore.ops.Custom", True),  # the stand-in's
    ("mindspore.ops.Add", True),  # real MindSpore's, allowed by name
    ("mindspore.nn.Dense", False),
    ("build.native_host.get_host", False),
    ("Host.raise_for", False),
    ("native.runtime.Runtime.raise_for", True),
    ("aotbench/run/plan.py", True),
    ("run/plan.py", True),
    ("native/src/runtime.cc", True),
    ("tests/run/test_guard.py", True),
    ("run/planning.py", False),
    ("tests/test_guard.py", False),  # tests are grouped by layer now
    ("safety/sanitize.py", False),
    ("device/", False),
    ("custom.py", False),
    ("op/custom.py", True),
    ("tmp/", True),  # a cache folder: not the repository's, not checked
    ("Plan.fill", True),  # not checked
])
def test_the_walkthrough_rule_tells_real_names_from_stale_ones(span, ok):
    assert (walkthrough_problem(span) is None) is ok
