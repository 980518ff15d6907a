"""An attribute error's advice (aotbench.native.attr_hints): MindSpore's value_type names, the value to pass
instead (never one that no attribute can hold), and what to say when the declaration and the kernel's read
disagree."""

from __future__ import annotations

import pytest

from aotbench.native.attr_hints import DECLARED_KINDS, advice, as_given, declared_kinds, value_instead
from aotbench.native.attrs import AttrKind, typed


def test_mindspore_spellings_and_what_declares_nothing():
    assert declared_kinds("listInt") == declared_kinds("LISTINT") == DECLARED_KINDS["listint"]
    assert declared_kinds("listListFloat")[0] is AttrKind.FLOAT_2D
    assert declared_kinds("int64") == declared_kinds("int") and declared_kinds("float32") == declared_kinds("float")
    for nothing in ("all", "double", "", " float", None, 3, float):
        assert declared_kinds(nothing) is None


@pytest.mark.parametrize("value_type", sorted(DECLARED_KINDS))
def test_every_declared_type_names_the_kind_it_reads_first(value_type):
    kinds = DECLARED_KINDS[value_type]
    assert value_type.replace("list", "").replace("64", "").replace("32", "") in kinds[0].cpp.replace("int64_t", "int")
    assert all(k.name.startswith("EMPTY") for k in kinds[1:])


def test_the_value_to_pass_instead(rng):
    n = int(rng.integers(1, 50))
    cases = [((n, AttrKind.FLOAT), f"{float(n)!r} (a float)"), ((float(n), AttrKind.INT), f"{n!r} (an int)"),
             ((n + 0.5, AttrKind.INT), "a Python int"), ((1e20, AttrKind.INT), "a Python int"),
             ((-(2.0**63), AttrKind.INT), f"{-(2**63)!r} (an int)"), ((2.0**63, AttrKind.INT), "a Python int"),
             (([n, 1], AttrKind.FLOAT_VEC), f"{[float(n), 1.0]!r} (floats)"),
             (([float(n), 2.0], AttrKind.INT_VEC), f"{[n, 2]!r} (ints)"),
             (([[n]], AttrKind.FLOAT_2D), f"{[[float(n)]]!r} (floats)"), (("x", AttrKind.BOOL), "True or False")]
    for (value, wanted), words in cases:
        assert value_instead(typed("a", value), wanted) == words


def test_advice_by_declaration(rng):
    n = int(rng.integers(1, 50))
    given = typed("a", n, call=True, declared="float")
    assert advice(given, AttrKind.FLOAT) == f"Pass {float(n)!r} (a float) with the call, as its registration " \
                                            "declares ('float')."
    assert advice(typed("a", n, call=True, declared="all"), AttrKind.FLOAT) == \
        f"Pass {float(n)!r} (a float) with the call, or read it as Attr<int64_t>."
    wrong = advice(typed("a", float(n), declared="float"), AttrKind.INT)
    assert wrong.startswith(f"Pass {n!r} (an int) in the registration (value=...) and declare it 'int' in the "
                            "registration, which says 'float'")


def test_call_and_declared_are_not_part_of_equality(rng):
    value = float(rng.standard_normal())
    assert typed("a", value, call=True, declared="float") == typed("a", value)
    assert hash(typed("a", value, call=True, declared="float")) == hash(typed("a", value))


def test_values_are_shown_as_given(rng):
    rows = [[float(v) for v in rng.standard_normal(2)], []]
    assert as_given(typed("a", rows).value) == rows and as_given(typed("a", []).value) == []
    assert as_given(typed("a", "t").value) == "t"
