"""Property tests (hypothesis): the example kernel against numpy over shapes, and attribute values that make
the round trip Python -> native host -> kernel -> output unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_attrs import ATTRS_SRC, ECHO_WORDS, decode

import aotbench
from aotbench.native.attrs import AttrKind, typed

SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

#: Echo's code for reading each attribute kind (an empty list is read as a vector of int64).
READ_AS = {AttrKind.BOOL: "b", AttrKind.INT: "i", AttrKind.FLOAT: "f", AttrKind.STR: "s", AttrKind.INT_VEC: "iv",
           AttrKind.FLOAT_VEC: "fv", AttrKind.INT_2D: "i2", AttrKind.FLOAT_2D: "f2", AttrKind.EMPTY_LIST: "iv"}

int64s = st.integers(-(2**63), 2**63 - 1)
float32s = st.floats(width=32, allow_nan=False, allow_infinity=False)
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=60)
attr_values = st.one_of(
    st.booleans(), int64s, float32s, texts,
    st.lists(int64s, max_size=8), st.lists(float32s, min_size=1, max_size=8),
    st.lists(st.lists(int64s, min_size=1, max_size=5), min_size=1, max_size=4),
    st.lists(st.lists(float32s, min_size=1, max_size=5), min_size=1, max_size=4),
)


def as_float32(value):
    """``value`` (a float or nested lists of floats, ragged allowed) rounded to float32, as Python floats."""
    if isinstance(value, (list, tuple)):
        return [as_float32(v) for v in value]
    return float(np.float32(value))


@pytest.fixture(scope="module")
def add_reduce():
    return aotbench.Custom(f"{aotbench.examples_dir() / 'add_reduce.cc'}:CustomKernel", None, np.float32,
                           attrs={"axis": 0, "keep_dim": False})


@pytest.fixture(scope="module")
def echo():
    return aotbench.Custom(f"{ATTRS_SRC}:Echo", (ECHO_WORDS,), np.int64, attrs={"read": ""})


@SETTINGS
@given(data=st.data(), rows=st.integers(0, 9), cols=st.integers(0, 9), axis=st.integers(0, 1),
       keep_dim=st.booleans())
def test_add_reduce_matches_numpy_for_any_shape(add_reduce, data, rows, cols, axis, keep_dim):
    """For every 2-D shape (0- and 1-sized dims included), axis and keep_dim: the op equals numpy's sum."""
    elements = st.floats(-1e3, 1e3, width=32)
    x = data.draw(hnp.arrays(np.float32, (rows, cols), elements=elements))
    y = data.draw(hnp.arrays(np.float32, (rows, cols), elements=elements))
    op = add_reduce.with_attrs(axis=axis, keep_dim=keep_dim)
    expected = (x.astype(np.float64) + y).sum(axis=axis, keepdims=keep_dim)
    out = op(x, y)
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-2)
    assert op.infer_shape(x.shape, y.shape) == expected.shape


@SETTINGS
@given(value=attr_values)
def test_any_attribute_value_round_trips(echo, value):
    """Whatever Python value becomes an attribute, the kernel reads back exactly it (floats as float32)."""
    kind = typed("v", value).kind
    (got,) = decode(echo.with_attrs(v=value, read=f"{READ_AS[kind]}:v")(np.zeros(1, np.float32)),
                    [(READ_AS[kind], "v")])
    if kind in (AttrKind.FLOAT, AttrKind.FLOAT_VEC, AttrKind.FLOAT_2D):
        assert got == as_float32(value)
    elif kind is AttrKind.EMPTY_LIST:
        assert got == []
    else:
        assert got == (list(map(list, value)) if kind is AttrKind.INT_2D else
                       list(value) if kind is AttrKind.INT_VEC else value)


@SETTINGS
@given(value=attr_values, other=st.sampled_from(sorted(set(READ_AS.values()))))
def test_reading_with_the_wrong_type_is_an_attr_error(echo, value, other):
    """Reading an attribute as any type other than its own raises AttrError naming both types."""
    kind = typed("v", value).kind
    readable = {READ_AS[kind]} | ({"iv", "fv", "i2", "f2"} if kind is AttrKind.EMPTY_LIST else set())
    op = echo.with_attrs(v=value, read=f"{other}:v")
    if other in readable:
        op(np.zeros(1, np.float32))
        return
    with pytest.raises(aotbench.AttrError) as info:
        op(np.zeros(1, np.float32))
    assert info.value.name == "v" and info.value.registered == kind.cpp
