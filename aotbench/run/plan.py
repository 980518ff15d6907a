"""Plans: one prepared kernel call per concrete input signature.

:func:`make_plan` runs the shape rule (``out_shape`` or ``FInferShape``), ``FInit`` on a fresh ``AotExtra``,
allocates the workspaces, and marshals ``ndims``/``shapes``/``dtypes`` into a :class:`~aotbench.native.runtime.CallRecord`
once, so that a repeated call only allocates outputs and passes data pointers.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable

import numpy as np

from ..native import interrupts
from ..native.attrs import TypedAttr
from ..native.dtypes import dtype_string
from ..native.runtime import MAX_PARAMS, CallRecord, Runtime
from ..native.loading import KernelLibrary
from ..errors import ArgumentValueError, ShapeError, WorkspaceError
from . import forking, memory
from ..spec import rules
from ..spec.spec import OpSpec

WORKSPACE_ALIGNMENT = 64
SHAPE_PAD = 8
MAX_RANK = 64  # numpy's NPY_MAXDIMS (since numpy 2.0): an array of more dimensions cannot be made
_MAX_WORKSPACE_SLACK = 256 << 20
_p_int64 = ctypes.POINTER(ctypes.c_int64)


def workspace_allocation(requested: int) -> int:
    """Bytes actually allocated for a workspace of ``requested`` bytes.

    Generous on purpose: a kernel that asked for an element count instead of bytes writes 4x or 8x what it
    requested, so up to 8x is allocated (the padding capped at 256 MiB), in whole 512-byte blocks.
    """
    padded = requested + min(7 * requested, _MAX_WORKSPACE_SLACK) + 512
    return -(-padded // 512) * 512


class WorkspaceSet:
    """The scratch memory of one running call: a buffer per workspace and the array of their pointers the host
    reads (``address``). A plan's own set is the one in its record; others are checked out per call."""

    __slots__ = ("address", "owners", "pointer_array", "pointers")

    def __init__(self, owners: list, pointers: list[int]):
        self.owners = owners  # what keeps the memory alive (numpy arrays, device allocations)
        self.pointers = pointers
        self.pointer_array = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        self.address = ctypes.addressof(self.pointer_array)


def allocate_workspaces(name: str, sizes: list[tuple[int, int]],
                        allocate: Callable[[int], tuple[object, int]]) -> WorkspaceSet:
    """One set of workspaces of the allocated sizes in ``sizes`` ((requested, allocated) bytes each)."""
    owners, pointers = [], []
    for k, (requested, allocated) in enumerate(sizes):
        try:
            owner, pointer = allocate(allocated)
        except (MemoryError, ValueError) as exc:  # a device allocator raises MemoryError subclasses too
            raise WorkspaceError(f"{name}Init", k, requested) from exc
        owners.append(owner)
        pointers.append(pointer)
    return WorkspaceSet(owners, pointers)


class Plan:
    """A prepared call for one input signature.

    Calls of one plan may run at the same time (threads): inputs and outputs are per call, and so is scratch
    memory. The fast path runs on the plan's own workspaces, which the host lets one call hold at a time; any
    other call takes a set from :meth:`checkout` and gives it back with :meth:`checkin` (a pool that grows to
    the number of calls that ever ran at once).
    """

    __slots__ = ("__weakref__", "_allocate", "_name", "_spares", "address", "attrs", "dtype0", "extra", "fill",
                 "keepalive", "library", "n_in", "outputs", "own_workspaces", "prints", "record", "release", "runtime",
                 "shape0", "single", "workspaces")

    def __init__(self, host: Runtime, record: CallRecord, n_in: int, outputs: list[tuple[tuple[int, ...], np.dtype]],
                 keepalive: list, extra: int, workspaces: list[tuple[int, int]], attrs: list[TypedAttr],
                 own_workspaces: WorkspaceSet | None = None, name: str = "",
                 allocate: Callable[[int], tuple[object, int]] | None = None, single: bool | None = None):
        self.record = record
        self.address = ctypes.addressof(record)
        self.runtime = host  # what calls the kernel (aotbench.run.calls)
        self.library: KernelLibrary | None = None  # the library the record's function is in (set by make_plan)
        self.n_in = n_in
        self.outputs = outputs
        self.single = len(outputs) == 1 if single is None else single  # a call returns one array, not a tuple
        self.shape0, self.dtype0 = outputs[0] if outputs else ((), None)
        self.keepalive = keepalive
        self.extra = extra
        self.workspaces = workspaces  # (requested bytes, allocated bytes) per workspace
        self.attrs = attrs  # every attribute the extra holds, call attributes included (for error messages)
        self.own_workspaces = own_workspaces  # the set in the record, which the host's fast path uses
        self._name = name
        self._allocate = allocate or host_workspace
        self._spares: list[WorkspaceSet] = []
        self.prints = False  # its library can write to stdout: calls capture it (aotbench.run.prints)
        # Per output, what calls fill it with before the kernel runs (fill_values, below): set when the guarded
        # first call found unwritten outputs; such a plan is kept off the fast path's key (run.plan_cache).
        self.fill: tuple | None = None
        # The AotExtra (and, through DestructKernelData, the kernel's data) lives exactly as long as the plan.
        # (An interrupted call's plan is retired with release.detach(): its kernel data may be inconsistent.)
        self.release = weakref.finalize(self, host.free_extra, extra)

    def checkout(self) -> WorkspaceSet:
        """A set of workspaces no other running call uses (from the pool, or newly allocated)."""
        try:
            return self._spares.pop()  # atomic under the GIL, as is append
        except IndexError:
            return allocate_workspaces(self._name, self.workspaces, self._allocate)

    def checkin(self, workspaces: WorkspaceSet) -> None:
        """Give back a set from :meth:`checkout` once its call has finished with it."""
        self._spares.append(workspaces)


def fill_values(outputs: list[tuple[tuple[int, ...], np.dtype]], buffers: list) -> tuple | None:
    """What later calls of a signature fill each output with before the kernel runs (``Plan.fill``), when its
    guarded run found output elements never written or computed from memory the kernel never wrote
    (``buffers``: the guard's BufferReports): those places then show :func:`fill_value` at every call, never
    the previous contents of reused memory. None when it found neither (the outputs stay ``np.empty``)."""
    if not any(b.unwritten or b.changed for b in buffers if b.name.startswith("output")):
        return None
    return tuple(fill_value(np.dtype(dtype)) for _, dtype in outputs)


def fill_value(dtype: np.dtype) -> object:
    """The value an output of ``dtype`` is filled with (see :func:`fill_values`): NaN for floating types (what
    the guarded call showed; NaN+NaNj for complex), the smallest value for signed integers (-2147483648 for
    int32), the largest for unsigned ones (4294967295 for uint32), False for bool."""
    if dtype.kind == "c":
        return complex(np.nan, np.nan)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if dtype.kind == "i" else info.max
    if dtype.kind == "b":
        return False
    try:
        np.array(np.nan, dtype=dtype)  # float types, and bfloat16 from ml_dtypes
        return np.nan
    except (TypeError, ValueError):
        return 0


def tensor_arrays(shapes: list[tuple[int, ...]], names: list[str]):
    """ctypes ``ndims``, ``shapes`` and ``dtypes`` arrays (plus the buffers they point into).

    Every array has at least SHAPE_PAD entries and every shape buffer at least SHAPE_PAD dims, zero-filled: a
    kernel that reads a tensor or a dim it was not given (assuming two inputs, or 2-D) reads zeros and an empty
    dtype string, never a null pointer or whatever follows in memory.
    """
    n = max(len(shapes), SHAPE_PAD)
    dims = [(ctypes.c_int64 * max(len(s), SHAPE_PAD))(*s) for s in shapes]
    dims += [(ctypes.c_int64 * SHAPE_PAD)() for _ in range(n - len(shapes))]
    ndims = (ctypes.c_int * n)(*[len(s) for s in shapes])
    shape_ptrs = (_p_int64 * n)(*[ctypes.cast(d, _p_int64) for d in dims])
    dtype_strs = (ctypes.c_char_p * n)(*[s.encode() for s in names], *([b""] * (n - len(names))))
    return ndims, shape_ptrs, dtype_strs, dims


def host_workspace(nbytes: int) -> tuple[object, int]:
    """A host workspace of ``nbytes``: the array that owns it and its WORKSPACE_ALIGNMENT-aligned address."""
    raw = np.empty(nbytes + WORKSPACE_ALIGNMENT, dtype=np.uint8)
    return raw, raw.ctypes.data + (-raw.ctypes.data % WORKSPACE_ALIGNMENT)


def check_output_shape(shape: tuple[int, ...], what: str) -> tuple[int, ...]:
    """Refuse an output shape no array can have: more than MAX_RANK dimensions, or a dim outside int64."""
    if len(shape) > MAX_RANK:
        raise ShapeError(f"{what} has {len(shape)} dimensions; arrays have at most {MAX_RANK} (numpy's limit): "
                         "check the shape rule")
    for d in shape:
        if not 0 <= d <= rules.INT64_MAX:
            raise ShapeError(f"{what} is {shape}: dimension {d} is outside 0 .. 2**63 - 1 (int64_t, what the "
                             "kernel reads): check the shape rule")
    return shape


def _output_bytes(shapes: list[tuple[int, ...]], dtypes: list[np.dtype]) -> int:
    return sum(int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize for shape, dtype in zip(shapes, dtypes))


def check_memory(name: str, outputs: list[tuple[tuple[int, ...], np.dtype]], limit: int, where: str) -> None:
    """Refuse a call whose outputs need more bytes than ``limit`` in all, before any is allocated (and a shape
    numpy cannot make at all: an empty output whose other dims multiply past int64)."""
    for i, (shape, dtype) in enumerate(outputs):
        span = int(np.prod([max(d, 1) for d in shape], dtype=object)) * np.dtype(dtype).itemsize
        if span > rules.INT64_MAX:
            raise ShapeError(f"output {i} of {name} would have shape {shape} ({np.dtype(dtype)}): its dimensions "
                             "multiply past 2**63 - 1 bytes, which no array can have, even an empty one: check "
                             "the shape rule")
    sizes = [_output_bytes([shape], [dtype]) for shape, dtype in outputs]
    total = sum(sizes)
    if total <= limit:
        return
    parts = [f"output {i} {shape} {np.dtype(dtype)}: {memory.size_text(n)}"
             for i, ((shape, dtype), n) in enumerate(zip(outputs, sizes))]
    raise ShapeError(f"{name} would need {memory.size_text(total)} ({'; '.join(parts)}), more than {where} "
                     f"({memory.size_text(limit)}), so nothing was allocated and the kernel was not called: check "
                     "the shape rule and the input shapes")


def signature_key(arrays, call_attrs) -> tuple:
    """The key a plan is kept under: the inputs' shapes, dtypes and types, then the call attributes' values (by
    repr: 0.0 and -0.0 differ, and NaN equals itself). The type keeps an ndarray subclass the slow path refuses
    (a masked array) from finding the plan a plain array of its shape made."""
    key = tuple([(a.shape, a.dtype, type(a)) for a in arrays])
    if call_attrs:
        key += tuple((t.kind, repr(t.value)) for t in call_attrs)
    return key


def make_plan(spec: OpSpec, host: Runtime, lib: KernelLibrary, arrays: tuple, attrs: list[TypedAttr],
              allocate_workspace: Callable[[int], tuple[object, int]] = host_workspace,
              memory_limit: tuple[int, str] | None = None) -> Plan:
    """Prepare the call of ``lib``'s kernel for these (converted, native-order) input arrays.

    Only the arrays' ``shape`` and ``dtype`` are read, so device arrays plan the same way; ``allocate_workspace``
    says where workspaces live (host memory by default, device memory for a gpu op), ``memory_limit`` how many
    bytes they and the outputs may take there and what that limit is called (default: this machine's memory).
    """
    forking.before_run(lib)  # an OpenMP op in a child forked after OpenMP ran would hang: refused there
    limit, where = memory_limit or (memory.host_limit_bytes(), "this machine's memory")
    name = lib.name
    in_shapes = [tuple(int(d) for d in a.shape) for a in arrays]
    in_dtypes = [a.dtype for a in arrays]
    in_names = [dtype_string(d) for d in in_dtypes]
    extra = host.new_extra(attrs)
    try:
        if spec.out_shape is None:
            out_shapes = concrete_inferred_shapes(spec, host, lib, in_shapes, extra, attrs)
        else:
            out_shapes = rules.output_shapes(spec.out_shape, in_shapes, spec.n_outputs)
        out_dtypes = rules.output_dtypes(spec.out_dtype, in_dtypes, spec.n_outputs, spec.reg_info, tuple(in_names))
        for i, shape in enumerate(out_shapes):
            check_output_shape(shape, f"output {i} of {name}")
        check_memory(name, list(zip(out_shapes, out_dtypes)), limit, where)  # before Init sees the shapes
        shapes = in_shapes + out_shapes
        names = in_names + [dtype_string(d) for d in out_dtypes]
        keepalive: list = [lib]
        if lib.init:
            init_arrays = tensor_arrays(shapes, names)
            keepalive.append(init_arrays)
            host.call_init(lib.init, *init_arrays[:3], extra, function=f"{name}Init", attrs=attrs)
        requested = host.workspace_sizes(extra)
        workspaces = [(size, workspace_allocation(size)) for size in requested]
        needed = sum(allocated for _, allocated in workspaces) + _output_bytes(out_shapes, out_dtypes)
        if workspaces and needed > limit:  # refused before allocating: a huge np.empty may "succeed" and kill us
            k = max(range(len(requested)), key=requested.__getitem__)
            raise WorkspaceError(f"{name}Init", k, requested[k],
                                 f"with the outputs that is {memory.size_text(needed)}, more than {where} "
                                 f"({memory.size_text(limit)})")
        own = allocate_workspaces(name, workspaces, allocate_workspace)  # the fast path's set, in the record
        nparam = len(shapes) + len(requested)
        if nparam > MAX_PARAMS:
            raise ArgumentValueError(f"{name} would get {nparam} params; at most {MAX_PARAMS} are supported")
        # The kernel sees one 1-D uint8 entry per workspace after the tensors (a safe superset of MindSpore).
        ndims, shape_ptrs, dtype_strs, dims = tensor_arrays(
            shapes + [(size,) for size in requested], names + ["uint8"] * len(requested))
        params = (ctypes.c_void_p * max(nparam, 1))()
        params[len(shapes):nparam] = own.pointers
        nbytes = (ctypes.c_int64 * max(len(shapes), 1))(
            *[int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in zip(shapes, in_dtypes + out_dtypes)])
        record = CallRecord(fn=lib.kernel, nparam=nparam, n_in=len(arrays), n_out=len(out_shapes),
                            params=ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p)),
                            ndims=ctypes.cast(ndims, ctypes.POINTER(ctypes.c_int)),
                            shapes=ctypes.cast(shape_ptrs, ctypes.POINTER(_p_int64)),
                            dtypes=ctypes.cast(dtype_strs, ctypes.POINTER(ctypes.c_char_p)),
                            stream=None, extra=extra, nbytes=ctypes.cast(nbytes, _p_int64),
                            fp_set=lib.fp_set, fp_clear=lib.fp_clear, flags=1 if lib.signals else 0,
                            label=f"op {name} (kernel {name} in {lib.path})".encode(errors="replace"))
        keepalive += [params, nbytes, ndims, shape_ptrs, dtype_strs, dims]
        plan = Plan(host, record, len(arrays), list(zip(out_shapes, out_dtypes)), keepalive, extra, workspaces,
                    attrs, own, name, allocate_workspace, single=not spec.returns_tuple)
        plan.prints = lib.prints
        plan.library = lib
        interrupts.PLANS[plan.address] = plan  # how an abandoned call's plan is found (and retired)
    except KeyboardInterrupt:  # perhaps an Init abandoned mid-run: its kernel data is not trusted to a destructor
        raise
    except BaseException:
        host.free_extra(extra)
        raise
    return plan


def call_infer_shape(spec: OpSpec, host: Runtime, lib: KernelLibrary, in_shapes: list[tuple[int, ...]], extra: int,
                     attrs: list[TypedAttr]) -> list[list[int]]:
    """What ``FInferShape`` returns for these input shapes (-1 and -2 kept), one list per output."""
    ndims, shape_ptrs, _, _dims = tensor_arrays(list(in_shapes), ["float32"] * len(in_shapes))  # no dtypes used
    raw = host.call_infer(lib.infer_shape, spec.n_outputs > 1, ndims, shape_ptrs, extra,
                          function=f"{lib.name}InferShape", attrs=attrs)
    if len(raw) != spec.n_outputs:
        raise ShapeError(f"{lib.name}InferShape returned {len(raw)} shapes for an op with {spec.n_outputs} outputs")
    return raw


def concrete_inferred_shapes(spec: OpSpec, host: Runtime, lib: KernelLibrary, in_shapes: list[tuple[int, ...]],
                             extra: int, attrs: list[TypedAttr]) -> list[tuple[int, ...]]:
    """``FInferShape``'s shapes for concrete inputs, refusing the -1/-2 that only unknown inputs justify."""
    out = []
    for i, dims in enumerate(call_infer_shape(spec, host, lib, in_shapes, extra, attrs)):
        if any(d < 0 for d in dims):
            raise ShapeError(
                f"{lib.name}InferShape returned {tuple(dims)} for output {i} with concrete input shapes "
                f"{tuple(in_shapes)}: -1 (unknown dim) and -2 (unknown rank) are only valid when an input is "
                "itself unknown. Fix InferShape or pass out_shape=.")
        out.append(check_output_shape(tuple(dims), f"output {i} of {lib.name} (from {lib.name}InferShape)"))
    return out
