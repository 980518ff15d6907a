"""Issue 24, item 5: every exception and warning class lives in aotbench/errors.py, as data.

* errors.py imports no aotbench module (not even inside a function) and holds only classes;
* no other module of the package defines an exception or warning class, and every ``warnings.warn`` names an
  aotbench warning, each a subclass of ``AotbenchWarning``;
* a class that moved still resolves at its old module attribute, with its fields and message;
* a bad argument's value is a ``ValueError`` and its type a ``TypeError`` (both ``ArgumentError``);
* IPython still renders the errors without aotbench's frames, also for a user who only did ``import aotbench``.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aotbench"
ERRORS = PACKAGE / "errors.py"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "examples" not in p.relative_to(PACKAGE).parts)
CLASSES = {name: cls for name, cls in vars(errors).items()
           if inspect.isclass(cls) and cls.__module__ == errors.__name__}
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if inspect.isclass(v) and issubclass(v, BaseException)}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


# -- errors.py is data -------------------------------------------------------------------------------------------
def test_errors_imports_no_aotbench_module_anywhere_in_it():
    found = []
    for node in ast.walk(_tree(ERRORS)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("aotbench")):
            found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import ...")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("aotbench")]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            found.append(f"line {node.lineno}: a dynamic import")
    assert found == [], f"aotbench/errors.py imports aotbench modules: {found}"


def test_errors_holds_classes_only():
    """Module level: the docstring, imports of the standard library, class definitions; no function."""
    others = [f"line {n.lineno}: {type(n).__name__}" for n in _tree(ERRORS).body
              if not isinstance(n, (ast.ClassDef, ast.Import, ast.ImportFrom))
              and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert others == [], f"aotbench/errors.py holds more than exception and warning classes: {others}"
    assert all(issubclass(cls, BaseException) for cls in CLASSES.values())
    assert "_render_traceback_" not in ERRORS.read_text(), "the IPython rendering is aotbench.notebook's"


def _exception_names() -> set[str]:
    return BUILTIN_EXCEPTIONS | set(CLASSES) | {"PicklingError", "PickleError", "UnpicklingError"}


def _defined_exceptions(path: Path, root: Path = ROOT) -> list[str]:
    """Classes in ``path`` (nested ones included) whose bases name an exception or warning class."""
    known = _exception_names()
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ClassDef):
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
            if any(b in known or re.search(r"(Error|Exception|Warning|Interrupt\w*)$", b) for b in bases):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}({', '.join(bases)})")
    return found


def test_no_other_module_defines_an_exception_or_warning():
    found = [hit for path in SOURCES if path != ERRORS for hit in _defined_exceptions(path)]
    assert found == [], f"define these in aotbench/errors.py (and import them where they are used): {found}"


def test_the_scan_finds_an_exception_class(tmp_path):
    """The check above sees a class deriving from a builtin, from an aotbench error and from a pickle error."""
    probe = tmp_path / "probe.py"
    probe.write_text("import pickle\nclass A(Exception): pass\nclass B(errors.ShapeError): pass\n"
                     "def f():\n    class C(pickle.PicklingError): pass\nclass D(object): pass\n")
    assert [hit.split()[1].split("(")[0] for hit in _defined_exceptions(probe, tmp_path)] == ["A", "B", "C"]


def test_every_warning_derives_from_aotbench_warning():
    warning_classes = [cls for cls in CLASSES.values() if issubclass(cls, Warning)]
    assert len(warning_classes) >= 8
    assert [c.__name__ for c in warning_classes if not issubclass(c, errors.AotbenchWarning)] == []
    assert issubclass(errors.AotbenchWarning, UserWarning)
    assert all(issubclass(c, errors.AotbenchError) for c in CLASSES.values()
               if issubclass(c, Exception) and not issubclass(c, Warning) and c is not errors.ArenaTooSmall)


def _warn_categories(path: Path) -> list[tuple[int, str | None]]:
    """(line, category name) of each ``warnings.warn`` call; None when the call gives no category (UserWarning)."""
    found = []
    for node in ast.walk(_tree(path)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn"
                and getattr(node.func.value, "id", "") == "warnings"):
            continue
        category = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "category"), None)
        message = node.args[0] if node.args else None
        if category is not None:
            found.append((node.lineno, getattr(category, "id", getattr(category, "attr", "?"))))
        elif isinstance(message, ast.Call):  # warnings.warn(SomeWarning("..."))
            found.append((node.lineno, getattr(message.func, "id", getattr(message.func, "attr", "?"))))
        elif isinstance(message, (ast.Constant, ast.JoinedStr, ast.BinOp)):
            found.append((node.lineno, None))
    return found


def test_every_warning_aotbench_gives_is_an_aotbench_warning():
    bad = [f"{path.relative_to(ROOT)}:{line} {name or 'UserWarning (no category)'}" for path in SOURCES
           for line, name in _warn_categories(path)
           if not (name in CLASSES and issubclass(CLASSES[name], errors.AotbenchWarning))]
    assert bad == [], f"warn with a subclass of aotbench.errors.AotbenchWarning: {bad}"


# -- the classes that moved ----------------------------------------------------------------------------------------
def test_moved_classes_resolve_at_their_old_homes():
    from aotbench.build import cache, pch
    from aotbench.build.diagnostics import Diagnostic
    from aotbench.run import sanitize

    assert cache.CacheError is errors.CacheError is aotbench.CacheError and issubclass(cache.CacheError, OSError)
    assert pch.DamagedPchError is errors.DamagedPchError
    assert sanitize.SanitizerError is errors.SanitizerError is aotbench.SanitizerError
    assert issubclass(errors.SanitizerError, errors.KernelCrashedError)
    assert aotbench.Diagnostic is Diagnostic
    err = errors.CompileError(["g++"], 1, "log", [Diagnostic("k.cc", 3, 7, "error", "boom"),
                                                   Diagnostic("k.cc", 2, None, "warning", "hm")])
    assert err.errors == [Diagnostic("k.cc", 3, 7, "error", "boom")] and "k.cc:3:7: error: boom" in str(err)
    assert str(errors.CacheError("the cache is full")) == "the cache is full"


ASAN_REPORT = """=================================================================
==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000014 at pc 0x7f
WRITE of size 4 at 0x602000000014 thread T0
    #0 0x7f1 in Faulty /tmp/build/<cell>:{line}
    #1 0x7f2 in aotb_call_params /x/libsanitizer/asan.cc:10
SUMMARY: AddressSanitizer: heap-buffer-overflow /tmp/build/<cell>:{line} in Faulty
"""


def test_sanitizer_report_becomes_the_error(rng):
    """The report is read in aotbench.run.sanitize; the error carries what was found, where, and that line."""
    from aotbench.run.sanitize import sanitizer_error

    line = int(rng.integers(2, 30))
    cell = "\n".join(f"  out[{i}] = x[{i}];" for i in range(1, 31))
    crash = errors.KernelCrashedError("Faulty", "SIGABRT", None, ASAN_REPORT.format(line=line))
    err = sanitizer_error(crash, "address", {"<cell>": cell})
    assert isinstance(err, errors.SanitizerError) and (err.function, err.signal) == ("Faulty", "SIGABRT")
    assert (err.kind, err.what, err.location) == ("address", "heap-buffer-overflow", ("<cell>", line))
    assert err.line_text == f"  out[{line}] = x[{line}];" and err.report == crash.stderr
    assert str(err) == (f"Faulty: AddressSanitizer found heap-buffer-overflow at <cell>:{line}\n    {line} | "
                        f"out[{line}] = x[{line}];\nheap-buffer-overflow <cell>:{line} in Faulty\n(the complete "
                        "report is in .report; your Python process is unharmed)")


# -- type and value errors apart -------------------------------------------------------------------------------------
def _raised(call) -> BaseException:
    with pytest.raises(aotbench.ArgumentError) as info:
        call()
    return info.value


def _assert_value_error(exc: BaseException) -> None:
    assert isinstance(exc, aotbench.ArgumentValueError) and isinstance(exc, ValueError), type(exc).__mro__
    assert not isinstance(exc, TypeError)


def _assert_type_error(exc: BaseException) -> None:
    assert isinstance(exc, aotbench.ArgumentTypeError) and isinstance(exc, TypeError), type(exc).__mro__
    assert not isinstance(exc, ValueError)


def test_argument_error_is_the_base_of_both():
    assert issubclass(aotbench.ArgumentTypeError, aotbench.ArgumentError)
    assert issubclass(aotbench.ArgumentValueError, aotbench.ArgumentError)
    assert issubclass(aotbench.ArgumentError, aotbench.AotbenchError)
    assert not issubclass(aotbench.ArgumentError, (TypeError, ValueError))
    assert {"ArgumentError", "ArgumentTypeError", "ArgumentValueError", "AotbenchWarning"} <= set(aotbench.__all__)


@pytest.mark.parametrize("kwargs", [{"target": "tpu"}, {"func_type": "akg"}, {"func": "k.cc:bad-name"},
                                    {"func": "no_colon.cc"}, {"timeout_s": "negative", "isolate": True}])
def test_a_bad_value_is_a_value_error(rng, kwargs):
    kwargs = dict(kwargs)
    if kwargs.get("timeout_s") == "negative":
        kwargs["timeout_s"] = -float(rng.uniform(0.1, 100))
    func = kwargs.pop("func", "k.cc:Kernel")
    _assert_value_error(_raised(lambda: aotbench.Custom(func, (3,), np.float32, **kwargs)))


@pytest.mark.parametrize("kwargs", [{"func": 42}, {"flags": 3}, {"flags": ["-O2", None]}, {"reg_info": "an op"},
                                    {"attrs": [("k", 1)]}, {"guard": "yes"}])
def test_a_bad_type_is_a_type_error(kwargs):
    kwargs = dict(kwargs)
    func = kwargs.pop("func", "k.cc:Kernel")
    _assert_type_error(_raised(lambda: aotbench.Custom(func, (3,), np.float32, **kwargs)))


def test_measuring_tools_tell_type_from_value(rng):
    x = rng.standard_normal(int(rng.integers(4, 64))).astype(np.float32)
    _assert_value_error(_raised(lambda: aotbench.bench(np.sin, x, budget_ms=-float(rng.uniform(1, 100)))))
    _assert_type_error(_raised(lambda: aotbench.bench(x, x)))
    _assert_value_error(_raised(lambda: aotbench.memory_bandwidth_gbps(nbytes=int(rng.integers(-64, 4)))))
    _assert_type_error(_raised(lambda: aotbench.compare({"sin": np.sin, "x": x}, x)))
    make = lambda size, gen: (gen.standard_normal(size),)  # noqa: E731
    _assert_type_error(_raised(lambda: aotbench.sweep(np.sin, [int(rng.integers(1, 9))], inputs=make, label=3)))


# -- rendering in IPython --------------------------------------------------------------------------------------------
def _raise_in_user_code(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - any of them
        return caught


def test_errors_render_for_ipython_once_aotbench_is_imported():
    err = _raise_in_user_code(errors.ShapeError("the shape is wrong"))
    lines = err._render_traceback_()
    assert lines[-1] == "ShapeError: the shape is wrong" and any(__file__ in line for line in lines)
    stopped = _raise_in_user_code(errors.IsolatedCallInterrupted("Slow"))
    lines = stopped._render_traceback_()
    assert lines[-1].startswith("KeyboardInterrupt (IsolatedCallInterrupted): Slow's isolated call was interrupted")
    compiled = errors.CompileError(["g++"], 1, "", [])
    compiled.html_shown = True
    assert compiled._render_traceback_() == [
        "CompileError: 0 error(s), shown above (the compiler output is in .log)"]


IPYTHON_SESSION = """
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_cell("import aotbench, numpy as np")
ip.run_cell("def make():\\n    return aotbench.Custom('k.cc:Kernel', (3,), np.float32, target='tpu')")
result = ip.run_cell("make()")
assert type(result.error_in_exec).__name__ == "ArgumentValueError", result.error_in_exec
"""


def test_a_shell_that_only_imported_aotbench_shows_the_users_frames():
    """No ``%load_ext``: ``import aotbench`` alone gives the errors their rendering (a fresh interpreter)."""
    out = subprocess.run([sys.executable, "-c", IPYTHON_SESSION], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    assert "aotbench's own frames are left out" in text, text
    assert "make()" in text and "ArgumentValueError: target='tpu'" in text, text
    assert str(PACKAGE) not in text, text


def test_every_public_class_is_exported():
    """What a user may meet is in ``aotbench`` (not the arena signal inside a worker, nor the PCH's retry)."""
    internal = {"ArenaTooSmall", "DamagedPchError"}
    missing = sorted(set(CLASSES) - internal - set(aotbench.__all__))
    assert missing == [], f"export these from aotbench/__init__.py: {missing}"
    assert all(getattr(aotbench, name) is CLASSES[name] for name in set(CLASSES) - internal)
