"""Every error path: the right aotbench error with the right fields, and the op (and process) still usable after.

``kernels/op_errors.cc:Fail`` computes ``2 * x`` when its call attribute ``mode`` is ``"ok"`` and otherwise fails
in the way ``mode`` names (non-zero return from F or Init, a C++ exception from F, Init or InferShape, a thrown
int, a missing or mistyped attribute read), so one op goes through each failure and then a valid call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aotbench

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
ERRORS_SRC = KERNELS / "op_errors.cc"
REGISTERED = ["code", "count", "mode", "token"]


# -- helpers ------------------------------------------------------------------------------------------------
def fail_reg(code: int = 1, token: str = "t") -> aotbench.spec.registration.OpInfo:
    """Fail's registration: input x, output y, call attribute mode, registered code/count/token."""
    return (aotbench.CustomRegOp("Fail").input(0, "x").output(0, "y")
            .attr("mode", "required", "str")
            .attr("code", "required", "int", value=code)
            .attr("count", "required", "int", value=5)
            .attr("token", "required", "str", value=token)
            .dtype_format(aotbench.DataType.None_None, aotbench.DataType.None_None)
            .target("CPU").get_op_info())


def assert_still_works(op: aotbench.Op, rng: np.random.Generator) -> None:
    """A valid call right after an error gives the right numbers (nothing crashed, nothing was left broken)."""
    x = rng.standard_normal(int(rng.integers(1, 20))).astype(np.float32)
    np.testing.assert_array_equal(op(x, "ok"), 2 * x)


def random_token(rng: np.random.Generator) -> str:
    return "tok" + "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz0123456789"), size=12))


@pytest.fixture(scope="module")
def fail_base(session_cache):
    return aotbench.Custom(f"{ERRORS_SRC}:Fail", None, None, reg_info=fail_reg())


@pytest.fixture
def fail(fail_base, rng):
    """Fail with a random error code and a random exception token (so messages cannot match by chance)."""
    code = int(rng.integers(1, 10_000)) * (1 if rng.random() < 0.5 else -1)
    return fail_base.with_attrs(code=code, token=random_token(rng)), code


@pytest.fixture
def x(rng):
    return rng.standard_normal((3, 4)).astype(np.float32)


# -- failures reported by the kernel ------------------------------------------------------------------------
def test_valid_call(fail_base, rng):
    """The baseline: mode "ok" computes 2 * x with the shape from FailInferShape."""
    assert_still_works(fail_base, rng)
    y = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(fail_base(y, "ok"), 2 * y)


def test_nonzero_return_from_f(fail, x, rng):
    """A non-zero return from F is a KernelError with F's name and the exact status, every time it happens."""
    op, code = fail
    for _ in range(2):  # the second call reuses the cached plan
        with pytest.raises(aotbench.KernelError) as info:
            op(x, "status")
        err = info.value
        assert (err.function, err.status, err.exception) == ("Fail", code, None)
        assert "Fail" in str(err) and str(code) in str(err)
        assert isinstance(err, RuntimeError)
        assert_still_works(op, rng)


def test_nonzero_return_from_f_fast_path(x, rng):
    """The same through the hot path (an op without call attributes, second call of a signature)."""
    code = int(rng.integers(1, 10_000))
    op = aotbench.Custom(f"{ERRORS_SRC}:Fail", None, None,
                         attrs={"mode": "status", "code": code, "count": 5, "token": "t"})
    for _ in range(3):
        with pytest.raises(aotbench.KernelError) as info:
            op(x)
        assert (info.value.function, info.value.status) == ("Fail", code)
    ok = op.with_attrs(mode="ok")
    np.testing.assert_array_equal(ok(x), 2 * x)
    np.testing.assert_array_equal(ok(x), 2 * x)


def test_nonzero_return_from_init(fail, x, rng):
    """A non-zero return from Init is a KernelError naming <F>Init with the status; nothing is cached, so the
    next call runs Init again and fails again."""
    op, code = fail
    for _ in range(2):
        with pytest.raises(aotbench.KernelError) as info:
            op(x, "init_status")
        assert (info.value.function, info.value.status, info.value.exception) == ("FailInit", code, None)
        assert "FailInit" in str(info.value)
        assert_still_works(op, rng)


@pytest.mark.parametrize("mode, function", [("throw_f", "Fail"), ("throw_init", "FailInit"),
                                            ("throw_infer", "FailInferShape")])
def test_cpp_exception(fail, fail_base, x, rng, mode, function):
    """A std::runtime_error escaping F, Init or InferShape is caught at the boundary and becomes a KernelError
    naming the function and carrying the exception's message."""
    op, _ = fail
    token = op.attrs["token"]
    for _ in range(2):
        with pytest.raises(aotbench.KernelError) as info:
            op(x, mode)
        err = info.value
        assert err.function == function and err.status is None
        assert err.exception == f"{function}: {token}"
        assert token in str(err) and function in str(err)
        assert_still_works(op, rng)
    assert token != fail_base.attrs["token"]


def test_exception_from_infer_shape_via_infer_shape(fail, rng):
    """op.infer_shape reports InferShape's exception the same way (call attributes follow the shapes)."""
    op, _ = fail
    with pytest.raises(aotbench.KernelError) as info:
        op.infer_shape((3, 4), "throw_infer")
    assert info.value.function == "FailInferShape" and op.attrs["token"] in info.value.exception
    assert op.infer_shape((3, None), "ok") == (3, None)
    assert_still_works(op, rng)


def test_non_std_exception(fail, x, rng):
    """`throw 42` (not a std::exception) is caught too: a KernelError with a non-empty description."""
    op, _ = fail
    with pytest.raises(aotbench.KernelError) as info:
        op(x, "throw_int")
    assert info.value.function == "Fail" and info.value.status is None and info.value.exception
    assert_still_works(op, rng)


# -- attribute reads ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode, function", [("missing_attr", "FailInit"), ("missing_attr_f", "Fail")])
def test_missing_attribute(fail, x, rng, mode, function):
    """Reading an attribute that does not exist (in Init or in F) is an AttrError with the name, the requested
    type, "(missing)" and the registered names (call attributes included, also when F reads: regression), all
    in the message."""
    op, _ = fail
    for _ in range(2):
        with pytest.raises(aotbench.AttrError) as info:
            op(x, mode)
        err = info.value
        assert (err.name, err.requested, err.registered) == ("no_such_attr", "int64_t", "(missing)")
        assert sorted(err.names) == REGISTERED
        text = str(err)
        assert "no_such_attr" in text and "int64_t" in text and function in text
        assert all(name in text for name in REGISTERED)
        assert isinstance(err, TypeError)
        assert_still_works(op, rng)


@pytest.mark.parametrize("mode", ["mistyped", "mistyped_f"])
def test_mistyped_attribute(fail, x, rng, mode):
    """Attr<float> on an int attribute (in Init or in F) is an AttrError naming both types and the registered
    names (no implicit conversion)."""
    op, _ = fail
    with pytest.raises(aotbench.AttrError) as info:
        op(x, mode)
    err = info.value
    assert (err.name, err.requested, err.registered) == ("count", "float", "int64_t")
    assert "count" in str(err) and "float" in str(err) and "int64_t" in str(err) and "5" in str(err)
    assert sorted(err.names) == REGISTERED
    assert_still_works(op, rng)


def test_mode_of_wrong_type_is_attr_error(fail, x, rng):
    """The call attribute read as Attr<std::string> (and declared "str") but passed as an int is an AttrError from
    InferShape that says to pass a str, as the registration declares."""
    op, _ = fail
    with pytest.raises(aotbench.AttrError) as info:
        op(x, 3)
    assert (info.value.name, info.value.requested, info.value.registered) == ("mode", "std::string", "int64_t")
    assert "Pass a str with the call, as its registration declares ('str')" in str(info.value)
    assert_still_works(op, rng)


# -- loading ------------------------------------------------------------------------------------------------
def test_missing_function(fail_base):
    """A function the library does not export is a SymbolNotFoundError listing the exported C functions."""
    with pytest.raises(aotbench.SymbolNotFoundError) as info:
        aotbench.Custom(f"{ERRORS_SRC}:Nope", (1,), np.float32)
    err = info.value
    assert isinstance(err, AttributeError)
    assert err.name == "Nope"  # regression: AttributeError.__init__ used to reset .name to None
    assert "Nope" in str(err) and str(err.path).endswith(".so")
    assert {"Fail", "FailInit", "FailInferShape", "NoInfer"} <= set(err.candidates)
    assert "Fail" in str(err) and "NoInfer" in str(err)


def test_function_with_cpp_linkage(fail_base):
    """A function without extern "C" is found only as a mangled symbol; the error says to add extern "C"."""
    with pytest.raises(aotbench.SymbolNotFoundError) as info:
        aotbench.Custom(f"{ERRORS_SRC}:Mangled", (1,), np.float32)
    assert info.value.mangled and "Mangled" in info.value.mangled[0]
    assert 'extern "C"' in str(info.value)


def test_missing_files(tmp_path):
    """A missing prebuilt library is a LoadError; a missing source an AotbenchError naming it."""
    with pytest.raises(aotbench.LoadError):
        aotbench.Custom(f"{tmp_path / 'nothing.so'}:F", (1,), np.float32)
    with pytest.raises(aotbench.AotbenchError, match="nothing.cc"):
        aotbench.Custom(f"{tmp_path / 'nothing.cc'}:F", (1,), np.float32)


# -- shapes -------------------------------------------------------------------------------------------------
def test_no_infer_shape_and_no_out_shape(session_cache):
    """No InferShape and no out_shape: ShapeError at construction, saying what to provide."""
    with pytest.raises(aotbench.ShapeError) as info:
        aotbench.Custom(f"{ERRORS_SRC}:NoInfer", None, np.float32)
    assert isinstance(info.value, ValueError)
    assert "out_shape" in str(info.value) and "NoInferInferShape" in str(info.value)


def test_out_shape_rule_errors(session_cache, rng):
    """An out_shape callable that raises, or gives a negative or malformed shape, is a ShapeError at call time;
    the op keeps working for inputs the rule handles."""
    def rule(shape):
        if len(shape) == 2:
            raise ZeroDivisionError("rule refuses 2-D")
        if len(shape) == 3:
            return (-1,)
        if len(shape) == 4:
            return "abc"
        return shape

    op = aotbench.Custom(f"{ERRORS_SRC}:NoInfer", rule, np.float32)
    for shape, match in [((2, 3), "ZeroDivisionError"), ((1, 2, 3), "-1"), ((1, 1, 1, 1), "abc")]:
        with pytest.raises(aotbench.ShapeError, match=match):
            op(rng.standard_normal(shape).astype(np.float32))
        v = rng.standard_normal(7).astype(np.float32)
        np.testing.assert_array_equal(op(v), v)
    negative = aotbench.Custom(f"{ERRORS_SRC}:NoInfer", (-3,), np.float32)
    with pytest.raises(aotbench.ShapeError):
        negative(rng.standard_normal(3).astype(np.float32))


def test_infer_shape_output_count_mismatch(session_cache, rng):
    """A multi-output InferShape that returns fewer shapes than the op declares outputs is a ShapeError."""
    op = aotbench.Custom(f"{KERNELS / 'op_probe.cc'}:SumDiff", None, (np.float32,) * 3)
    x = rng.standard_normal(4).astype(np.float32)
    with pytest.raises(aotbench.ShapeError, match="2"):
        op(x, x)


def test_absurd_workspace_request(session_cache, rng):
    """An Init that asks for an impossible workspace (2**62 bytes) gets an aotbench error that names Init and the
    size, not a bare numpy MemoryError; the process goes on."""
    probe = f"{KERNELS / 'op_probe.cc'}:Probe"
    op = aotbench.Custom(probe, (2 + 24 * 8,), np.int64, attrs={"ws": [2**62]})
    with pytest.raises(aotbench.AotbenchError) as info:
        op(rng.standard_normal(3))
    assert "ProbeInit" in str(info.value) and str(2**62) in str(info.value)
    assert op.with_attrs(ws=[64])(rng.standard_normal(3))[1] == 1


# -- arguments ----------------------------------------------------------------------------------------------
def test_wrong_number_of_inputs(fail, x, rng):
    """With reg_info, the number of arrays (and call attributes) is checked: ArgumentError naming the inputs."""
    op, _ = fail
    for args in [(), (x,), (x, x, "ok"), ("ok",)]:
        with pytest.raises(aotbench.ArgumentError) as info:
            op(*args)
        assert isinstance(info.value, TypeError)
    with pytest.raises(aotbench.ArgumentError, match="x"):
        op(x, x, "ok")
    assert_still_works(op, rng)


def unsupported_arrays() -> dict:
    arrays = {
        "object": np.array([object(), object()], dtype=object),
        "str_": np.array(["a", "bc"]),
        "bytes": np.array([b"a", b"b"]),
        "datetime64": np.array(["2020-01-01"], dtype="datetime64[D]"),
        "void": np.zeros(2, dtype="V4"),
        "ragged list": [[1.0, 2.0], [3.0]],
        "list of str": ["a", "b"],
    }
    if hasattr(np, "float128"):
        arrays["float128"] = np.ones(3, dtype=np.float128)
    if hasattr(np, "complex256"):
        arrays["complex256"] = np.ones(3, dtype=np.complex256)
    return arrays


@pytest.mark.parametrize("case", list(unsupported_arrays()))
def test_unsupported_dtype(fail, rng, case):
    """Arrays of dtypes a kernel cannot receive are an ArgumentError naming the supported dtypes, through the
    call-attribute path and the plain path alike."""
    op, _ = fail
    bad = unsupported_arrays()[case]
    with pytest.raises(aotbench.ArgumentError) as info:
        op(bad, "ok")
    assert case in ("ragged list", "list of str", "object") or "float32" in str(info.value)
    plain = aotbench.Custom(f"{ERRORS_SRC}:NoInfer", lambda s: s, np.float32)
    for _ in range(2):
        with pytest.raises(aotbench.ArgumentError):
            plain(bad)
    v = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal(plain(v), v)
    assert_still_works(op, rng)


@pytest.mark.parametrize("kwargs", [
    {"func": f"{ERRORS_SRC}"},
    {"func": 42},
    {"func": f"{ERRORS_SRC}:"},
    {"func": f"{ERRORS_SRC}:bad-name"},
    {"func": f"{ERRORS_SRC}:Fail", "func_type": "akg"},
    {"func": f"{ERRORS_SRC}:Fail", "func_type": "pyfunc"},
    {"func": f"{ERRORS_SRC}:Fail", "target": "tpu"},
    {"func": f"{ERRORS_SRC}:Fail", "target": "Ascend"},
    {"func": f"{ERRORS_SRC}:Fail", "flags": [1]},
    {"func": f"{ERRORS_SRC}:Fail", "flags": ["-O2", None]},
    {"func": f"{ERRORS_SRC}:Fail", "flags": 3},
    {"func": f"{ERRORS_SRC}:Fail", "reg_info": "not an OpInfo"},
    {"func": f"{ERRORS_SRC}:Fail", "out_shape": ((3,), (3,)), "out_dtype": (np.float32,) * 3},
], ids=lambda kw: "-".join(f"{k}={v!r}"[:40] for k, v in kw.items() if k != "func") or repr(kw["func"])[-20:])
def test_bad_custom_arguments(session_cache, kwargs):
    """Malformed Custom arguments are ArgumentErrors, raised before anything is built: a TypeError for an argument
    of the wrong type (func=42, flags, reg_info), a ValueError for a value that is not allowed."""
    kwargs = dict(kwargs)
    func = kwargs.pop("func")
    kwargs.setdefault("out_shape", (3,))
    with pytest.raises(aotbench.ArgumentError) as info:
        aotbench.Custom(func, **kwargs)
    assert isinstance(info.value, TypeError if func == 42 or {"flags", "reg_info"} & set(kwargs) else ValueError)


def test_bad_custom_arguments_other_way_of_passing(session_cache):
    """flags as one string is split like a shell line (accepted); reg_info as the builder, not get_op_info(),
    is refused."""
    op = aotbench.Custom(f"{ERRORS_SRC}:NoInfer", lambda s: s, np.float32, flags="-O1 -g")
    assert "-O1" in op.command and "-g" in op.command
    with pytest.raises(aotbench.ArgumentError):
        aotbench.Custom(f"{ERRORS_SRC}:Fail", None, None, reg_info=aotbench.CustomRegOp("Fail").input(0, "x"))


# -- the error classes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, builtin", [
    ("KernelError", RuntimeError), ("AttrError", TypeError), ("SymbolNotFoundError", AttributeError),
    ("ShapeError", ValueError), ("ArgumentError", Exception), ("ArgumentTypeError", TypeError),
    ("ArgumentValueError", ValueError), ("AttrMemoryError", MemoryError), ("LoadError", OSError),
    ("ToolchainNotFoundError", FileNotFoundError), ("DeviceUnavailableError", RuntimeError),
    ("CacheError", OSError), ("CompileError", Exception), ("AbiMismatchError", Exception),
])
def test_error_classes(name, builtin):
    """Every error class is importable from aotbench, listed in __all__, and a subclass of both AotbenchError and
    the builtin a caller would catch."""
    cls = getattr(aotbench, name)
    assert name in aotbench.__all__
    assert issubclass(cls, aotbench.AotbenchError) and issubclass(cls, builtin)
    assert issubclass(aotbench.AotbenchError, Exception)


def test_process_alive_after_everything(fail_base, rng):
    """After all the failures above (same process), a fresh op and the old one still compute correctly."""
    assert_still_works(fail_base, rng)
    fresh = aotbench.Custom(f"{ERRORS_SRC}:Fail", None, None, reg_info=fail_reg(code=2))
    assert_still_works(fresh, rng)
