"""The op as a kernel sees it and as a user calls it.

Kernels: the tutorial's Add+ReduceSum (the corrected ``add_reduce.cc`` that ships with aotbench) and
``kernels/op_probe.cc``, whose ``Probe`` entry point reports everything it receives (nparam, ndims, shapes, dtype
strings, workspace entries, pointer alignment) and whose Init/kernel-data destructor keep counters that the tests
read through ``op.library.handle``.
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.op.op import MAX_PLANS, workspace_allocation

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
PROBE_SRC = KERNELS / "op_probe.cc"
ADD_REDUCE_SRC = aotbench.examples_dir() / "add_reduce.cc"

#: The dtype strings of the ABI, in the order op_probe.cc numbers them (our own copy, not aotbench's).
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "bool", "bfloat16", "complex64", "complex128")
#: dtypes whose values op_probe.cc's AddCast/SumDiff can load (complex and float16 are not loaded).
LOADABLE = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
            "bfloat16")
PROBE_WORDS = 2 + 24 * 8  # kProbeWords in op_probe.cc


# -- helpers ------------------------------------------------------------------------------------------------
def probe_op(**attrs) -> aotbench.Op:
    """A fresh Probe op (its own plan cache); ``ws=[bytes, ...]`` makes Init request workspaces."""
    return aotbench.Custom(f"{PROBE_SRC}:Probe", (PROBE_WORDS,), np.int64, attrs=attrs or None)


def parse_probe(out: np.ndarray) -> tuple[int, int, list[dict]]:
    """(nparam, number of workspaces, one record per params entry) from Probe's output."""
    assert out.dtype == np.int64 and out.shape == (PROBE_WORDS,)
    nparam, n_ws = int(out[0]), int(out[1])
    records = []
    for rec in out[2:2 + 8 * nparam].reshape(nparam, 8):
        ndims = int(rec[0])
        records.append({"ndims": ndims, "dtype": int(rec[1]), "align": int(rec[2]), "numel": int(rec[3]),
                        "dims": tuple(int(d) for d in rec[4:4 + min(ndims, 4)]), "pad": tuple(rec[4 + min(ndims, 4):8])})
    return nparam, n_ws, records


def counter(op: aotbench.Op, name: str) -> int:
    """One of op_probe.cc's exported counters, read through the op's own library handle."""
    fn = getattr(op.library.handle, name)
    fn.restype, fn.argtypes = ctypes.c_int64, []
    return int(fn())


def random_array(dtype: str, shape, rng: np.random.Generator) -> np.ndarray:
    """Random values of a kernel dtype string (bfloat16 through ml_dtypes); always an ndarray, even 0-d."""
    return np.asarray(_random_values(dtype, shape, rng))


def _random_values(dtype: str, shape, rng: np.random.Generator):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return (rng.standard_normal(shape) * 100).astype(dt)


def assert_reduced(out: np.ndarray, x: np.ndarray, y: np.ndarray, axis: int, keep_dim: bool) -> None:
    """``out`` is (x + y).sum(axis, keepdims=keep_dim) up to float32 rounding: compared with a float64 reference
    within the error bound of recursive summation (n * u * sum|terms|, doubled), so it cannot flake."""
    terms = x.astype(np.float64) + y.astype(np.float64)
    expected = terms.sum(axis, keepdims=keep_dim)
    assert out.shape == expected.shape and out.dtype == np.float32
    u = np.finfo(np.float32).eps / 2
    bound = 2 * (x.shape[axis] + 1) * u * np.abs(terms).sum(axis, keepdims=keep_dim) + 1e-30
    assert (np.abs(out - expected) <= bound).all(), np.abs(out - expected).max()


def assert_sum64(out, *arrays) -> None:
    """``out`` is the sum of every element of ``arrays`` (float64, any summation order)."""
    flat = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.zeros(0)
    bound = 2 * (flat.size + 1) * np.finfo(np.float64).eps * np.abs(flat).sum() + 1e-300
    assert abs(float(out) - flat.sum()) <= bound


def random_shape(rng: np.random.Generator, ndim: int, low: int = 1, high: int = 7) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(low, high, size=ndim))


# -- module fixtures: each kernel is compiled once ------------------------------------------------------------
@pytest.fixture(scope="module")
def add_reduce(session_cache):
    """The corrected tutorial op for each (axis, keep_dim), shape from its InferShape."""
    return {(axis, keep): aotbench.Custom(f"{ADD_REDUCE_SRC}:CustomKernel", None, np.float32,
                                          attrs={"axis": axis, "keep_dim": keep})
            for axis in (0, 1) for keep in (False, True)}


@pytest.fixture(scope="module")
def probe(session_cache):
    return probe_op()


@pytest.fixture(scope="module")
def sum_all(session_cache):
    return aotbench.Custom(f"{PROBE_SRC}:SumAll", None, np.float64)


@pytest.fixture(scope="module")
def add_cast(session_cache):
    return aotbench.Custom(f"{PROBE_SRC}:AddCast", None, np.float64)


# -- the tutorial kernel -------------------------------------------------------------------------------------
@pytest.mark.parametrize("keep_dim", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_add_reduce_matches_numpy(add_reduce, rng, axis, keep_dim):
    """The corrected tutorial kernel equals numpy's (x+y).sum(axis, keepdims) for random 2-D float32 inputs."""
    op = add_reduce[(axis, keep_dim)]
    for _ in range(6):
        shape = random_shape(rng, 2, 1, 40)
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape).astype(np.float32)
        assert_reduced(op(x, y), x, y, axis, keep_dim)


def test_add_reduce_tutorial_example(add_reduce):
    """The tutorial's own example (4x5 ones, axis=1) gives the documented [10, 10, 10, 10]."""
    x = np.ones((4, 5), np.float32)
    np.testing.assert_array_equal(add_reduce[(1, False)](x, x), np.full(4, 10, np.float32))


def test_add_reduce_dynamic_shape(add_reduce, rng):
    """The tutorial's dynamic case: InferShape maps (4, None) to (4,) and calls with (4, n) for several n work
    (each new n gets its own Init, so the workspace always fits)."""
    op = add_reduce[(1, False)]
    assert op.infer_shape((4, None), (4, None)) == (4,)
    assert add_reduce[(1, True)].infer_shape((4, None), (4, None)) == (4, 1)
    assert add_reduce[(0, False)].infer_shape((4, None), (4, None)) == (None,)
    for n in sorted({int(v) for v in rng.integers(1, 3000, size=5)}) + [1]:
        x = rng.standard_normal((4, n)).astype(np.float32)
        y = rng.standard_normal((4, n)).astype(np.float32)
        assert_reduced(op(x, y), x, y, 1, False)
        assert op.plan_info(x, y)["workspaces"][0]["requested"] == 4 * n * 4


@pytest.mark.parametrize("axis", [-2, -1, 2])
def test_add_reduce_refuses_an_axis_it_does_not_handle_without_reading_past_the_shape(session_cache, rng, axis):
    """An axis the kernel refuses (the panel's slider offers -1 and -2) gets a one-element shape from InferShape,
    read within bounds, and the kernel's own check reports it as its error code 2."""
    shape = random_shape(rng, 2, 2, 30)
    op = aotbench.Custom(f"{ADD_REDUCE_SRC}:CustomKernel", None, np.float32,
                         attrs={"axis": axis, "keep_dim": bool(rng.integers(2))})
    assert op.infer_shape(shape, shape) == (1,)
    x = rng.standard_normal(shape).astype(np.float32)
    with pytest.raises(aotbench.KernelError) as info:
        op(x, x)
    assert info.value.status == 2


def test_infer_shape_unknown_rank_passes_through(add_reduce):
    """An unknown rank (None, i.e. the ABI's {-2}) goes through InferShape and comes back as None."""
    for op in add_reduce.values():
        assert op.infer_shape(None, None) is None


def test_infer_shape_accepts_numpy_integers(add_reduce, rng):
    """Dims may be numpy integers (as from arr.shape arithmetic or np.int64 values), like out_shape allows."""
    op = add_reduce[(1, True)]
    rows, cols = (int(d) for d in rng.integers(1, 50, size=2))
    assert op.infer_shape((np.int64(rows), np.int32(cols)), (rows, None)) == (rows, 1)
    with pytest.raises(aotbench.ArgumentError):
        op.infer_shape((True, cols), (1, cols))


def test_inferred_minus_one_for_concrete_call_is_shape_error(rng):
    """An InferShape that answers -1 for concrete input shapes is refused with ShapeError (nothing is allocated
    from a negative dim), and the op stays usable for infer_shape."""
    op = aotbench.Custom(f"{PROBE_SRC}:BadInfer", None, np.float32)
    x = rng.standard_normal(5).astype(np.float32)
    with pytest.raises(aotbench.ShapeError, match="BadInferInferShape"):
        op(x)
    assert op.infer_shape((5,)) == (None,)


# -- several outputs ------------------------------------------------------------------------------------------
def test_multi_output_from_multi_infer_shape(rng):
    """Two declared outputs with out_shape=None use the std::vector<std::vector<int64_t>> InferShape form."""
    op = aotbench.Custom(f"{PROBE_SRC}:SumDiff", None, (np.float32, np.float32))
    shape = random_shape(rng, 3)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    s, d = op(x, y)
    assert s.shape == d.shape == shape and s.dtype == d.dtype == np.float32
    np.testing.assert_array_equal(s, x + y)
    np.testing.assert_array_equal(d, x - y)
    assert op.infer_shape(shape, shape) == (shape, shape)
    assert op.infer_shape((None, 3), (None, 3)) == ((None, 3), (None, 3))


def test_multi_output_explicit_shapes_and_dtypes(rng):
    """out_shape=((n,), (n,)) with out_dtype=(float32, float64): each output gets its own shape and dtype."""
    n = int(rng.integers(1, 100))
    op = aotbench.Custom(f"{PROBE_SRC}:SumDiff", ((n,), (n,)), (np.float32, np.float64))
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    s, d = op(x, y)
    assert (s.dtype, d.dtype) == (np.float32, np.float64)
    np.testing.assert_array_equal(s, x + y)
    np.testing.assert_array_equal(d, x.astype(np.float64) - y.astype(np.float64))
    by_rule = aotbench.Custom(f"{PROBE_SRC}:SumDiff", lambda a, b: (a, b), (np.float64, np.float32))
    s2, d2 = by_rule(x, y)
    assert (s2.dtype, d2.dtype) == (np.float64, np.float32)
    np.testing.assert_array_equal(s2, x.astype(np.float64) + y)


# -- dtypes, ndims, shapes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_string(probe, rng, dtype):
    """An input of each supported dtype arrives with exactly the ABI's dtype string."""
    shape = random_shape(rng, 2)
    nparam, n_ws, recs = parse_probe(probe(random_array(dtype, shape, rng)))
    assert (nparam, n_ws) == (2, 0)
    assert recs[0]["dtype"] == DTYPES.index(dtype), f"{dtype} arrived as id {recs[0]['dtype']}"
    assert recs[0]["dims"] == shape and recs[0]["ndims"] == 2
    assert recs[1]["dtype"] == DTYPES.index("int64") and recs[1]["dims"] == (PROBE_WORDS,)


def test_mixed_dtypes_ranks_and_workspace_entries(rng):
    """One call with an input of every dtype, random ranks 0-4 (0-d and zero-size included) and workspaces:
    nparam counts inputs + output + workspaces, and ndims/shapes/dtypes hold every input and the output plus one
    1-D uint8 entry per workspace (its byte size); workspace pointers are 64-byte aligned."""
    pytest.importorskip("ml_dtypes")
    ws = [int(b) for b in rng.integers(1, 5000, size=3)] + [0]
    op = probe_op(ws=ws)
    arrays, shapes = [], []
    for i, dtype in enumerate(DTYPES):
        shape = random_shape(rng, int(rng.integers(0, 5)), 0 if i == 3 else 1, 5)
        shapes.append(shape)
        arrays.append(random_array(dtype, shape, rng))
    arrays[0] = random_array(DTYPES[0], (), rng)  # always at least one 0-d input
    shapes[0] = ()
    nparam, n_ws, recs = parse_probe(op(*arrays))
    assert nparam == len(DTYPES) + 1 + len(ws) and n_ws == len(ws)
    for k, (dtype, shape) in enumerate(zip(DTYPES, shapes)):
        assert recs[k]["ndims"] == len(shape)
        assert recs[k]["dims"] == shape[:4]
        assert recs[k]["numel"] == int(np.prod(shape))
        assert recs[k]["dtype"] == DTYPES.index(dtype)
    assert recs[0]["ndims"] == 0 and all(p == -1 for p in recs[0]["pad"])  # 0-d: shapes not dereferenced
    out = recs[len(DTYPES)]
    assert (out["ndims"], out["dims"], out["dtype"]) == (1, (PROBE_WORDS,), DTYPES.index("int64"))
    for size, rec in zip(ws, recs[len(DTYPES) + 1:]):
        assert (rec["ndims"], rec["dims"], rec["dtype"]) == (1, (size,), DTYPES.index("uint8"))
        assert rec["align"] == 0, "workspace not 64-byte aligned"


def test_workspace_alignment_and_size(rng):
    """Each workspace is 64-byte aligned and at least the requested size (the kernel writes all of it); the
    allocation is aotbench.op.op.workspace_allocation(requested), and plan_info reports both."""
    ws = [int(b) for b in rng.integers(1, 1 << 16, size=4)] + [1, 63, 65]
    op = probe_op(ws=ws)
    for shape in [(3,), (7, 2), (1,)]:
        x = rng.standard_normal(shape).astype(np.float32)
        _, n_ws, recs = parse_probe(op(x))
        assert n_ws == len(ws)
        assert [r["dims"][0] for r in recs[2:]] == ws
        assert all(r["align"] == 0 for r in recs[2:])
        info = op.plan_info(x)
        assert info["outputs"] == [((PROBE_WORDS,), np.dtype(np.int64))]
        assert [w["requested"] for w in info["workspaces"]] == ws
        for w in info["workspaces"]:
            assert w["allocated"] >= w["requested"]
            assert w["allocated"] == workspace_allocation(w["requested"])
    assert all(workspace_allocation(r) >= 8 * r for r in (1, 100, 12345))


def test_zero_d_inputs_and_output(sum_all, rng):
    """0-d inputs (ndims 0) are summed without dereferencing their shapes, and SumAll's InferShape ({}) gives
    a 0-d output; out_shape=() gives the same."""
    a = np.array(rng.standard_normal())
    b = rng.standard_normal(random_shape(rng, 2))
    out = sum_all(a, b)
    assert out.shape == () and out.dtype == np.float64
    assert_sum64(out, a, b)
    only_scalar = sum_all(a)
    assert only_scalar.shape == () and float(only_scalar) == float(a)
    explicit = aotbench.Custom(f"{PROBE_SRC}:SumAll", (), np.float64)
    assert_sum64(explicit(b, a), a, b)


def test_numpy_scalar_input_is_zero_d(probe, rng):
    """A numpy scalar (np.float64(v)) or a Python float is a 0-d input, as np.asarray(v) is, on the first call of
    a signature and on later ones (regression: np.ascontiguousarray made it shape (1,))."""
    for _ in range(2):
        for scalar in (np.float64(rng.standard_normal()), float(rng.standard_normal())):
            _, _, recs = parse_probe(probe(scalar, np.array(rng.standard_normal())))
            assert recs[1]["ndims"] == 0
            assert recs[0]["ndims"] == 0, "a scalar reached the kernel as shape " + str(recs[0]["dims"])


def test_zero_size_inputs(sum_all, probe, add_cast, rng):
    """Zero-size inputs are passed with their shape (numel 0) and contribute nothing; zero-size outputs work."""
    empty = np.empty((0, int(rng.integers(1, 5))))
    b = rng.standard_normal(4)
    assert_sum64(sum_all(empty, b), b)
    assert float(sum_all(empty)) == 0.0
    _, _, recs = parse_probe(probe(empty))
    assert recs[0]["dims"] == empty.shape and recs[0]["numel"] == 0
    out = add_cast(np.empty((3, 0), np.float32), np.empty((3, 0), np.float32))
    assert out.shape == (3, 0)


@pytest.mark.parametrize("dtype", LOADABLE)
def test_data_of_each_dtype(add_cast, rng, dtype):
    """The bytes of inputs of each loadable dtype reach the kernel intact (x + y computed in double)."""
    shape = random_shape(rng, 2)
    x, y = random_array(dtype, shape, rng), random_array(dtype, shape, rng)
    out = add_cast(x, y)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, x.astype(np.float64) + y.astype(np.float64))


# -- Init and kernel data lifetime --------------------------------------------------------------------------
def test_init_once_per_signature(rng):
    """Init runs once for each new concrete input signature (shape or dtype) and never for a repeated one."""
    op = probe_op()
    x = rng.standard_normal((3, 4)).astype(np.float32)
    start = counter(op, "op_probe_init_count")
    for _ in range(3):
        op(x)
    assert counter(op, "op_probe_init_count") == start + 1
    op(rng.standard_normal((3, 4)).astype(np.float32))  # same signature, new data
    assert counter(op, "op_probe_init_count") == start + 1
    op(x[:, :3].copy())
    assert counter(op, "op_probe_init_count") == start + 2
    op(x.astype(np.float64))
    assert counter(op, "op_probe_init_count") == start + 3
    op(x, x)
    assert counter(op, "op_probe_init_count") == start + 4
    for args in [(x,), (x[:, :3].copy(),), (x.astype(np.float64),), (x, x)]:
        op(*args)
    assert counter(op, "op_probe_init_count") == start + 4


def test_destruct_kernel_data_on_close_and_gc(rng):
    """op.close() runs DestructKernelData once per signature (the kernel data's destructor runs), the op stays
    usable afterwards, and garbage collection of the op destructs what is left."""
    gc.collect()  # Probe ops left over by earlier tests must not be collected while this one counts
    op = probe_op()
    inits0, dead0 = counter(op, "op_probe_init_count"), counter(op, "op_probe_destruct_count")
    n = int(rng.integers(2, 6))
    for k in range(n):
        op(np.zeros(k + 1, np.float32))
    assert counter(op, "op_probe_destruct_count") == dead0
    op.close()
    assert counter(op, "op_probe_destruct_count") == dead0 + n
    op.close()  # idempotent
    assert counter(op, "op_probe_destruct_count") == dead0 + n
    parse_probe(op(np.zeros(1, np.float32)))  # still usable: a new Init
    assert counter(op, "op_probe_init_count") == inits0 + n + 1
    op.plan_info(np.zeros(2, np.float32))  # plan_info runs Init and releases it
    assert counter(op, "op_probe_init_count") == inits0 + n + 2
    assert counter(op, "op_probe_destruct_count") == dead0 + n + 1
    handle_reader = aotbench.Custom(f"{PROBE_SRC}:Probe", (PROBE_WORDS,), np.int64)
    del op
    gc.collect()
    assert counter(handle_reader, "op_probe_destruct_count") == dead0 + n + 2


def test_plan_cache_eviction_destructs_oldest(rng):
    """Past MAX_PLANS signatures the oldest plan is released (its kernel data destructed); results stay right."""
    gc.collect()
    op = probe_op()
    dead0 = counter(op, "op_probe_destruct_count")
    for k in range(MAX_PLANS + 2):
        _, _, recs = parse_probe(op(np.zeros(k + 1, np.uint8)))
        assert recs[0]["dims"] == (k + 1,)
    assert counter(op, "op_probe_destruct_count") == dead0 + 2
    op.close()
    assert counter(op, "op_probe_destruct_count") == dead0 + MAX_PLANS + 2


# -- input layouts ------------------------------------------------------------------------------------------
def test_non_contiguous_and_fortran_inputs(add_reduce, rng):
    """Strided, transposed, Fortran-ordered, reversed and read-only inputs give exactly what their contiguous
    copies give (on a fresh signature and again on the cached one)."""
    op = add_reduce[(0, True)]
    rows, cols = random_shape(rng, 2, 2, 30)
    base = rng.standard_normal((rows, 2 * cols)).astype(np.float32)
    y = rng.standard_normal((rows, cols)).astype(np.float32)
    readonly = rng.standard_normal((rows, cols)).astype(np.float32)
    readonly.setflags(write=False)
    variants = {
        "strided": base[:, ::2],
        "transposed": np.ascontiguousarray(base[:, :cols].T).T,
        "fortran": np.asfortranarray(base[:, 1::2]),
        "reversed": base[::-1, :cols],
        "readonly": readonly,
    }
    for name, x in variants.items():
        assert name == "readonly" or not x.flags.c_contiguous
        expected = op(np.ascontiguousarray(x), np.ascontiguousarray(y))
        for _ in range(2):
            np.testing.assert_array_equal(op(x, y), expected, err_msg=name)
            np.testing.assert_array_equal(op(y, x), op(np.ascontiguousarray(y), np.ascontiguousarray(x)),
                                          err_msg=name)
        assert_reduced(expected, x, y, 0, True)


def test_non_native_byte_order_input(add_cast, rng):
    """A big-endian input is either converted (same result as native) or refused with ArgumentError; it is never
    handed to the kernel as "float32" with swapped bytes (regression: dtype.name ignores byte order)."""
    x = rng.standard_normal(8).astype(np.float32)
    y = rng.standard_normal(8).astype(np.float32)
    for _ in range(2):  # fresh signature, then the cached one
        for swapped in (x.astype(">f4"), x.astype(">f8")):
            try:
                out = add_cast(swapped, y)
            except aotbench.ArgumentError:
                continue
            np.testing.assert_array_equal(out, x.astype(np.float64) + y)


def test_python_lists_as_inputs(add_cast, rng):
    """Python lists are accepted as inputs (float lists as float64, int lists as int64)."""
    x = rng.standard_normal((3, 4))
    y = rng.standard_normal((3, 4))
    np.testing.assert_array_equal(add_cast(x.tolist(), y.tolist()), x + y)
    i = rng.integers(-1000, 1000, size=5)
    j = rng.integers(-1000, 1000, size=5)
    as_int = aotbench.Custom(f"{PROBE_SRC}:AddCast", None, None)(i.tolist(), j.tolist())
    assert as_int.dtype == np.int64
    np.testing.assert_array_equal(as_int, i + j)


# -- derived ops and what was built ---------------------------------------------------------------------------
def test_with_attrs_returns_new_op(add_reduce, rng):
    """with_attrs gives a new op with the changed attribute and leaves the original op untouched."""
    op = add_reduce[(1, False)]
    x = rng.standard_normal((5, 6)).astype(np.float32)
    y = rng.standard_normal((5, 6)).astype(np.float32)
    before = op(x, y)
    other = op.with_attrs(axis=0, keep_dim=True)
    assert other is not op and isinstance(other, aotbench.Op)
    assert other.attrs == {"axis": 0, "keep_dim": True}
    assert op.attrs == {"axis": 1, "keep_dim": False}
    assert_reduced(other(x, y), x, y, 0, True)
    np.testing.assert_array_equal(op(x, y), before)
    assert op.infer_shape((5, 6), (5, 6)) == (5,) and other.infer_shape((5, 6), (5, 6)) == (1, 6)


def test_repr_and_build_information(add_reduce):
    """repr names the function and the attributes; command, log, artifact.path, source (the compiled text) and
    source_path describe the build."""
    op = add_reduce[(1, False)]
    text = repr(op)
    assert "CustomKernel" in text and "axis=1" in text and "keep_dim=False" in text
    assert op.name == "CustomKernel"
    assert isinstance(op.command, list) and str(ADD_REDUCE_SRC) in op.command
    assert "-D_GLIBCXX_USE_CXX11_ABI=0" in op.command and "-fPIC" in op.command
    assert isinstance(op.log, str)
    assert op.artifact.path.is_file() and op.artifact.path.suffix == ".so"
    assert op.source == ADD_REDUCE_SRC.read_text()
    assert Path(op.source_path) == ADD_REDUCE_SRC
    assert str(op.artifact.path) in op.command


def test_flags_o3_gives_same_numbers(add_reduce, rng):
    """A build with flags=["-O3"] is a different library (flag in its command) computing the same numbers."""
    fast = aotbench.Custom(f"{ADD_REDUCE_SRC}:CustomKernel", None, np.float32, attrs={"axis": 0, "keep_dim": False},
                           flags=["-O3"])
    slow = add_reduce[(0, False)]
    assert "-O3" in fast.command and "-O3" not in slow.command
    assert fast.artifact.path != slow.artifact.path
    for _ in range(3):
        x = rng.standard_normal(random_shape(rng, 2, 1, 64)).astype(np.float32)
        y = rng.standard_normal(x.shape).astype(np.float32)
        np.testing.assert_array_equal(fast(x, y), slow(x, y))


def test_an_op_pickled_before_the_layered_layout_still_loads(rng):
    """Old pickles name aotbench.spec / aotbench.reg / aotbench.attrs: they load into today's op."""
    import pickle

    reg = aotbench.CustomRegOp("k").input(0, "x").input(0, "y").output(0, "z").attr("axis", "required", "int",
                                                                                    value=1).get_op_info()
    op = aotbench.Custom(f"{ADD_REDUCE_SRC}:CustomKernel", None, np.float32, reg_info=reg,
                         attrs={"keep_dim": False})
    data = pickle.dumps(op, protocol=2)
    old = (data.replace(b"aotbench.spec.spec\n", b"aotbench.spec\n").replace(b"aotbench.spec.registration\n", b"aotbench.reg\n")
           .replace(b"aotbench.native.attrs\n", b"aotbench.attrs\n"))
    assert old != data and b"aotbench.spec\n" in old
    again = pickle.loads(old)
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(again(x, y), (x + y).sum(axis=1), rtol=1e-5, atol=1e-5)
