"""aotbench's own DLPack reader and producer (aotbench.native.dlpack), against a producer of the test's own
(ctypes structures whose deleter counts its calls), numpy's ``from_dlpack`` and ``__dlpack__``, and JAX."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

from aotbench import ArgumentTypeError
from aotbench.native import dlpack

ml_dtypes = pytest.importorskip("ml_dtypes")

_NAME = {False: ctypes.create_string_buffer(b"dltensor"), True: ctypes.create_string_buffer(b"dltensor_versioned")}
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Producer:
    """A DLPack producer written here, not by aotbench: the tensor describes ``array``'s memory (or what the
    keyword arguments say instead), and ``deleted`` counts the deleter's calls, per tensor address."""

    def __init__(self, array: np.ndarray, *, versioned: bool = False, read_only: bool = False,
                 device: tuple[int, int] = (1, 0), code_bits: tuple[int, int, int] | None = None,
                 strides: tuple[int, ...] | None = None, null_data: bool = False):
        self.null_data = null_data
        self.array, self.versioned, self.read_only, self.device = array, versioned, read_only, device
        self.code_bits = code_bits
        self.strides = strides
        self.deleted: dict[int, int] = {}
        self._keep: list = []
        self._deleter = _DELETER(self._delete)

    def _delete(self, address: int) -> None:
        self.deleted[address] = self.deleted.get(address, 0) + 1

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def capsule(self):
        a = self.array
        managed = dlpack.DLManagedTensorVersioned() if self.versioned else dlpack.DLManagedTensor()
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        t = managed.dl_tensor
        t.data = None if self.null_data else a.ctypes.data
        t.device = dlpack.DLDevice(*self.device)
        t.ndim = a.ndim
        code, bits = dlpack.dlpack_dtype(a.dtype)
        lanes = 1
        if self.code_bits is not None:
            code, bits, lanes = self.code_bits
        t.dtype = dlpack.DLDataType(code, bits, lanes)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * max(a.ndim, 1))(*self.strides)
            t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        managed.deleter = ctypes.cast(self._deleter, ctypes.c_void_p).value
        if self.versioned:
            managed.version = dlpack.DLPackVersion(1, 0)
            managed.flags = dlpack.READ_ONLY if self.read_only else 0
        self._keep.append((managed, shape, strides))
        return _new_capsule(ctypes.addressof(managed), ctypes.addressof(_NAME[self.versioned]), None)

    def calls(self) -> int:
        return sum(self.deleted.values())


class LegacyProducer(Producer):
    def __dlpack__(self, stream=None):  # no max_version: a producer from before DLPack 1.0
        assert stream is None
        return self.capsule()


class VersionedProducer(Producer):
    def __init__(self, array, **kw):
        super().__init__(array, versioned=True, **kw)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        assert stream is None and max_version == (1, 0)
        return self.capsule()


@pytest.mark.parametrize("kind", [LegacyProducer, VersionedProducer])
def test_view_shares_memory_and_the_deleter_runs_exactly_once(kind, rng):
    data = rng.standard_normal((4, 6)).astype(np.float32)
    producer = kind(data)
    view = dlpack.to_numpy(producer)
    assert view.ctypes.data == data.ctypes.data and view.shape == data.shape and view.dtype == data.dtype
    np.testing.assert_array_equal(view, data)
    part = view[1:, ::2]  # a view of the view keeps the tensor too
    del view
    gc.collect()
    assert producer.calls() == 0
    np.testing.assert_array_equal(part, data[1:, ::2])
    del part
    gc.collect()
    assert list(producer.deleted.values()) == [1]
    second = dlpack.to_numpy(producer)  # another capsule, another tensor: its own deleter call
    del second
    gc.collect()
    assert sorted(producer.deleted.values()) == [1, 1]


def test_capsule_is_marked_used_and_cannot_be_read_twice(rng):
    producer = LegacyProducer(rng.standard_normal(5))
    capsule = producer.__dlpack__()
    view = dlpack.from_capsule(capsule)
    assert '"used_dltensor"' in repr(capsule)
    with pytest.raises(ArgumentTypeError, match="consumed already"):
        dlpack.from_capsule(capsule)
    del view
    gc.collect()
    assert producer.calls() == 1


def test_read_only_flag_is_respected(rng):
    data = rng.standard_normal(7)
    view = dlpack.to_numpy(VersionedProducer(data, read_only=True))
    assert not view.flags.writeable and view.ctypes.data == data.ctypes.data
    assert dlpack.to_numpy(VersionedProducer(data)).flags.writeable


def test_strides_in_elements_are_honoured(rng):
    base = rng.standard_normal((5, 8)).astype(np.float64)
    # the transpose of a 5x8 row-major matrix: shape (8, 5), strides (1, 8) elements
    producer = LegacyProducer(base.T, strides=(1, 8))
    view = dlpack.to_numpy(producer)
    assert view.strides == (8, 64) and not view.flags.c_contiguous
    np.testing.assert_array_equal(view, base.T)


@pytest.mark.parametrize("code_bits, words", [((17, 4, 1), "float4_e2m1fn"), ((2, 32, 4), "4 lanes"),
                                              ((3, 64, 1), "opaque handle"), ((2, 8, 1), "float of 8 bits")])
def test_unsupported_dtype_is_named_and_the_tensor_released(code_bits, words, rng):
    producer = LegacyProducer(rng.standard_normal(4).astype(np.float32), code_bits=code_bits)
    with pytest.raises(ArgumentTypeError, match=words):
        dlpack.to_numpy(producer)
    gc.collect()
    assert producer.calls() == 1


def test_device_memory_is_refused_and_the_tensor_released(rng):
    producer = LegacyProducer(rng.standard_normal(4), device=(2, 1))  # claims cuda:1: no data is read
    with pytest.raises(ArgumentTypeError, match="cuda:1"):
        dlpack.to_numpy(producer)
    gc.collect()
    assert producer.calls() == 1


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)])
def test_zero_d_and_empty(shape, rng):
    data = np.asarray(rng.standard_normal(shape))
    producer = VersionedProducer(data)
    view = dlpack.to_numpy(producer)
    assert view.shape == shape
    np.testing.assert_array_equal(view, data)
    del view
    gc.collect()
    assert producer.calls() == 1


def test_dtype_tables_round_trip():
    names = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
             "float64", "complex64", "complex128", "bool"]
    dtypes = [np.dtype(n) for n in names] + [np.dtype(ml_dtypes.bfloat16)]
    dtypes += [np.dtype(getattr(ml_dtypes, n)) for n in dlpack.FLOAT8_CODES.values() if hasattr(ml_dtypes, n)]
    for dtype in dtypes:
        assert dlpack.numpy_dtype(*dlpack.dlpack_dtype(dtype)) == dtype
    with pytest.raises(ArgumentTypeError, match="<U3"):
        dlpack.dlpack_dtype(np.dtype("<U3"))


def exported(data: np.ndarray) -> bool:
    """Whether aotbench's export of ``data`` is still held (a consumer, or an unconsumed capsule, has it)."""
    return any(held is data for held in dlpack.held_exports())


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "int32", "uint8", "bool"])
def test_export_to_numpy_from_dlpack_without_copy(dtype, rng):
    data = np.asarray(rng.standard_normal((3, 4)) * 50).astype(getattr(ml_dtypes, dtype, dtype))
    if dtype == "bfloat16":  # numpy's own from_dlpack refuses bfloat16: read it back through aotbench's reader
        back = dlpack.to_numpy(dlpack.export(data))
    else:
        back = np.from_dlpack(dlpack.export(data))
    assert back.ctypes.data == data.ctypes.data
    assert (back.view(np.uint8) == data.view(np.uint8)).all()
    assert exported(data)
    del back
    gc.collect()
    assert not exported(data)


def test_unconsumed_capsule_releases_the_array(rng):
    data = rng.standard_normal(6)
    capsule = dlpack.export(data).__dlpack__(max_version=(1, 0))
    assert '"dltensor_versioned"' in repr(capsule)
    assert exported(data)
    del capsule
    gc.collect()
    assert not exported(data)


def test_legacy_export_of_a_read_only_array_is_a_copy(rng):
    data = rng.standard_normal(6)
    data.flags.writeable = False
    back = dlpack.to_numpy(dlpack.export(data))  # our reader asks for a versioned tensor: flag kept
    assert back.ctypes.data == data.ctypes.data and not back.flags.writeable
    legacy = dlpack.from_capsule(dlpack.export(data).__dlpack__())  # legacy cannot say read-only: a copy
    assert legacy.ctypes.data != data.ctypes.data and legacy.flags.writeable
    np.testing.assert_array_equal(legacy, data)


# -- JAX, a real producer and consumer ----------------------------------------------------------------------
def test_jax_bfloat16_and_float8_read_without_copy(rng):
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.asarray(rng.standard_normal((5, 3)).astype(ml_dtypes.bfloat16))
    view = dlpack.to_numpy(x)
    assert view.dtype == np.dtype(ml_dtypes.bfloat16) and view.ctypes.data == x.unsafe_buffer_pointer()
    assert (view.view(np.uint16) == np.asarray(x).view(np.uint16)).all()
    f8 = jnp.asarray(rng.standard_normal(9).astype(ml_dtypes.float8_e4m3fn))
    got = dlpack.to_numpy(f8)
    assert got.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert (got.view(np.uint8) == np.asarray(f8).view(np.uint8)).all()


def test_jax_takes_an_aligned_export_without_copy(rng):
    jnp = pytest.importorskip("jax.numpy")
    raw = np.empty(4 * 7 * 2 + 64, np.uint8)
    shift = -raw.ctypes.data % 64
    out = raw[shift:shift + 56].view(ml_dtypes.bfloat16).reshape(4, 7)
    out[...] = rng.standard_normal((4, 7)).astype(ml_dtypes.bfloat16)
    j = jnp.from_dlpack(dlpack.export(out))
    assert j.dtype == jnp.bfloat16 and j.unsafe_buffer_pointer() == out.ctypes.data
    assert (np.asarray(j).view(np.uint16) == out.view(np.uint16)).all()
    del j
    gc.collect()
    assert not any(held is out for held in dlpack.held_exports())


@pytest.mark.parametrize("kind", [LegacyProducer, VersionedProducer])
def test_a_non_empty_tensor_without_data_is_refused_and_released(kind, rng):
    """A NULL data pointer for a tensor with elements is an error, never an array of uninitialised memory."""
    shape = tuple(int(d) for d in rng.integers(1, 9, size=2))
    producer = kind(rng.standard_normal(shape).astype(np.float32), null_data=True)
    with pytest.raises(ArgumentTypeError, match="no data"):
        dlpack.to_numpy(producer)
    gc.collect()
    assert producer.calls() == 1
