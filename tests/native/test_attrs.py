"""Attributes: the eight kinds as a kernel reads them, HasAttr, call-argument attributes, and Python-side typing.

The kernel ``kernels/op_attrs.cc:Echo`` reads, in its Init, the attributes that its string attribute ``read``
lists (``"kind:name;..."``) and copies what it read to its output, so every value can be compared with what
Python registered. ``ScaleAdd`` computes ``alpha * x + y`` with ``alpha`` read in Init.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.native.attrs import AttrKind, TypedAttr, describe, typed

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
ATTRS_SRC = KERNELS / "op_attrs.cc"
ECHO_WORDS = 4096

#: Echo's kind codes and the C++ type each one reads with Attr<T>.
CPP = {"b": "bool", "i": "int64_t", "f": "float", "s": "std::string", "iv": "std::vector<int64_t>",
       "fv": "std::vector<float>", "i2": "std::vector<std::vector<int64_t>>", "f2": "std::vector<std::vector<float>>"}
NON_ASCII = "äöüßéñ€漢字ありがとう🙂✓"


# -- helpers ------------------------------------------------------------------------------------------------
def decode(words: np.ndarray, items: list[tuple[str, str]]) -> list:
    """Decode Echo's output stream for ``items`` ((kind, name) pairs, in order)."""
    at = 0

    def take() -> int:
        nonlocal at
        at += 1
        return int(words[at - 1])

    def take_float() -> float:
        return float(np.array(take(), dtype=np.int64).view(np.float64))

    values = []
    for kind, _ in items:
        if kind in ("has", "b"):
            values.append(bool(take()))
        elif kind == "i":
            values.append(take())
        elif kind == "f":
            values.append(take_float())
        elif kind == "s":
            n = take()
            n_words = (n + 7) // 8
            values.append(words[at:at + n_words].tobytes()[:n].decode("utf-8"))
            at += n_words
        elif kind in ("iv", "fv"):
            values.append([take() if kind == "iv" else take_float() for _ in range(take())])
        else:  # i2 / f2
            values.append([[take() if kind == "i2" else take_float() for _ in range(take())] for _ in range(take())])
    assert (words[at:] == -1).all(), "Echo wrote more than the items asked for"
    return values


def echo(op: aotbench.Op, items: list[tuple[str, str]], **attrs) -> list:
    """Run Echo with ``attrs`` added, reading ``items``; the decoded values."""
    derived = op.with_attrs(read=";".join(f"{k}:{n}" for k, n in items), **attrs)
    out = derived(np.zeros(3, np.float32))
    assert out.shape == (ECHO_WORDS,) and out.dtype == np.int64
    return decode(out, items)


def f32(values):
    """Values rounded to float32 (how a kernel reads float attributes), as Python floats in nested lists."""
    return np.asarray(values, dtype=np.float32).astype(np.float64).tolist()


def random_text(rng: np.random.Generator) -> str:
    pool = "abcXYZ019 _-" + NON_ASCII
    return "".join(rng.choice(list(pool), size=int(rng.integers(1, 40))))


def random_attrs(rng: np.random.Generator) -> dict:
    """One random value of each of the eight kinds (lists non-empty, 2-D ones ragged)."""
    big = [2**62, -(2**62), 2**62 + int(rng.integers(0, 2**40)), -(2**62) - int(rng.integers(0, 2**40)),
           2**63 - 1, -(2**63), int(rng.integers(-(2**62), 2**62))]
    return {
        "b": bool(rng.random() < 0.5),
        "i": big[int(rng.integers(len(big)))],
        "f": float(rng.standard_normal() * 10.0 ** int(rng.integers(-20, 20))),
        "s": random_text(rng),
        "iv": [int(v) for v in rng.integers(-(2**62), 2**62, size=int(rng.integers(1, 9)))],
        "fv": (rng.standard_normal(int(rng.integers(1, 9))) * 1e3).tolist(),
        "i2": [[int(v) for v in rng.integers(-(2**40), 2**40, size=int(n))] for n in rng.integers(0, 5, size=4)]
        + [[int(rng.integers(-9, 9))]],
        "f2": [rng.standard_normal(int(n)).tolist() for n in rng.integers(0, 5, size=3)] + [[float(rng.random())]],
    }


def expected_echo(kind: str, value):
    return f32(value) if kind in ("f", "fv") else ([f32(r) for r in value] if kind == "f2" else value)


# -- module fixtures ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def echo_op(session_cache):
    return aotbench.Custom(f"{ATTRS_SRC}:Echo", (ECHO_WORDS,), np.int64, attrs={"read": ""})


def scale_add_reg(**alpha_value) -> aotbench.spec.registration.OpInfo:
    return (aotbench.CustomRegOp("ScaleAdd").input(0, "x").input(1, "y").output(0, "out")
            .attr("alpha", "required", "float", **alpha_value)
            .dtype_format(aotbench.DataType.F32_Default, aotbench.DataType.F32_Default, aotbench.DataType.F32_Default)
            .target("CPU").get_op_info())


@pytest.fixture(scope="module")
def scale_add(session_cache):
    """ScaleAdd with alpha as a call argument: op(x, y, alpha)."""
    return aotbench.Custom(f"{ATTRS_SRC}:ScaleAdd", lambda x, y: x, None, reg_info=scale_add_reg())


# -- reading the eight kinds --------------------------------------------------------------------------------
def test_all_eight_kinds_echoed(echo_op, rng):
    """Random values of all eight kinds come back from Attr<T> exactly (floats as float32), int64 values near
    and at the limits of int64 included, strings with non-ASCII UTF-8 included."""
    for _ in range(8):
        attrs = random_attrs(rng)
        items = [(k, k) for k in attrs]
        got = echo(echo_op, items, **attrs)
        for (kind, _), value in zip(items, got):
            assert value == expected_echo(kind, attrs[kind]), kind


def test_float_special_values_and_limits(echo_op):
    """inf, -inf, nan, the float32 extremes and subnormals survive as float32."""
    values = [math.inf, -math.inf, float(np.finfo(np.float32).max), -float(np.finfo(np.float32).max),
              float(np.finfo(np.float32).tiny), 1e-45, -0.0]
    got = echo(echo_op, [("fv", "v")] + [("f", f"x{k}") for k in range(len(values))], v=values,
               **{f"x{k}": v for k, v in enumerate(values)})
    assert got[0] == got[1:] == f32(values)
    assert math.copysign(1.0, got[-1]) == -1.0
    nan = echo(echo_op, [("f", "n")], n=math.nan)[0]
    assert math.isnan(nan)


def test_has_attr(echo_op, rng):
    """HasAttr is true for every registered attribute whatever its kind, false for others, and never fails."""
    attrs = random_attrs(rng)
    items = [("has", k) for k in attrs] + [("has", "read"), ("has", "absent"), ("has", "B"), ("has", "")]
    got = echo(echo_op, items, **attrs)
    assert got == [True] * (len(attrs) + 1) + [False, False, False]


def test_empty_list_reads_as_every_list_type(echo_op):
    """An empty list (or tuple, or empty array) is readable as each of the four list types."""
    items = [("iv", "e"), ("fv", "e"), ("i2", "e"), ("f2", "e"), ("iv", "t"), ("f2", "a")]
    assert echo(echo_op, items, e=[], t=(), a=np.array([])) == [[], [], [], [], [], []]


@pytest.mark.parametrize("kind", list(CPP))
def test_no_implicit_conversion(echo_op, rng, kind):
    """A value of one kind read as any other kind is an AttrError naming the attribute, the requested and the
    registered C++ types and the registered names (int is not bool, int is not float, int list is not float
    list ...)."""
    value = random_attrs(rng)[kind]
    for other, other_cpp in CPP.items():
        if other == kind:
            continue
        with pytest.raises(aotbench.AttrError) as info:
            echo(echo_op, [(other, "v")], v=value)
        err = info.value
        assert (err.name, err.requested, err.registered) == ("v", other_cpp, CPP[kind])
        assert set(err.names) == {"read", "v"}
        assert "'v'" in str(err) and other_cpp in str(err) and CPP[kind] in str(err)
    assert echo(echo_op, [(kind, "v")], v=value) == [expected_echo(kind, value)]


def test_empty_list_is_not_a_scalar(echo_op):
    """An empty list is not readable as a scalar kind."""
    for kind in ("b", "i", "f", "s"):
        with pytest.raises(aotbench.AttrError) as info:
            echo(echo_op, [(kind, "e")], e=[])
        assert info.value.requested == CPP[kind]


# -- attributes as call arguments ---------------------------------------------------------------------------
def test_call_argument_attribute(scale_add, rng):
    """An .attr() without value= is a positional argument after the arrays: op(x, y, 0.7) = 0.7 * x + y, and
    different values give different results, in any order (no stale Init from the per-signature cache)."""
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    alphas = [0.7] + [float(a) for a in rng.standard_normal(4)]
    for _ in range(2):
        for alpha in alphas + alphas[::-1]:
            np.testing.assert_allclose(scale_add(x, y, alpha), np.float32(alpha) * x + y, rtol=1e-6, atol=1e-6)
    assert not np.allclose(scale_add(x, y, alphas[1]), scale_add(x, y, alphas[2]))
    assert "alpha" in repr(scale_add)


def test_call_argument_attribute_errors(scale_add, rng):
    """A call attribute is typed like any other (1 is not a float), must be given, and cannot be set as a
    registered value."""
    x = rng.standard_normal(3).astype(np.float32)
    with pytest.raises(aotbench.AttrError) as info:
        scale_add(x, x, 1)
    assert (info.value.name, info.value.requested, info.value.registered) == ("alpha", "float", "int64_t")
    with pytest.raises(aotbench.ArgumentError, match="alpha"):
        scale_add(x, x)
    with pytest.raises(aotbench.AttrError):
        scale_add(x, x, [1, 2.5])
    with pytest.raises(aotbench.ArgumentError):
        scale_add.with_attrs(alpha=0.5)
    with pytest.raises(aotbench.ArgumentError):
        aotbench.Custom(f"{ATTRS_SRC}:ScaleAdd", lambda x, y: x, None, reg_info=scale_add_reg(),
                        attrs={"alpha": 0.5})
    np.testing.assert_allclose(scale_add(x, x, 0.25), np.float32(1.25) * x, rtol=1e-6)


def test_mistyped_call_attribute_names_the_value_to_pass(scale_add, rng):
    """alpha is declared "float" and read as Attr<float>: an int, a bool or a list is refused by that read (no
    conversion, as in MindSpore), and the error names the value to pass, which then works."""
    x = rng.standard_normal(4).astype(np.float32)
    n = int(rng.integers(2, 1000))
    for value, hint in [(n, f"Pass {float(n)!r} (a float) with the call, as its registration declares ('float')"),
                        (np.int32(n), f"Pass {float(n)!r} (a float) with the call"),
                        (True, "Pass a Python float with the call"), ([0.5], "(value [0.5]); there is no implicit")]:
        with pytest.raises(aotbench.AttrError) as info:
            scale_add(x, x, value)
        text = str(info.value)
        assert "read attribute 'alpha' as Attr<float>, but it was given with the call as" in text, text
        assert hint in text and info.value.requested == "float", text
    np.testing.assert_allclose(scale_add(x, x, float(n)), np.float32(n + 1) * x, rtol=1e-5, atol=1e-6)


def test_declared_type_the_kernel_does_not_read_is_named(rng):
    """Registered "float" but read as Attr<int64_t> (MindSpore runs it when given an int: value_type is not
    enforced): an int works here too, and a float is refused with the int to pass and the registration to fix."""
    reg = (aotbench.CustomRegOp("Echo").input(0, "x").output(0, "y").attr("read", "required", "str", value="i:n")
           .attr("n", "required", "float").get_op_info())
    op = aotbench.Custom(f"{ATTRS_SRC}:Echo", (ECHO_WORDS,), np.int64, reg_info=reg)
    x = np.zeros(2, np.float32)
    n = int(rng.integers(-(2**40), 2**40))
    assert decode(op(x, n), [("i", "n")]) == [n]
    with pytest.raises(aotbench.AttrError) as info:
        op(x, float(n))
    text = str(info.value)
    assert f"Pass {n!r} (an int) with the call and declare it 'int' in the registration, which says 'float'" in text
    with pytest.raises(aotbench.AttrError) as info:
        op(x, 2.0**63)  # no int64 holds it: no such value is offered
    assert "Pass a Python int" in str(info.value) and str(2**63) not in str(info.value)


@pytest.mark.parametrize("value_type", ["all", "double", None])
def test_call_attribute_without_a_known_declared_type(value_type, rng):
    """"all", a type aotbench does not know, or none: the advice comes from the kernel's read alone, and says the
    value came with the call (not that it was registered)."""
    reg = (aotbench.CustomRegOp("ScaleAdd").input(0, "x").input(1, "y").output(0, "out")
           .attr("alpha", "required", value_type).target("CPU").get_op_info())
    op = aotbench.Custom(f"{ATTRS_SRC}:ScaleAdd", lambda x, y: x, None, reg_info=reg)
    x = rng.standard_normal(3).astype(np.float32)
    n = int(rng.integers(2, 100))
    with pytest.raises(aotbench.AttrError) as info:
        op(x, x, n)
    text = str(info.value)
    assert "read attribute 'alpha' as Attr<float>, but it was given with the call as int64_t" in text, text
    assert f"Pass {float(n)!r} (a float) with the call, or read it as Attr<int64_t>." in text, text
    assert "registration" not in text.split("Registered attributes")[0]


def test_registered_value_of_another_type_than_declared(rng):
    """A value= attribute declared "float" but given 2: the read fails, and the advice is about the
    registration's value."""
    reg = (aotbench.CustomRegOp("ScaleAdd").input(0, "x").input(1, "y").output(0, "out")
           .attr("alpha", "required", "float", value=2).target("CPU").get_op_info())
    op = aotbench.Custom(f"{ATTRS_SRC}:ScaleAdd", lambda x, y: x, None, reg_info=reg)
    x = rng.standard_normal(3).astype(np.float32)
    with pytest.raises(aotbench.AttrError, match=r"is registered as int64_t \(value 2\).*Pass 2\.0 \(a float\) in "
                       r"the registration \(value=\.\.\.\), as its registration declares \('float'\)"):
        op(x, x)


def test_registered_value_attribute(rng):
    """.attr(..., value=V) registers a fixed attribute: op(x, y) with no extra argument uses V."""
    alpha = float(rng.standard_normal())
    op = aotbench.Custom(f"{ATTRS_SRC}:ScaleAdd", lambda x, y: x, None, reg_info=scale_add_reg(value=alpha))
    x = rng.standard_normal(6).astype(np.float32)
    y = rng.standard_normal(6).astype(np.float32)
    np.testing.assert_allclose(op(x, y), np.float32(alpha) * x + y, rtol=1e-6, atol=1e-6)
    assert op.attrs == {"alpha": alpha}


def test_string_call_attribute_echoed(rng):
    """A string call attribute reaches Attr<std::string> with its UTF-8 bytes, a new value each call."""
    reg = (aotbench.CustomRegOp("Echo").input(0, "x").output(0, "y").attr("read", "required", "str", value="s:label")
           .attr("label", "required", "str").get_op_info())
    op = aotbench.Custom(f"{ATTRS_SRC}:Echo", (ECHO_WORDS,), np.int64, reg_info=reg)
    x = np.zeros(2, np.float32)
    texts = [random_text(rng) for _ in range(4)]
    for text in texts + texts:
        assert decode(op(x, text), [("s", "label")]) == [text]


def test_call_attribute_negative_zero_is_a_new_value(rng):
    """Call attributes that compare equal but differ (0.0 and -0.0) must not share an Init (regression: the plan
    cache keyed them by value equality)."""
    reg = (aotbench.CustomRegOp("Echo").input(0, "x").output(0, "y").attr("read", "required", "str", value="f:v")
           .attr("v", "required", "float").get_op_info())
    op = aotbench.Custom(f"{ATTRS_SRC}:Echo", (ECHO_WORDS,), np.int64, reg_info=reg)
    x = np.zeros(2, np.float32)
    assert math.copysign(1.0, decode(op(x, 0.0), [("f", "v")])[0]) == 1.0
    assert math.copysign(1.0, decode(op(x, -0.0), [("f", "v")])[0]) == -1.0
    assert math.copysign(1.0, decode(op(x, 0.0), [("f", "v")])[0]) == 1.0


# -- numpy values -------------------------------------------------------------------------------------------
def test_numpy_scalars_and_arrays_as_values(echo_op, rng):
    """numpy scalars and arrays are typed like their Python equivalents (np.int32 -> int64_t, np.float32 ->
    float, np.bool_ -> bool, arrays -> vectors, 2-D arrays -> 2-D vectors)."""
    ints = rng.integers(-1000, 1000, size=(3, 4))
    floats = rng.standard_normal((2, 5))
    attrs = {
        "b": np.bool_(rng.random() < 0.5), "i": np.int32(rng.integers(-(2**31), 2**31)),
        "u": np.uint64(2**63 - 1 - int(rng.integers(0, 1000))), "f": np.float32(rng.standard_normal()),
        "d": np.float64(rng.standard_normal()), "s": np.str_(random_text(rng)),
        "iv": ints[0].astype(np.int16), "fv": floats[0].astype(np.float32), "i2": ints, "f2": floats,
        "rows": [np.array([1, 2, 3]), np.array([int(ints[1, 0])])],
    }
    items = [("b", "b"), ("i", "i"), ("i", "u"), ("f", "f"), ("f", "d"), ("s", "s"), ("iv", "iv"), ("fv", "fv"),
             ("i2", "i2"), ("f2", "f2"), ("i2", "rows")]
    got = echo(echo_op, items, **attrs)
    assert got == [bool(attrs["b"]), int(attrs["i"]), int(attrs["u"]), f32(attrs["f"]), f32(attrs["d"]),
                   str(attrs["s"]), ints[0].tolist(), f32(floats[0]), ints.tolist(), f32(floats),
                   [[1, 2, 3], [int(ints[1, 0])]]]


# -- typing errors before any call --------------------------------------------------------------------------
BAD_VALUES = {
    "mixed_int_float": [1, 2.0],
    "mixed_float_int": [2.5, 3],
    "bool_in_list": [True, 1],
    "numpy_bool_in_list": [np.bool_(False)],
    "bool_in_2d": [[1], [False]],
    "mixed_rows": [[1, 2], [3.5]],
    "mixed_nesting": [[1], 2],
    "three_levels": [[[1]]],
    "int_too_big": 2**63,
    "int_too_small": -(2**63) - 1,
    "uint64_max": np.uint64(2**64 - 1),
    "list_int_too_big": [1, 2**64],
    "float_overflow": 1e39,
    "float_overflow_negative": -3.5e38,
    "float_list_overflow": [1.0, 1e300],
    "dict": {"a": 1},
    "none": None,
    "bytes": b"abc",
    "complex": 1j,
    "set": {1, 2},
    "nul_in_string": "a\0b",
    "string_list": ["a", "b"],
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_untypable_values_rejected_before_any_call(echo_op, case):
    """Values that are not exactly one of the eight kinds are AttrErrors naming the attribute, raised by
    Custom(attrs=...), CustomRegOp.attr(value=...) and with_attrs, before any kernel code runs."""
    value = BAD_VALUES[case]
    with pytest.raises(aotbench.AttrError) as info:
        aotbench.Custom(f"{ATTRS_SRC}:Echo", (ECHO_WORDS,), np.int64, attrs={"read": "", "bad": value})
    assert info.value.name == "bad" and "'bad'" in str(info.value)
    with pytest.raises(aotbench.AttrError):
        aotbench.CustomRegOp("Echo").attr("bad", "required", "all", value=value)
    with pytest.raises(aotbench.AttrError):
        echo_op.with_attrs(bad=value)
    with pytest.raises(aotbench.AttrError):
        typed("bad", value)


@pytest.mark.parametrize("name", ["1abc", "a-b", "", "with space", "a.b", 5, None])
def test_bad_attribute_names(echo_op, name):
    """An attribute name must be a C identifier; anything else is an AttrError."""
    with pytest.raises(aotbench.AttrError):
        aotbench.Custom(f"{ATTRS_SRC}:Echo", (ECHO_WORDS,), np.int64, attrs={name: 1})
    with pytest.raises(aotbench.AttrError):
        aotbench.CustomRegOp("Echo").attr(name, "required", "int", value=1)
    with pytest.raises(aotbench.AttrError):
        typed(name, 1)


def test_limits_that_are_accepted(echo_op):
    """The exact int64 limits and float32's largest value are accepted and read back unchanged."""
    fmax = float(np.finfo(np.float32).max)
    got = echo(echo_op, [("i", "lo"), ("i", "hi"), ("f", "fm"), ("iv", "v")], lo=-(2**63), hi=2**63 - 1, fm=fmax,
               v=[-(2**63), 2**63 - 1])
    assert got == [-(2**63), 2**63 - 1, fmax, [-(2**63), 2**63 - 1]]


# -- aotbench.native.attrs.typed -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value, kind, stored", [
    (True, AttrKind.BOOL, True),
    (np.bool_(False), AttrKind.BOOL, False),
    (0, AttrKind.INT, 0),
    (np.int8(-5), AttrKind.INT, -5),
    (2**63 - 1, AttrKind.INT, 2**63 - 1),
    (1.5, AttrKind.FLOAT, 1.5),
    (np.float32(0.25), AttrKind.FLOAT, 0.25),
    ("", AttrKind.STR, ""),
    (NON_ASCII, AttrKind.STR, NON_ASCII),
    ([1, 2], AttrKind.INT_VEC, (1, 2)),
    ((3,), AttrKind.INT_VEC, (3,)),
    ([1.0, -2.5], AttrKind.FLOAT_VEC, (1.0, -2.5)),
    (np.array([1.0, 2.0], np.float32), AttrKind.FLOAT_VEC, (1.0, 2.0)),
    ([[1], [2, 3], []], AttrKind.INT_2D, ((1,), (2, 3), ())),
    ([[0.5], []], AttrKind.FLOAT_2D, ((0.5,), ())),
    (np.arange(6).reshape(2, 3), AttrKind.INT_2D, ((0, 1, 2), (3, 4, 5))),
    ([], AttrKind.EMPTY_LIST, ()),
    ((), AttrKind.EMPTY_LIST, ()),
])
def test_typed_kinds(value, kind, stored):
    """typed() maps each Python/numpy value to its kind, with lists normalised to (nested) tuples of Python
    numbers, so the result is hashable and compares by value."""
    t = typed("a", value)
    assert isinstance(t, TypedAttr)
    assert (t.name, t.kind, t.value) == ("a", kind, stored)
    assert type(t.value) is type(stored)
    flat = [x for row in t.value for x in row] if kind in (AttrKind.INT_2D, AttrKind.FLOAT_2D) else (
        list(t.value) if isinstance(t.value, tuple) else [t.value])
    assert all(type(x) in (bool, int, float, str) for x in flat)
    hash(t)
    assert t == typed("a", value)
    assert describe(t).startswith("a=") and kind.cpp in describe(t)


def test_typed_is_exact():
    """bool is not int, int is not float, 1 and 1.0 and True are different attributes, and TypedAttr is frozen."""
    assert len({typed("a", True), typed("a", 1), typed("a", 1.0)}) == 3
    assert typed("a", [1]).kind is not typed("a", [1.0]).kind
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed("a", 1).value = 2  # type: ignore[misc]


def test_attr_kind_cpp_names():
    """AttrKind.cpp is the T of Attr<T> for the eight kinds."""
    assert [AttrKind(k).cpp for k in range(1, 9)] == list(CPP.values())
    assert AttrKind.MISSING.cpp == "(missing)"
