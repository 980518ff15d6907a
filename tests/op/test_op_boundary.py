"""The op is not reached into: outside its own module nothing reads or writes an ``Op``'s private attributes or
calls its private methods; what other modules need is public (``op.kernel``, ``op.runner``, ``op.device``)."""

from __future__ import annotations

import ast
from pathlib import Path

import aotbench
from aotbench.op.op import Op

PACKAGE = Path(aotbench.__file__).resolve().parent
OWN = {PACKAGE / "op" / "op.py"}


def _private_names_of_op() -> set[str]:
    """Every ``_name`` (not dunder) the Op class and its bases define or assign on ``self``."""
    names = {n for cls in Op.__mro__ if cls.__module__.startswith("aotbench") for n in vars(cls)
             if n.startswith("_") and not n.startswith("__")}
    tree = ast.parse((PACKAGE / "op" / "op.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            names.add(node.attr)
    return names


def _reach_ins(text: str, where: str, private: set[str]) -> list[str]:
    """``x._name`` where ``_name`` is one of the op's private names and ``x`` is not ``self``/``cls``."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in private and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_private_names_are_found():
    private = _private_names_of_op()
    assert {"_lock", "_plans", "_once", "_call", "_interrupted"} <= private


def test_no_module_but_the_ops_own_reaches_into_an_op():
    private = _private_names_of_op()
    offenders = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in OWN
                 for hit in _reach_ins(path.read_text(), str(path.relative_to(PACKAGE.parent)), private)]
    assert offenders == []


def test_the_check_finds_a_reach_in():
    text = "def peek(op, runner):\n    op.kernel.plans.clear()\n    return op._plans, runner.op._lock\n"
    hits = _reach_ins(text, "probe.py", _private_names_of_op())
    assert hits == ["probe.py:3 op._plans", "probe.py:3 runner.op._lock"]
