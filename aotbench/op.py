"""The op: the callable a user holds.

It owns the attributes, the output rules and a cache of *plans*, one per concrete input signature (shapes,
dtypes, positional attribute values). A plan holds the AotExtra that ``FInit`` ran on, the workspaces, and
the marshalled ``ndims``/``shapes``/``dtypes`` arrays, so a repeated call only allocates the outputs, writes
data pointers and makes one ctypes call.
"""

from __future__ import annotations

import ctypes
import numbers
import threading
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import rules
from .attrs import AttrKind, TypedAttr, describe, typed
from .build import Artifact
from .dtypes import dtype_string
from .errors import ArgumentError, ShapeError, WorkspaceError
from .host import BAD_BUFFER, MAX_PARAMS, CallRecord, Host
from .library import KernelLibrary
from .reg import OpInfo

MAX_PLANS = 64
WORKSPACE_ALIGNMENT = 64
_MAX_WORKSPACE_SLACK = 256 << 20

_p_int64 = ctypes.POINTER(ctypes.c_int64)


@dataclass(frozen=True)
class OpSpec:
    """Everything needed to make the op again (``with_attrs``, pickling): the recipe, not the build."""

    func: str
    out_shape: Any = None
    out_dtype: Any = None
    reg_info: OpInfo | None = None
    attrs: tuple[TypedAttr, ...] = ()
    target: str = "cpu"
    flags: tuple[str, ...] = ()
    cache_dir: Path | None = None
    n_outputs: int = 1
    call_attrs: tuple[str, ...] = field(default=())


def workspace_allocation(requested: int) -> int:
    """Bytes actually allocated for a workspace of ``requested`` bytes.

    Generous on purpose: a kernel that asked for an element count instead of bytes writes 4x or 8x what it
    requested, so up to 8x is allocated (the padding capped at 256 MiB), in whole 512-byte blocks.
    """
    padded = requested + min(7 * requested, _MAX_WORKSPACE_SLACK) + 512
    return -(-padded // 512) * 512


class _Plan:
    """A prepared call for one input signature."""

    __slots__ = ("__weakref__", "address", "attrs", "dtype0", "extra", "keepalive", "n_in", "outputs", "record",
                 "shape0", "single", "workspaces")

    def __init__(self, host: Host, record: CallRecord, n_in: int, outputs: list[tuple[tuple[int, ...], np.dtype]],
                 keepalive: list, extra: int, workspaces: list[tuple[int, int]], attrs: list[TypedAttr]):
        self.record = record
        self.address = ctypes.addressof(record)
        self.n_in = n_in
        self.outputs = outputs
        self.single = len(outputs) == 1
        self.shape0, self.dtype0 = outputs[0] if outputs else ((), None)
        self.keepalive = keepalive
        self.extra = extra
        self.workspaces = workspaces  # (requested bytes, allocated bytes) per workspace
        self.attrs = attrs  # every attribute the extra holds, call attributes included (for error messages)
        # The AotExtra (and, through DestructKernelData, the kernel's data) lives exactly as long as the plan.
        weakref.finalize(self, host.free_extra, extra)


def _tensor_arrays(shapes: list[tuple[int, ...]], names: list[str]):
    """ctypes ``ndims``, ``shapes`` and ``dtypes`` arrays (plus the buffers they point into)."""
    n = len(shapes)
    dims = [(ctypes.c_int64 * max(len(s), 1))(*s) for s in shapes]  # a 0-d shape still gets a valid pointer
    ndims = (ctypes.c_int * max(n, 1))(*[len(s) for s in shapes])
    shape_ptrs = (_p_int64 * max(n, 1))(*[ctypes.cast(d, _p_int64) for d in dims])
    dtype_strs = (ctypes.c_char_p * max(n, 1))(*[s.encode() for s in names])
    return ndims, shape_ptrs, dtype_strs, dims


def _is_dim(d: object) -> bool:
    return isinstance(d, numbers.Integral) and not isinstance(d, bool) and int(d) >= 0


def _release(plans: dict) -> None:
    # Each plan frees its AotExtra when it dies (see _Plan), so a call still running keeps its plan alive.
    plans.clear()


class Op:
    """A compiled aot kernel bound as a Python callable: ``op(*arrays, *attr_args)``."""

    def __init__(self, spec: OpSpec, library: KernelLibrary, host: Host, artifact: Artifact | None = None,
                 source: Path | None = None):
        self._spec = spec
        self._host = host
        self._plans: dict = {}
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release, self._plans)
        self._install(library, artifact, source)

    def _install(self, library: KernelLibrary, artifact: Artifact | None, source: Path | None) -> None:
        spec = self._spec
        if spec.out_shape is None and not library.infer_shape:
            raise ShapeError(
                f"{library.name} has no {library.name}InferShape and out_shape is None, so the output shape is "
                f"unknown. Pass out_shape= (a shape, a tuple of shapes, or a function of the input shapes) or "
                f"define extern \"C\" std::vector<int64_t> {library.name}InferShape(int *ndims, int64_t **shapes, "
                "AotExtra *extra).")
        self.library = library
        self.artifact = artifact
        self.source_path = source
        self._n_inputs = len(spec.reg_info.inputs) if spec.reg_info and spec.reg_info.inputs else None
        self._attr_list = list(spec.attrs)

    # -- what was built -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.library.name

    @property
    def attrs(self) -> dict[str, Any]:
        return {a.name: a.value for a in self._spec.attrs}

    @property
    def command(self) -> list[str] | None:
        """The argv that built the library (None for a prebuilt library)."""
        return list(self.artifact.command) if self.artifact else None

    @property
    def source(self) -> str | None:
        """The kernel source text that was compiled (None for a prebuilt library)."""
        return self.artifact.source if self.artifact else None

    @property
    def log(self) -> str:
        """The compiler's output (warnings) for this build; empty for a prebuilt library."""
        return self.artifact.log if self.artifact else ""

    @property
    def spec(self) -> OpSpec:
        return self._spec

    def __repr__(self) -> str:
        attrs = ", ".join(describe(a) for a in self._spec.attrs) or "none"
        calls = f", call attrs: {', '.join(self._spec.call_attrs)}" if self._spec.call_attrs else ""
        origin = f"built {self.artifact.path.name}" if self.artifact else f"prebuilt {self.library.path}"
        return (f"<aotbench.Op {self.name} [{self._spec.target}] outputs: {self._spec.n_outputs} by "
                f"{rules.describe_rule(self._spec.out_shape)}; attrs: {attrs}{calls}; {origin}>")

    def __reduce__(self):
        from .custom import _from_spec
        return _from_spec, (self._spec,)

    # -- derived ops ----------------------------------------------------------------------------------
    def with_attrs(self, **attrs: Any) -> Op:
        """A new op on the same library with some attributes changed or added."""
        merged = {a.name: a for a in self._spec.attrs}
        for name, value in attrs.items():
            if name in self._spec.call_attrs:
                raise ArgumentError(f"{name!r} is a call argument of this op; pass it when calling")
            merged[name] = typed(name, value)
        spec = replace(self._spec, attrs=tuple(merged.values()))
        return Op(spec, self.library, self._host, self.artifact, self.source_path)

    def close(self) -> None:
        """Release every per-signature AotExtra (running DestructKernelData). The op stays usable."""
        with self._lock:
            _release(self._plans)

    # -- calling --------------------------------------------------------------------------------------
    def __call__(self, *args: Any):
        if self._spec.call_attrs:
            return self._call_slow(args)
        try:
            plan = self._plans[tuple([(a.shape, a.dtype) for a in args])]
        except (AttributeError, KeyError, TypeError):
            return self._call_slow(args)
        if plan.single:
            out = np.empty(plan.shape0, plan.dtype0)
            code = self._host.call_buffers(plan.address, args, (out,))
            if not code:
                return out
            outs: tuple = (out,)
        else:
            outs = tuple([np.empty(s, d) for s, d in plan.outputs])
            code = self._host.call_buffers(plan.address, args, outs)
            if not code:
                return outs
        return self._retry(code, plan, args, outs)

    def _invoke(self, plan: _Plan, arrays: tuple) -> Any:
        outs = tuple([np.empty(s, d) for s, d in plan.outputs])
        code = self._host.call_buffers(plan.address, arrays, outs)
        if code:
            return self._retry(code, plan, arrays, outs)
        return outs[0] if plan.single else outs

    def _retry(self, code: int, plan: _Plan, arrays: tuple, outs: tuple) -> Any:
        """After a failed fast call: convert arguments the buffer protocol refused, or raise the error."""
        if code != BAD_BUFFER:
            self._host.raise_for(code, self.name, 0, plan.attrs)
        converted = tuple(self._contiguous(a, i) for i, a in enumerate(arrays))
        code = self._host.call_buffers(plan.address, converted, outs)
        if code == BAD_BUFFER:
            code = self._call_pointers(plan, converted, outs)  # e.g. dtypes numpy cannot export as buffers
        if code:
            self._host.raise_for(code, self.name, 0, plan.attrs)
        return outs[0] if plan.single else outs

    def _call_pointers(self, plan: _Plan, arrays: tuple, outs: tuple) -> int:
        """Slow but universal: write ``.ctypes.data`` pointers into the plan's params (under the op's lock)."""
        with self._lock:
            params = plan.record.params
            for i, a in enumerate(arrays + outs):
                params[i] = a.ctypes.data
            return self._host.call_kernel(plan.address)

    @staticmethod
    def _contiguous(a, index: int) -> np.ndarray:
        """``a`` as a C-contiguous ndarray in native byte order (0-d stays 0-d)."""
        try:
            arr = np.asarray(a, order="C")
        except Exception as exc:
            raise ArgumentError(f"input {index} ({type(a).__name__}) cannot be used as a numpy array: {exc}") from exc
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        return arr

    def _typed_call_attrs(self, extras) -> list[TypedAttr]:
        return [typed(name, v) for name, v in zip(self._spec.call_attrs, extras)]

    def _split(self, args) -> tuple[tuple, tuple]:
        n_attr = len(self._spec.call_attrs)
        n = self._n_inputs
        if n is not None and len(args) != n + n_attr:
            names = ", ".join(self._spec.reg_info.inputs)  # type: ignore[union-attr]
            attrs = f" then {n_attr} attribute argument(s) ({', '.join(self._spec.call_attrs)})" if n_attr else ""
            raise ArgumentError(f"{self.name} takes {n} input array(s) ({names}){attrs}; got {len(args)} arguments")
        arrays = args[:len(args) - n_attr] if n_attr else args
        converted = []
        for i, a in enumerate(arrays):
            if not isinstance(a, np.ndarray) or not a.dtype.isnative:
                if hasattr(a, "__cuda_array_interface__"):
                    raise ArgumentError(f"input {i} is a GPU array ({type(a).__name__}); this is a cpu op, pass a "
                                        "numpy array (e.g. arr.get() for cupy)")
                a = self._contiguous(a, i)
            dtype_string(a.dtype)  # refuses object, string, datetime ... arrays
            converted.append(a)
        return tuple(converted), tuple(args[len(arrays):])

    def _call_slow(self, args) -> Any:
        arrays, extras = self._split(args)
        key = tuple([(a.shape, a.dtype) for a in arrays])
        call_attrs = self._typed_call_attrs(extras)
        if call_attrs:  # by repr: 0.0 and -0.0 differ, and NaN equals itself
            key += tuple((t.kind, repr(t.value)) for t in call_attrs)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._make_plan(arrays, call_attrs)
            with self._lock:
                if len(self._plans) >= MAX_PLANS:
                    del self._plans[next(iter(self._plans))]
                self._plans[key] = plan
        return self._invoke(plan, arrays)

    # -- planning -------------------------------------------------------------------------------------
    def _make_plan(self, arrays: list[np.ndarray], call_attrs: list[TypedAttr]) -> _Plan:
        spec, host, lib = self._spec, self._host, self.library
        attrs = self._attr_list + call_attrs
        in_shapes = [tuple(int(d) for d in a.shape) for a in arrays]
        in_dtypes = [a.dtype for a in arrays]
        in_names = [dtype_string(d) for d in in_dtypes]
        extra = host.new_extra(attrs)
        try:
            if spec.out_shape is None:
                out_shapes = self._inferred_shapes(in_shapes, extra, attrs)
            else:
                out_shapes = rules.output_shapes(spec.out_shape, in_shapes, spec.n_outputs)
            out_dtypes = rules.output_dtypes(spec.out_dtype, in_dtypes, spec.n_outputs, spec.reg_info,
                                             tuple(in_names))
            shapes = in_shapes + out_shapes
            names = in_names + [dtype_string(d) for d in out_dtypes]
            keepalive: list = []
            if lib.init:
                init_arrays = _tensor_arrays(shapes, names)
                keepalive.append(init_arrays)
                host.call_init(lib.init, *init_arrays[:3], extra, function=f"{self.name}Init", attrs=attrs)
            requested = host.workspace_sizes(extra)
            workspaces, ws_ptrs = [], []
            for k, size in enumerate(requested):
                allocated = workspace_allocation(size)
                try:
                    raw = np.empty(allocated + WORKSPACE_ALIGNMENT, dtype=np.uint8)
                except (MemoryError, ValueError) as exc:
                    raise WorkspaceError(f"{self.name}Init", k, size) from exc
                offset = -raw.ctypes.data % WORKSPACE_ALIGNMENT
                keepalive.append(raw)
                ws_ptrs.append(raw.ctypes.data + offset)
                workspaces.append((size, allocated))
            ndims, shape_ptrs, dtype_strs, dims = _tensor_arrays(
                shapes + [(size,) for size in requested], names + ["uint8"] * len(requested))
            nparam = len(shapes) + len(requested)
            if nparam > MAX_PARAMS:
                raise ArgumentError(f"{self.name} would get {nparam} params; at most {MAX_PARAMS} are supported")
            params = (ctypes.c_void_p * max(nparam, 1))()
            for k, p in enumerate(ws_ptrs):
                params[len(shapes) + k] = p
            nbytes = (ctypes.c_int64 * max(len(shapes), 1))(
                *[int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in zip(shapes, in_dtypes + out_dtypes)])
            record = CallRecord(fn=lib.kernel, nparam=nparam, n_in=len(arrays), n_out=len(out_shapes),
                                params=ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p)),
                                ndims=ctypes.cast(ndims, ctypes.POINTER(ctypes.c_int)),
                                shapes=ctypes.cast(shape_ptrs, ctypes.POINTER(_p_int64)),
                                dtypes=ctypes.cast(dtype_strs, ctypes.POINTER(ctypes.c_char_p)),
                                stream=None, extra=extra, nbytes=ctypes.cast(nbytes, _p_int64))
            keepalive += [params, nbytes, ndims, shape_ptrs, dtype_strs, dims, lib]
            outputs = list(zip(out_shapes, out_dtypes))
            plan = _Plan(host, record, len(arrays), outputs, keepalive, extra, workspaces, attrs)
        except BaseException:
            host.free_extra(extra)
            raise
        return plan

    def _inferred_shapes(self, in_shapes, extra: int, attrs) -> list[tuple[int, ...]]:
        raw = self._call_infer(in_shapes, extra, attrs)
        out = []
        for i, dims in enumerate(raw):
            if any(d < 0 for d in dims):
                raise ShapeError(
                    f"{self.name}InferShape returned {tuple(dims)} for output {i} with concrete input shapes "
                    f"{tuple(in_shapes)}: -1 (unknown dim) and -2 (unknown rank) are only valid when an input "
                    "is itself unknown. Fix InferShape or pass out_shape=.")
            out.append(tuple(dims))
        return out

    def _call_infer(self, in_shapes, extra: int, attrs) -> list[list[int]]:
        names = ["float32"] * len(in_shapes)  # InferShape receives no dtypes
        ndims, shape_ptrs, _, _dims = _tensor_arrays(list(in_shapes), names)  # _dims: keep buffers alive
        raw = self._host.call_infer(self.library.infer_shape, self._spec.n_outputs > 1, ndims, shape_ptrs, extra,
                                    function=f"{self.name}InferShape", attrs=attrs)
        if len(raw) != self._spec.n_outputs:
            raise ShapeError(f"{self.name}InferShape returned {len(raw)} shapes for an op with "
                             f"{self._spec.n_outputs} outputs")
        return raw

    def infer_shape(self, *shapes: Any):
        """Run only the shape rule: ``None`` for an unknown dim or an unknown rank, as InferShape's -1/-2.

        Arguments are input shapes (``None`` inside a shape is an unknown dim, ``None`` for a whole shape an
        unknown rank), then the values of call attributes, if the op has any.
        """
        n_attr = len(self._spec.call_attrs)
        shape_args, extras = (shapes[:len(shapes) - n_attr], shapes[len(shapes) - n_attr:]) if n_attr else (shapes, ())
        coded = []
        for i, s in enumerate(shape_args):
            if s is None:
                coded.append((-2,))
            elif isinstance(s, (list, tuple)) and all(d is None or _is_dim(d) for d in s):
                coded.append(tuple(-1 if d is None else int(d) for d in s))
            else:
                raise ArgumentError(f"input shape {i} is {s!r}: give a tuple of ints and None, or None")
        if self._spec.out_shape is not None:
            if any(-1 in s or -2 in s for s in coded) and callable(self._spec.out_shape):
                raise ShapeError("out_shape is a function of concrete shapes; it cannot infer from unknown dims")
            result = rules.output_shapes(self._spec.out_shape, coded, self._spec.n_outputs)
        else:
            attrs = self._attr_list + self._typed_call_attrs(extras)
            extra = self._host.new_extra(attrs)
            try:
                result = self._call_infer(coded, extra, attrs)
            finally:
                self._host.free_extra(extra)
        decoded = [None if list(s) == [-2] else tuple(None if d == -1 else d for d in s) for s in result]
        return decoded[0] if self._spec.n_outputs == 1 else tuple(decoded)

    def plan_info(self, *arrays: Any) -> dict:
        """What the op would allocate for these inputs: output shapes/dtypes and workspace sizes (runs Init)."""
        converted, extras = self._split(arrays)
        plan = self._make_plan(converted, self._typed_call_attrs(extras))
        return {"outputs": [(s, np.dtype(d)) for s, d in plan.outputs],
                "workspaces": [{"requested": r, "allocated": a} for r, a in plan.workspaces]}


__all__ = ["AttrKind", "Op", "OpSpec", "workspace_allocation"]
