"""CustomRegOp / DataType: the registration chain, the OpInfo it builds, and how an op uses it (input count,
call attributes, output dtypes from dtype_format, refusal of unregistered input dtypes).

Kernels: ``kernels/op_probe.cc`` -- ``AddCast`` (x + y converted to the output dtype, which it reads from its
dtype string) and ``SumDiff`` (two outputs).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import CustomRegOp
from aotbench import DataType as D
from aotbench.native.attrs import AttrKind
from aotbench.spec.registration import OpInfo

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
PROBE_SRC = KERNELS / "op_probe.cc"

#: MindSpore's short dtype names and the dtype strings they stand for (our own table).
SHORT = {"F16": "float16", "F32": "float32", "F64": "float64", "BF16": "bfloat16", "I8": "int8", "I16": "int16",
         "I32": "int32", "I64": "int64", "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
         "BOOL": "bool", "C64": "complex64", "C128": "complex128"}


def add_cast(*rows: tuple, out_dtype=None) -> aotbench.Op:
    """AddCast (inputs x, y; output z) registered with the given dtype_format rows."""
    reg = CustomRegOp("AddCast").input(0, "x").input(1, "y").output(0, "z")
    for row in rows:
        reg = reg.dtype_format(*row)
    return aotbench.Custom(f"{PROBE_SRC}:AddCast", None, out_dtype, reg_info=reg.target("CPU").get_op_info())


def rand(dtype, shape, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def typed_op(session_cache):
    """AddCast registered for (f32, f32 -> f64), (i32, i32 -> i64), (bool, bool -> i32), (u8, u8 -> u16)."""
    return add_cast((D.F32_Default, D.F32_Default, D.F64_Default), (D.I32_Default, D.I32_Default, D.I64_Default),
                    (D.BOOL_Default, D.BOOL_Default, D.I32_Default), (D.U8_Default, D.U8_Default, D.U16_Default))


# -- DataType -------------------------------------------------------------------------------------------------
def test_datatype_members():
    """Every MindSpore-style member exists: X_Default = (dtype, "DefaultFormat"), X_None = (dtype, ""), and
    None_None accepts any dtype."""
    for short, dtype in SHORT.items():
        assert getattr(D, f"{short}_Default") == (dtype, "DefaultFormat")
        assert getattr(D, f"{short}_None") == (dtype, "")
    assert D.None_None == ("", "")
    assert D.None_Default[0] == ""


# -- the chain and OpInfo -------------------------------------------------------------------------------------
def test_chain_builds_op_info():
    """Each builder method returns the builder; get_op_info() gives a frozen OpInfo with the inputs, outputs,
    value attributes (typed from their values), call attributes (no value=, in order), dtype rows and target."""
    reg = CustomRegOp("MyOp")
    assert reg.input(0, "a") is reg
    info = (reg.input(1, "b").output(0, "c").output(1, "d")
            .attr("k", "required", "float", value=3)  # value_type is not enforced: 3 is an int
            .attr("alpha", "required", "float")
            .attr("s", "required", "str", value="ü")
            .attr("beta", "optional", "listInt")
            .dtype_format(D.F32_Default, D.None_None, D.F64_Default, D.I32_None)
            .dtype_format(D.BF16_Default, D.BOOL_Default, D.C64_Default, D.U64_Default)
            .target("CPU").get_op_info())
    assert isinstance(info, OpInfo)
    assert (info.name, info.inputs, info.outputs, info.target) == ("MyOp", ("a", "b"), ("c", "d"), "CPU")
    assert [(a.name, a.kind, a.value) for a in info.attrs] == [("k", AttrKind.INT, 3), ("s", AttrKind.STR, "ü")]
    assert info.call_attrs == ("alpha", "beta")
    assert info.dtype_formats == (("float32", "", "float64", "int32"), ("bfloat16", "bool", "complex64", "uint64"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.name = "other"  # type: ignore[misc]


def test_default_names_and_no_formats():
    """Unnamed inputs/outputs get positional names; rows of None_None only mean "any dtype" (no rows kept)."""
    info = CustomRegOp().input().input().output().dtype_format(D.None_None, D.None_None, D.None_None).get_op_info()
    assert info.inputs == ("x0", "x1") and info.outputs == ("y0",)
    assert info.dtype_formats == () and info.output_dtypes(("float32", "int8")) is None
    assert CustomRegOp("Bare").get_op_info().dtype_formats == ()


@pytest.mark.parametrize("row", [
    (D.F32_Default, D.F32_Default),
    (D.F32_Default, D.F32_Default, D.F32_Default, D.F32_Default),
    (D.F32_Default,),
])
def test_dtype_format_width_mismatch(row):
    """A dtype_format row must have one entry per input and output: ArgumentError saying how many are needed."""
    reg = CustomRegOp("W").input(0, "x").input(1, "y").output(0, "z").dtype_format(*row)
    with pytest.raises(aotbench.ArgumentError, match="3"):
        reg.get_op_info()


@pytest.mark.parametrize("bad", ["float32", ("float32",), ("float17", "DefaultFormat"), ("float32", "A", "B"), None])
def test_dtype_format_rejects_non_datatype(bad):
    """dtype_format takes DataType members (dtype, format) with known dtypes only."""
    with pytest.raises(aotbench.ArgumentError):
        CustomRegOp("W").input(0, "x").output(0, "y").dtype_format(D.F32_Default, bad)


@pytest.mark.parametrize("chain", [
    lambda r: r.attr("a", value=1).attr("a", value=2),
    lambda r: r.attr("a", value=1).attr("a"),
    lambda r: r.attr("a").attr("a"),
    lambda r: r.attr("a").attr("b", value=0.5).attr("a", value=[1]),
])
def test_duplicated_attribute(chain):
    """An attribute registered twice (as values, as call arguments, or one of each) is an ArgumentError."""
    with pytest.raises(aotbench.ArgumentError, match="'a'"):
        chain(CustomRegOp("D").input(0, "x").output(0, "y")).get_op_info()


def test_output_dtypes_rule():
    """OpInfo.output_dtypes: the first row whose inputs match ("" matches anything) gives the output dtypes;
    "" among them means "not said"; no match is an ArgumentError listing the registered combinations."""
    info = (CustomRegOp("R").input(0, "x").input(1, "y").output(0, "z")
            .dtype_format(D.F32_Default, D.F32_Default, D.F64_Default)
            .dtype_format(D.I32_Default, D.None_None, D.I64_Default)
            .dtype_format(D.U8_Default, D.U8_Default, D.None_None)
            .dtype_format(D.None_None, D.F16_Default, D.F16_Default).get_op_info())
    assert info.output_dtypes(("float32", "float32")) == ("float64",)
    assert info.output_dtypes(("int32", "bool")) == ("int64",)
    assert info.output_dtypes(("uint8", "uint8")) is None
    assert info.output_dtypes(("complex64", "float16")) == ("float16",)
    with pytest.raises(aotbench.ArgumentError) as err:
        info.output_dtypes(("float64", "float64"))
    assert "float64" in str(err.value) and "(float32, float32)" in str(err.value)


# -- an op with a registration ----------------------------------------------------------------------------------
@pytest.mark.parametrize("in_dtype, out_dtype", [(np.float32, np.float64), (np.int32, np.int64),
                                                 (np.bool_, np.int32), (np.uint8, np.uint16)])
def test_dtype_format_picks_output_dtype(typed_op, rng, in_dtype, out_dtype):
    """With out_dtype=None the output dtype is the registered one for the input dtypes, and the kernel (which
    converts to whatever output dtype string it gets) computes x + y in it."""
    shape = tuple(int(d) for d in rng.integers(1, 6, size=2))
    x, y = rand(in_dtype, shape, rng), rand(in_dtype, shape, rng)
    out = typed_op(x, y)
    assert out.dtype == out_dtype and out.shape == shape
    np.testing.assert_array_equal(out, x.astype(out_dtype) + y.astype(out_dtype))


@pytest.mark.slow
def test_bf16_row(rng):
    """BF16_Default rows work with ml_dtypes bfloat16 inputs (bf16 + bf16 -> float32)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    op = add_cast((D.BF16_Default, D.BF16_Default, D.F32_Default))
    x = rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
    out = op(x, y)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x.astype(np.float32) + y.astype(np.float32))


@pytest.mark.parametrize("dtypes", [(np.float64, np.float64), (np.float32, np.int32), (np.int64, np.int64),
                                    (np.int32, np.float32)])
def test_unregistered_input_dtypes_rejected(typed_op, rng, dtypes):
    """Input dtypes that match no dtype_format row are an ArgumentError naming the registered combinations; the
    op keeps working for registered ones."""
    x, y = rand(dtypes[0], (4,), rng), rand(dtypes[1], (4,), rng)
    with pytest.raises(aotbench.ArgumentError) as info:
        typed_op(x, y)
    assert "float32" in str(info.value) and "int32" in str(info.value)
    f = rand(np.float32, (4,), rng)
    np.testing.assert_array_equal(typed_op(f, f), f.astype(np.float64) * 2)


def test_unregistered_input_dtypes_rejected_with_out_dtype(rng):
    """The dtype_format check also applies when out_dtype is given explicitly."""
    op = add_cast((D.F32_Default, D.F32_Default, D.F64_Default), out_dtype=np.float64)
    i = rand(np.int32, (4,), rng)
    with pytest.raises(aotbench.ArgumentError):
        op(i, i)


def test_none_none_and_partial_rows(rng):
    """None_None inputs accept any dtype; a None_None output falls back to the first input's dtype."""
    any_in = add_cast((D.None_None, D.None_None, D.F64_Default))
    x, y = rand(np.int16, (5,), rng), rand(np.float32, (5,), rng)
    out = any_in(x, y)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, x.astype(np.float64) + y.astype(np.float64))
    same = add_cast((D.F32_Default, D.F32_Default, D.None_None))
    f, g = rand(np.float32, (5,), rng), rand(np.float32, (5,), rng)
    assert same(f, g).dtype == np.float32
    np.testing.assert_array_equal(same(f, g), f + g)


def test_registration_gives_outputs_and_input_count(rng):
    """Two registered outputs make a two-output op (multi-output InferShape, dtypes from the row), and the
    registered input count is enforced."""
    reg = (CustomRegOp("SumDiff").input(0, "x").input(1, "y").output(0, "s").output(1, "d")
           .dtype_format(D.F32_Default, D.F32_Default, D.F32_Default, D.F64_Default).target("CPU").get_op_info())
    op = aotbench.Custom(f"{PROBE_SRC}:SumDiff", None, None, reg_info=reg)
    assert op.spec.target == "cpu"
    x, y = rand(np.float32, (2, 3), rng), rand(np.float32, (2, 3), rng)
    s, d = op(x, y)
    assert (s.dtype, d.dtype) == (np.float32, np.float64)
    np.testing.assert_array_equal(s, x + y)
    np.testing.assert_array_equal(d, x.astype(np.float64) - y)
    for args in [(x,), (x, y, y)]:
        with pytest.raises(aotbench.ArgumentError, match="2 input"):
            op(*args)


def test_registration_conflicts(session_cache):
    """Output counts that disagree (registration vs out_dtype) and an unknown registered target are
    ArgumentErrors at construction."""
    reg = CustomRegOp("A").input(0, "x").input(1, "y").output(0, "z").get_op_info()
    with pytest.raises(aotbench.ArgumentError, match="ambiguous"):
        aotbench.Custom(f"{PROBE_SRC}:AddCast", None, (np.float32, np.float32), reg_info=reg)
    tpu = CustomRegOp("A").input(0, "x").input(1, "y").output(0, "z").target("TPU").get_op_info()
    with pytest.raises(aotbench.ArgumentError):
        aotbench.Custom(f"{PROBE_SRC}:AddCast", None, None, reg_info=tpu)


def test_declared_value_types_are_kept_read_only_and_travel(rng):
    """.attr's value_type is recorded (not "all" alone: every string given), read through a read-only view,
    and an OpInfo whose view was read still pickles to an equal one."""
    import pickle

    import cloudpickle

    value = float(rng.standard_normal())
    reg = (CustomRegOp("A").input(0, "x").output(0, "y").attr("a", "required", "float")
           .attr("b", "required", "all", value=value).attr("c", "required").get_op_info())
    assert reg.value_types == (("a", "float"), ("b", "all")) and dict(reg.declared) == {"a": "float", "b": "all"}
    assert reg.attrs[0].declared == "all"
    with pytest.raises(TypeError):
        reg.declared["a"] = "int"  # type: ignore[index]
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        back = loads(dumps(reg))
        assert back == reg and dict(back.declared) == dict(reg.declared)
