"""Verbs are functions, methods are sugar: ``aotbench.check(op, ...)`` and its kin do the work, and each ``Op``
method of the same name is a one-line call of the function."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.op.op import Op

KERNEL = Path(__file__).resolve().parents[1] / "support" / "kernels" / "trust_scratch.cc"
VERBS = ["bench", "check", "explore", "annotate", "disassemble", "compute_sanitizer", "export_mindspore"]


@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_is_a_function_of_the_op_and_the_method_is_one_call(verb):
    function = getattr(aotbench, verb)
    assert inspect.isfunction(function)
    assert next(iter(inspect.signature(function).parameters)) in ("op", "fn")  # the op comes first
    method = getattr(Op, verb)
    body = ast.parse(textwrap.dedent(inspect.getsource(method))).body[0].body
    statements = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    imports, rest = statements[:-1], statements[-1]
    assert all(isinstance(s, ast.ImportFrom) for s in imports) and isinstance(rest, ast.Return), verb
    call = rest.value
    assert isinstance(call, ast.Call) and isinstance(call.args[0], ast.Name) and call.args[0].id == "self", verb


def test_the_function_and_the_method_give_the_same_answer(rng):
    op = aotbench.Custom(f"{KERNEL}:Scratch", lambda s: s, np.float32, attrs={"sleep_us": 0})
    x = rng.standard_normal(33).astype(np.float32)
    by_function, by_method = aotbench.check(op, x, reference=lambda a: 3 * a), op.check(x, reference=lambda a: 3 * a)
    assert by_function.ok and by_method.ok and by_function.problems == by_method.problems == []
    np.testing.assert_array_equal(by_function.outputs, by_method.outputs)
    np.testing.assert_array_equal(by_function.outputs, 3 * x)
    assert str(aotbench.annotate(op)) == str(op.annotate())


def test_the_lazy_verbs_do_not_load_their_layers_until_asked():
    code = ("import sys, aotbench; assert 'ipywidgets' not in sys.modules and 'aotbench.mindspore' not in sys.modules;"
            " aotbench.export_mindspore; assert 'aotbench.mindspore' in sys.modules; print('ok')")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr
    with pytest.raises(AttributeError, match="no attribute 'explode'"):
        aotbench.explode  # noqa: B018 - a name that is not a verb
