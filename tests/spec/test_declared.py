"""Declared attribute types (aotbench.spec.declared): each of MindSpore's value_type names accepts the values a
kernel reads as that type, and refuses the others with the value to pass instead."""

from __future__ import annotations

import numpy as np
import pytest

from aotbench import AttrError
from aotbench.native.attrs import AttrKind, typed
from aotbench.spec.declared import DECLARED_KINDS, check_declared, declared_kinds


def samples(rng) -> dict[AttrKind, object]:
    """One random value of each kind."""
    i = [int(v) for v in rng.integers(-99, 99, size=3)]
    f = [float(v) + 0.5 for v in rng.integers(-99, 99, size=3)]
    return {AttrKind.BOOL: bool(rng.integers(2)), AttrKind.INT: i[0], AttrKind.FLOAT: f[0],
            AttrKind.STR: f"s{i[1]}", AttrKind.INT_VEC: i, AttrKind.FLOAT_VEC: f, AttrKind.INT_2D: [i, i[:1]],
            AttrKind.FLOAT_2D: [f[:2], f], AttrKind.EMPTY_LIST: [], AttrKind.EMPTY_ROWS: [[], []]}


@pytest.mark.parametrize("value_type", sorted(DECLARED_KINDS))
def test_each_declared_type_accepts_its_kinds_only(value_type, rng):
    allowed = DECLARED_KINDS[value_type]
    for kind, value in samples(rng).items():
        attr = typed("a", value, call=True)
        assert attr.kind is kind
        if kind in allowed:
            check_declared("Op", attr, value_type)
        else:
            with pytest.raises(AttrError, match=f"call attribute 'a' is declared '{value_type}'") as info:
                check_declared("Op", attr, value_type)
            assert info.value.registered == kind.cpp and info.value.requested == allowed[0].cpp


def test_mindspore_spellings_and_what_declares_nothing(rng):
    assert declared_kinds("listInt") == declared_kinds("listint") == DECLARED_KINDS["listint"]
    assert declared_kinds("listListFloat")[0] is AttrKind.FLOAT_2D
    for nothing in ("all", "double", "", None, 3):
        assert declared_kinds(nothing) is None
        check_declared("Op", typed("a", int(rng.integers(9))), nothing)  # nothing to check: no error


def test_the_value_to_pass_instead(rng):
    n = int(rng.integers(1, 50))
    cases = [(n, "float", f"Pass {float(n)!r} (a float)"), (float(n), "int", f"Pass {n!r} (an int)"),
             (n + 0.5, "int", "(a Python int)"), ([n, 1], "listFloat", f"Pass {[float(n), 1.0]!r} (floats)"),
             ([[n]], "listListFloat", f"Pass {[[float(n)]]!r} (floats)"), ("x", "bool", "(True or False)")]
    for value, value_type, words in cases:
        with pytest.raises(AttrError) as info:
            check_declared("Op", typed("a", value), value_type)
        assert words in str(info.value), str(info.value)
        assert "MindSpore does not" in str(info.value)


def test_typed_call_flag_is_not_part_of_equality(rng):
    value = float(np.float32(rng.standard_normal()))
    assert typed("a", value, call=True) == typed("a", value) and typed("a", value, call=True).call
    assert hash(typed("a", value, call=True)) == hash(typed("a", value))
