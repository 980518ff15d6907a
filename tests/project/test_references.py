"""Every cross-reference in the package's docstrings and comments and in the docs (``:mod:``, ``:func:``,
``:class:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``) names something that exists, so a reader following
one lands on the code it describes."""

from __future__ import annotations

import builtins
import importlib
import re
from pathlib import Path

import pytest

import aotbench

PACKAGE = Path(aotbench.__file__).resolve().parent
ROOT = PACKAGE.parent
ROLE = re.compile(r":(mod|func|class|meth|attr|data|exc|obj):`~?([^`<>\s]+)`")
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "notebooks").glob("*.md"))]
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
