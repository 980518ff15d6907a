"""Arrays from other libraries (aotbench.run.interop): JAX and torch inputs read without a copy (DLPack first,
bfloat16 included), outputs back in the caller's library without a copy, device and dtype errors before anything
runs, call attributes from other libraries' scalars, and the guide page's example (docs/guide/arrays.md).

The kernels below are the test's own: ``Combine`` adds two inputs of float32/float64/int32/uint8/bfloat16
(bfloat16 through float with round-to-nearest-even, as ml_dtypes rounds), ``Where`` reports the address of the
memory it was given, ``Poke`` writes into its input (a contract breach the guard reports), ``Both`` has two
outputs, ``Wide`` writes 64-bit values no 32-bit dtype holds. There is no GPU here: objects that only *report* a CUDA device stand in for GPU tensors.
"""

from __future__ import annotations

import gc
import re
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import ArgumentTypeError, ContractWarning
from aotbench.native import dlpack
from aotbench.native.attrs import AttrKind, typed
from aotbench.run import gpu, interop

ml_dtypes = pytest.importorskip("ml_dtypes")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "arrays.md"
BF16 = np.dtype(ml_dtypes.bfloat16)

SOURCE = r"""
#include <cstdint>
#include <cstring>
#include "custom_aot_extra.h"

static float bf2f(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static uint16_t f2bf(float f) {  // round to nearest even (no NaN here)
  uint32_t u; std::memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return uint16_t(u >> 16);
}
static int64_t count(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}
template <typename T> static void add(void **p, int64_t n, int out) {
  const T *x = static_cast<const T *>(p[0]), *y = static_cast<const T *>(p[1]);
  T *o = static_cast<T *>(p[out]);
  for (int64_t i = 0; i < n; i++) o[i] = T(x[i] + y[i]);
}
static int combine(void **p, int *ndims, int64_t **shapes, const char **dtypes, int out) {
  const int64_t n = count(ndims[0], shapes[0]);
  const char *t = dtypes[0];
  if (!std::strcmp(t, "float32")) add<float>(p, n, out);
  else if (!std::strcmp(t, "float64")) add<double>(p, n, out);
  else if (!std::strcmp(t, "int32")) add<int32_t>(p, n, out);
  else if (!std::strcmp(t, "uint8")) add<uint8_t>(p, n, out);
  else if (!std::strcmp(t, "bfloat16")) {
    const uint16_t *x = static_cast<const uint16_t *>(p[0]), *y = static_cast<const uint16_t *>(p[1]);
    uint16_t *o = static_cast<uint16_t *>(p[out]);
    for (int64_t i = 0; i < n; i++) o[i] = f2bf(bf2f(x[i]) + bf2f(y[i]));
  } else return 1;
  return 0;
}
extern "C" int Combine(int nparam, void **p, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  return combine(p, ndims, shapes, dtypes, 2);
}
extern "C" int Both(int nparam, void **p, int *ndims, int64_t **shapes, const char **dtypes, void *, void *) {
  std::memcpy(p[3], p[0], count(ndims[0], shapes[0]) * 4);  // float32 only
  return combine(p, ndims, shapes, dtypes, 2);
}
extern "C" int Where(int nparam, void **p, int *, int64_t **, const char **, void *, void *) {
  static_cast<int64_t *>(p[1])[0] = reinterpret_cast<int64_t>(p[0]);
  return 0;
}
extern "C" int Wide(int nparam, void **p, int *ndims, int64_t **shapes, const char **, void *, void *) {
  const float *x = static_cast<const float *>(p[0]);
  for (int64_t i = 0; i < count(ndims[0], shapes[0]); i++) {  // values 32-bit types cannot hold
    static_cast<double *>(p[1])[i] = double(x[i]) * 1e300;
    static_cast<int64_t *>(p[2])[i] = (int64_t(1) << 40) + i;
    static_cast<uint64_t *>(p[3])[i] = (uint64_t(1) << 63) + i;
    static_cast<float *>(p[4])[i] = x[i];
  }
  return 0;
}
extern "C" int Poke(int nparam, void **p, int *ndims, int64_t **shapes, const char **, void *, void *) {
  float *x = static_cast<float *>(p[0]);
  const int64_t n = count(ndims[0], shapes[0]);
  std::memcpy(p[1], x, n * 4);
  if (n) x[0] = -1.0f;
  return 0;
}
"""


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("interop") / "interop.cc"
    path.write_text(SOURCE)
    return path


@pytest.fixture(scope="module")
def combine(source):
    return aotbench.Custom(f"{source}:Combine", lambda x, y: x, None)


@pytest.fixture(scope="module")
def where(source):
    return aotbench.Custom(f"{source}:Where", (1,), np.int64)


def bits(a) -> np.ndarray:
    """An array's bytes as unsigned words of its item size (a bit-for-bit comparison)."""
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}")


def expected_sum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype == BF16:  # the kernel adds in float and rounds to nearest even, as ml_dtypes does
        return (x.astype(np.float32) + y.astype(np.float32)).astype(BF16)
    return (x + y).astype(x.dtype)


def random(rng, dtype, shape) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        lo, hi = (0, 256) if dtype == np.uint8 else (-(2**30), 2**30)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 8).astype(dtype)


def jax_pointer(a) -> int:
    return a.unsafe_buffer_pointer()


def exported(pointer: int) -> bool:
    """Whether a consumer holds an array aotbench exported at ``pointer`` (its output, not a copy of it)."""
    return any(a.ctypes.data == pointer for a in dlpack.held_exports())


# -- JAX in, JAX out --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [BF16, np.float32, np.float64, np.int32, np.uint8], ids=str)
def test_jax_round_trip_bit_for_bit(combine, rng, dtype):
    with jax.enable_x64(np.dtype(dtype) == np.float64):  # JAX makes float64 arrays only when asked to
        for shape in [(3, 5), (int(rng.integers(1, 40)),)]:
            for _ in range(3):  # the guarded first call, then the plan's calls
                x, y = random(rng, dtype, shape), random(rng, dtype, shape)
                out = combine(jnp.asarray(x), jnp.asarray(y))
                assert isinstance(out, jax.Array) and out.dtype == dtype and out.shape == shape
                assert (bits(out) == bits(expected_sum(x, y))).all()


def test_jax_inputs_are_not_copied_and_outputs_not_copied(combine, where, rng):
    x = jnp.asarray(random(rng, BF16, (64,)))
    with jax.enable_x64(True):  # Where's int64 output: JAX keeps 64-bit values only when asked to
        for _ in range(2):
            address = where(x)
            assert isinstance(address, jax.Array) and int(address[0]) == jax_pointer(x)
    y = jnp.asarray(random(rng, BF16, (64,)))
    for _ in range(3):
        out = combine(x, y)
        assert jax_pointer(out) % 64 == 0 and exported(jax_pointer(out))  # JAX aliases aotbench's buffer
    del out
    gc.collect()


def test_mixed_numpy_and_jax_gives_jax_and_numpy_stays_numpy(combine, rng):
    x, y = random(rng, np.float32, (4, 4)), random(rng, np.float32, (4, 4))
    assert isinstance(combine(x, jnp.asarray(y)), jax.Array)
    assert isinstance(combine(jnp.asarray(x), y), jax.Array)
    plain = combine(x, y)
    assert type(plain) is np.ndarray
    np.testing.assert_array_equal(plain, x + y)


def test_tuple_outputs_stay_a_tuple(source, rng):
    op = aotbench.Custom(f"{source}:Both", lambda x, y: (x, x), (np.float32, np.float32))
    x, y = random(rng, np.float32, (6,)), random(rng, np.float32, (6,))
    for _ in range(2):
        out = op(jnp.asarray(x), jnp.asarray(y))
        assert isinstance(out, tuple) and len(out) == 2 and all(isinstance(o, jax.Array) for o in out)
        np.testing.assert_array_equal(np.asarray(out[0]), x + y)
        np.testing.assert_array_equal(np.asarray(out[1]), x)


def test_jax_without_x64_gets_64_bit_outputs_as_numpy_with_every_value(source, rng):
    op = aotbench.Custom(f"{source}:Wide", lambda x: (x, x, x, x), (np.float64, np.int64, np.uint64, np.float32))
    x = random(rng, np.float32, (int(rng.integers(2, 30)),))
    n = np.arange(x.size)
    want = (x.astype(np.float64) * 1e300, 2**40 + n, np.uint64(2**63) + n.astype(np.uint64), x)
    assert not jax.config.jax_enable_x64
    for _ in range(2):  # the guarded first call, then the plan's
        with pytest.warns(aotbench.NarrowingWarning) as record:
            out = op(jnp.asarray(x))
        assert [type(o) for o in out[:3]] == [np.ndarray] * 3 and isinstance(out[3], jax.Array)
        for got, expected in zip(out, want):
            np.testing.assert_array_equal(np.asarray(got), expected, strict=True)
        texts = sorted(str(w.message) for w in record)
        assert len(texts) == 3 and all("jax_enable_x64" in t for t in texts)
        assert [t.split("dtype ")[1].split(" ")[0] for t in texts] == ["float64", "int64", "uint64"]
        assert {w.filename for w in record} == {__file__}  # the warning names the caller's line
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("error", aotbench.NarrowingWarning)
        out = op(jnp.asarray(x))
        assert all(isinstance(o, jax.Array) for o in out)
        for got, expected in zip(out, want):
            np.testing.assert_array_equal(np.asarray(got), expected, strict=True)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0)])
def test_zero_d_and_empty(combine, rng, shape):
    x, y = random(rng, np.float32, shape), random(rng, np.float32, shape)
    for _ in range(2):
        out = combine(jnp.asarray(x), jnp.asarray(y))
        assert isinstance(out, jax.Array) and out.shape == shape
        np.testing.assert_array_equal(np.asarray(out), x + y)


def test_threads_call_one_op_with_jax_inputs(combine, rng):
    inputs = [(random(rng, BF16, (33,)), random(rng, BF16, (33,))) for _ in range(8)]
    wrong: list = []

    def work(k: int) -> None:
        x, y = inputs[k]
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        for _ in range(25):
            out = combine(jx, jy)
            if not (isinstance(out, jax.Array) and (bits(out) == bits(expected_sum(x, y))).all()):
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


# -- torch (when installed) -------------------------------------------------------------------------------------
def test_torch_in_torch_out_without_copy(combine, where, rng):
    torch = pytest.importorskip("torch")
    x, y = random(rng, BF16, (5, 7)), random(rng, BF16, (5, 7))
    tx, ty = (torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for a in (x, y))
    for _ in range(3):
        out = combine(tx, ty)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
        assert (out.view(torch.int16).numpy().view(np.uint16) == bits(expected_sum(x, y))).all()
        assert exported(out.data_ptr())
    assert int(where(tx)[0]) == tx.data_ptr()


def test_transposed_torch_tensor_is_copied_to_c_order(combine, where, rng):
    torch = pytest.importorskip("torch")
    x = random(rng, np.float32, (6, 4))
    t = torch.from_numpy(x).T  # (4, 6), not contiguous
    y = random(rng, np.float32, (4, 6))
    for _ in range(2):
        out = combine(t, torch.from_numpy(y))
        assert isinstance(out, torch.Tensor)
        np.testing.assert_array_equal(out.numpy(), x.T + y)
    assert int(where(t)[0]) != t.data_ptr()  # the kernel read a C-ordered copy
    np.testing.assert_array_equal(t.numpy(), x.T)


def test_first_foreign_library_decides(combine, rng):
    torch = pytest.importorskip("torch")
    x, y = random(rng, np.float32, (3,)), random(rng, np.float32, (3,))
    assert isinstance(combine(jnp.asarray(x), torch.from_numpy(y)), jax.Array)
    assert isinstance(combine(x, torch.from_numpy(y)), torch.Tensor)


def test_torch_tensor_that_requires_grad_is_a_clear_error(combine):
    torch = pytest.importorskip("torch")
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(ArgumentTypeError, match=r"input 0 \(a torch Tensor\) could not be read through DLPack"):
        combine(t, t)


# -- a read-only tensor written by its kernel -------------------------------------------------------------------
class Held:
    """Only DLPack: numpy's own versioned export of ``array`` (read-only when the array is)."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack__(self, **kw):
        return self.array.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_read_only_dlpack_input_written_by_the_kernel(source, rng):
    op = aotbench.Custom(f"{source}:Poke", lambda x: x, np.float32)
    data = random(rng, np.float32, (9,))
    data.flags.writeable = False
    kept = data.copy()
    with pytest.warns(ContractWarning) as caught:
        out = op(Held(data))
    text = str(caught[0].message)
    assert "input 0" in text and "it is read-only, so the kernel wrote into a copy and the caller's array is " \
        "unchanged" in text
    np.testing.assert_array_equal(data, kept)
    np.testing.assert_array_equal(out, kept)
    again = op(Held(data))  # the plan's calls: the runtime refuses the read-only buffer, a copy is passed
    np.testing.assert_array_equal(again, kept)
    np.testing.assert_array_equal(data, kept)


# -- errors before anything runs ---------------------------------------------------------------------------------
class CudaStandIn:
    """A stand-in for a GPU tensor (there is no GPU here): it only reports a CUDA device through DLPack."""

    def __dlpack_device__(self):
        return (2, 1)

    def __dlpack__(self, **kw):
        raise AssertionError("a tensor on another device must not be read")


class CaiStandIn:
    """A stand-in for a GPU array that has only ``__cuda_array_interface__`` (no GPU here)."""

    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0x1000, False), "version": 3,
                                "stream": None}


def test_gpu_tensor_to_a_cpu_op(combine, rng):
    x = random(rng, np.float32, (3,))
    with pytest.raises(ArgumentTypeError) as info:
        combine(x, CudaStandIn())
    text = str(info.value)
    assert "input 1" in text and "CudaStandIn" in text and "cuda:1" in text and "runs on the CPU" in text
    with pytest.raises(ArgumentTypeError, match=r"input 0 .*CaiStandIn.*GPU memory.*runs on the CPU"):
        combine(CaiStandIn(), x)


def test_move_hints_name_the_library(rng):
    torch = pytest.importorskip("torch")
    t = torch.ones(2)
    error = interop.device_error(0, t, "cuda:0 memory", "on the CPU")
    assert "t.cpu()" in str(error) and "a torch Tensor" in str(error)
    assert "jax.device_put" in str(interop.device_error(2, jnp.ones(2), "cuda:0 memory", "on the CPU"))
    error = interop.device_error(0, t, "cpu memory", "on a GPU")  # a CPU tensor given to a gpu op
    assert "t.cuda()" in str(error)
    assert 'jax.devices("gpu")' in str(interop.device_error(0, jnp.ones(2), "cpu memory", "on a GPU"))


def test_cpu_tensor_to_a_gpu_op_is_refused_before_cupy_reads_it():
    class NoCupy:  # device_array refuses a host tensor before it asks cupy anything (no GPU here)
        def __getattr__(self, name):
            raise AssertionError(f"cupy.{name} used")

    torch = pytest.importorskip("torch")
    with pytest.raises(ArgumentTypeError, match=r"input 3 is a torch Tensor in cpu memory.*on a GPU.*t\.cuda\(\)"):
        gpu.device_array(NoCupy(), torch.ones(3), 3)
    with pytest.raises(ArgumentTypeError, match=r"a jax ArrayImpl in cpu memory"):
        gpu.device_array(NoCupy(), jnp.ones(3), 0)
    assert gpu.device_array(NoCupy(), np.ones(3), 0) is None  # numpy: copied by the gpu path, as before


class RecordingCupy:
    """Records what the gpu path asks of cupy when it waits for a producer's stream (no GPU here)."""

    def __init__(self):
        self.log: list = []
        outer = self

        class Event:
            def __init__(self, **kw):
                outer.log.append(("event", kw))

            def record(self, stream):
                outer.log.append(("record", stream.ptr))

        class ExternalStream:
            def __init__(self, ptr):
                self.ptr = ptr

        class Current:
            def wait_event(self, event):
                outer.log.append(("wait", type(event).__name__))

        self.cuda = type("cuda", (), {"Event": Event, "ExternalStream": ExternalStream,
                                      "get_current_stream": staticmethod(lambda: Current())})


def test_cuda_array_interface_stream_is_waited_for(rng):
    stream = int(rng.integers(3, 2**40))
    cp = RecordingCupy()
    gpu.wait_for_producer(cp, {"version": 3, "stream": stream})
    assert [entry[0] for entry in cp.log] == ["event", "record", "wait"] and cp.log[1] == ("record", stream)
    cp = RecordingCupy()
    gpu.wait_for_producer(cp, {"version": 3, "stream": None})  # None: the producer needs no wait
    gpu.wait_for_producer(cp, {"version": 2})
    assert cp.log == []
    with pytest.raises(aotbench.ArgumentValueError, match="stream 0"):
        gpu.wait_for_producer(cp, {"version": 3, "stream": 0})


def test_unsupported_dtype_names_it_and_the_supported_list(combine, rng):
    f8 = jnp.asarray(rng.standard_normal(4).astype(ml_dtypes.float8_e4m3fn))
    with pytest.raises(ArgumentTypeError) as info:
        combine(f8, f8)
    text = str(info.value)
    assert "input 0 (a jax ArrayImpl)" in text and "float8_e4m3fn" in text and "supported:" in text
    assert "bfloat16" in text.split("supported:")[1]


def test_object_without_protocols_names_its_type(combine, rng):
    class Opaque:
        pass

    x = random(rng, np.float32, (2,))
    with pytest.raises(ArgumentTypeError) as info:
        combine(x, Opaque())
    text = str(info.value)
    assert "input 1" in text and "Opaque" in text and "__dlpack__" in text and "np.asarray" in text
    assert "dtype object" not in text
    with pytest.raises(ArgumentTypeError, match=r"input 0 is a list that numpy reads only as Python objects"):
        combine([1.0, "a", None], x)


def test_broken_dlpack_device_is_named_not_called_missing(combine, rng):
    class Raises:
        def __dlpack__(self, **kwargs):
            raise AssertionError("never reached: the device is asked first")

        def __dlpack_device__(self):
            raise RuntimeError(f"device lost {token}")

    class NoDevice:
        def __dlpack__(self, **kwargs):
            raise AssertionError("never reached")

    class Odd(Raises):
        def __dlpack_device__(self):
            return "cpu"

    token = str(rng.integers(1 << 30))
    x = random(rng, np.float32, (3,))
    class RaisingProperty(NoDevice):
        @property
        def __dlpack_device__(self):
            raise RuntimeError(f"property lost {token}")

    class Flaky(NoDevice):
        calls = 0

        def __dlpack_device__(self):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("first time")
            return (1, 0)

    expected = {Raises: f"__dlpack_device__ raised RuntimeError: device lost {token}",
                NoDevice: "has __dlpack__ but no __dlpack_device__", Odd: "__dlpack_device__() answered 'cpu'",
                RaisingProperty: f"__dlpack_device__ raised RuntimeError: property lost {token}",
                Flaky: "__dlpack_device__ failed when aotbench first asked, then answered (1, 0)"}
    for kind, words in expected.items():
        with pytest.raises(ArgumentTypeError) as info:
            combine(x, kind())
        text = str(info.value)
        assert words in text and "input 1" in text and kind.__name__ in text and "none of" not in text


def test_traced_jax_arrays_name_the_way_out(combine, rng):
    x = random(rng, np.float32, (6,))
    y = random(rng, np.float32, (6,))
    for transform in (jax.jit, jax.vmap, jax.grad):
        with pytest.raises(ArgumentTypeError) as info:
            transform(lambda a: combine(a, y).sum() if transform is jax.grad else combine(a, y))(jnp.asarray(x))
        assert "Tracer" in str(info.value) and "jax.pure_callback(op" in str(info.value)
    # the way out the message gives works, under jit and vmap
    def through(a, b):
        return jax.pure_callback(combine, jax.ShapeDtypeStruct(a.shape, a.dtype), a, b, vmap_method="sequential")

    traced = jax.jit(lambda a: through(a, y) * 2)
    np.testing.assert_array_equal(np.asarray(traced(jnp.asarray(x))), (x + y) * 2)
    rows, more = random(rng, np.float32, (3, 6)), random(rng, np.float32, (3, 6))
    np.testing.assert_array_equal(np.asarray(jax.vmap(through)(jnp.asarray(rows), jnp.asarray(more))), rows + more)


def test_traced_call_attribute_says_how_to_give_a_value(scale_add, rng):
    x = random(rng, np.float32, (4,))
    for transform in (jax.jit, jax.grad):
        with pytest.raises(aotbench.AttrError) as info:
            transform(lambda s: scale_add(x, x, s).sum() if transform is jax.grad else scale_add(x, x, s))(0.5)
        assert "attribute 'alpha' is a " in str(info.value) and "static_argnums" in str(info.value)
    alpha = float(rng.standard_normal())  # the way out: a static argument
    static = jax.jit(lambda s: jax.pure_callback(scale_add, jax.ShapeDtypeStruct(x.shape, x.dtype), x, x, s),
                     static_argnums=0)
    np.testing.assert_allclose(np.asarray(static(alpha)), np.float32(alpha) * x + x, rtol=1e-6, atol=1e-6)


def test_buffer_protocol_and_array_interface_still_read(combine, rng):
    x = random(rng, np.float32, (8,))
    y = random(rng, np.float32, (8,))

    class Interface:
        def __init__(self, a):
            self.__array_interface__ = a.__array_interface__
            self._keep = a

    out = combine(memoryview(bytearray(x.tobytes())).cast("f"), Interface(y))
    assert type(out) is np.ndarray  # neither library has a from_dlpack: numpy
    np.testing.assert_array_equal(out, x + y)


# -- call attributes ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scale_add():
    path = ROOT / "tests" / "support" / "kernels" / "op_attrs.cc"
    reg = (aotbench.CustomRegOp("ScaleAdd").input(0, "x").input(1, "y").output(0, "out")
           .attr("alpha", "required", "float").target("CPU").get_op_info())
    return aotbench.Custom(f"{path}:ScaleAdd", lambda x, y: x, None, reg_info=reg)


def test_scalar_attributes_from_any_library(scale_add, rng):
    x, y = random(rng, np.float32, (5,)), random(rng, np.float32, (5,))
    alpha = float(rng.standard_normal())
    values = [alpha, np.float32(alpha), np.float64(alpha), np.array(alpha), jnp.float32(alpha),
              jnp.asarray(alpha, jnp.bfloat16)]
    torch = None
    try:
        import torch
    except ImportError:
        pass
    if torch is not None:
        values += [torch.tensor(alpha), torch.tensor(alpha, dtype=torch.float64)]
    for value in values:
        want = np.float32(float(np.asarray(value, dtype=np.float64) if not hasattr(value, "__dlpack__")
                                else dlpack.to_numpy(value).astype(np.float64))) * x + y
        np.testing.assert_allclose(scale_add(x, y, value), want, rtol=1e-6, atol=1e-6)
    # an int for a float attribute is refused, never passed as another type (cupy#8485's trap)
    for value in (2, np.int32(2), jnp.int32(2)):
        with pytest.raises(aotbench.AttrError) as info:
            scale_add(x, y, value)
        assert (info.value.requested, info.value.registered) == ("float", "int64_t")


def test_typed_reads_foreign_scalars_and_arrays(rng):
    ints = rng.integers(-100, 100, size=3)
    assert typed("a", jnp.asarray(ints)) == typed("a", ints.tolist())
    assert typed("a", jnp.asarray(True)).kind is AttrKind.BOOL
    assert typed("a", jnp.int64(7) if jax.config.jax_enable_x64 else jnp.int32(7)).kind is AttrKind.INT
    assert typed("a", jnp.asarray(1.5, jnp.bfloat16)).value == 1.5

    class Broken:
        def __dlpack__(self, **kw):
            raise RuntimeError("not today")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(aotbench.AttrError, match=r"'a'.*Broken.*not today"):
        typed("a", Broken())


# -- the other runners ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_isolated_op_takes_and_returns_jax(source, rng):
    op = aotbench.Custom(f"{source}:Combine", lambda x, y: x, None, isolate=True)
    try:
        x, y = random(rng, BF16, (4, 3)), random(rng, BF16, (4, 3))
        for _ in range(2):
            out = op(jnp.asarray(x), jnp.asarray(y))
            assert isinstance(out, jax.Array) and (bits(out) == bits(expected_sum(x, y))).all()
        with pytest.raises(ArgumentTypeError, match="cuda:1"):
            op(CudaStandIn(), CudaStandIn())
    finally:
        op.close()


@pytest.mark.slow
def test_emulated_gpu_op_takes_and_returns_jax(rng):
    op = aotbench.Custom(f"{aotbench.examples_dir() / 'saxpy.cu'}:Saxpy", lambda x, y: x, np.float32,
                         attrs={"a": 1.5}, emulate=True)
    x, y = random(rng, np.float32, (37,)), random(rng, np.float32, (37,))
    for _ in range(2):
        out = op(jnp.asarray(x), jnp.asarray(y))
        assert isinstance(out, jax.Array)
        np.testing.assert_allclose(np.asarray(out), np.float32(1.5) * x + y, rtol=1e-6)
    with pytest.raises(ArgumentTypeError, match=r"cuda:1 memory, but this op runs on the CPU \(aotbench's CUDA "
                                                 r"emulator\)"):
        op(CudaStandIn(), y)


# -- on a real GPU (skipped where there is none) ------------------------------------------------------------------
@pytest.fixture(scope="module")
def saxpy_gpu():
    return aotbench.Custom(f"{aotbench.examples_dir() / 'saxpy.cu'}:Saxpy", lambda x, y: x, np.float32,
                           attrs={"a": 1.5}, emulate=False)


class CaiOnly:
    """Only the CUDA array interface of a cupy array, with the stream its data was written on."""

    def __init__(self, array, stream):
        self._array, self._stream = array, stream

    @property
    def __cuda_array_interface__(self):
        return {**self._array.__cuda_array_interface__, "stream": self._stream.ptr}


@pytest.mark.gpu
def test_gpu_cuda_array_interface_with_its_stream(saxpy_gpu, rng):
    import cupy

    x, y = random(rng, np.float32, (1 << 16,)), random(rng, np.float32, (1 << 16,))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        dx, dy = cupy.asarray(x), cupy.asarray(y)
        dx *= 2  # queued on the producer's stream: the call must wait for it
    out = saxpy_gpu(CaiOnly(dx, stream), CaiOnly(dy, stream))
    assert isinstance(out, cupy.ndarray)  # no library with a from_dlpack: cupy
    np.testing.assert_allclose(out.get(), np.float32(1.5) * (2 * x) + y, rtol=1e-6)


@pytest.mark.gpu
def test_gpu_torch_cuda_in_torch_out(saxpy_gpu, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    x, y = random(rng, np.float32, (1000,)), random(rng, np.float32, (1000,))
    for _ in range(2):
        out = saxpy_gpu(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda())
        assert isinstance(out, torch.Tensor) and out.is_cuda
        np.testing.assert_allclose(out.cpu().numpy(), np.float32(1.5) * x + y, rtol=1e-6)


@pytest.mark.gpu
def test_gpu_op_refuses_a_jax_cpu_array(saxpy_gpu, rng):
    x = jnp.asarray(random(rng, np.float32, (8,)))
    with pytest.raises(ArgumentTypeError, match=r"input 0 is a jax ArrayImpl in cpu memory.*runs on a GPU"):
        saxpy_gpu(x, x)


# -- the guide page ------------------------------------------------------------------------------------------------
def test_guide_example_runs():
    text = GUIDE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "the guide has no python example"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContractWarning)
        for block in blocks:
            exec(compile(block, str(GUIDE), "exec"), {"__name__": "guide"})


def test_check_next_call_gives_jax_back_as_a_plain_call_does(combine, rng):
    """``%%aot_kernel --check`` (op.check_next_call) returns the caller's arrays too, checked."""
    x, y = random(rng, np.float32, (3, 5)), random(rng, np.float32, (3, 5))
    combine.check_next_call = True
    out = combine(jnp.asarray(x), jnp.asarray(y))
    assert isinstance(out, jax.Array)
    np.testing.assert_array_equal(np.asarray(out), x + y)


@pytest.mark.slow
def test_profile_of_jax_inputs_after_jax_ran_finishes(combine, rng):
    """The profiled loop runs the kernel on the inputs read once, not JAX's conversion code: a sample taken while
    JAX holds the C++ unwinder's lock (its from_dlpack throws and catches an exception) would wait forever."""
    x = jnp.asarray(random(rng, np.float32, (64, 64)))
    (x + 0).block_until_ready()  # JAX has compiled and run something
    profile = combine.profile(x, x, seconds=0.3, counters=False, hot_loop=False)
    assert profile.samples > 0
