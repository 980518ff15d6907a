"""The op: the callable a user holds.

It owns the recipe (:class:`~aotbench.spec.OpSpec`), the library, and a plan (:mod:`aotbench.plan`) per input
signature (shapes, dtypes, call-attribute values): a repeated call allocates the outputs, then one ctypes call.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..abi.attrs import TypedAttr, describe, typed
from ..abi.dtypes import dtype_string
from ..abi.host import BAD_BUFFER, BUSY, Host
from ..abi.library import KernelLibrary
from ..build.compile import Artifact
from ..call import guard, rules
from ..call.plan import MAX_RANK, Plan, call_infer_shape, make_plan, signature_key, workspace_allocation
from ..call.spec import OpSpec, parse_flags
from ..codeview.inspection import CodeViews
from ..device import seam
from ..errors import ArgumentError, ContractViolation, ShapeError

MAX_PLANS = 64
# Every op alive in this process, so that a child made by os.fork() gets fresh locks (a lock held by another
# thread at the moment of the fork would otherwise stay held in the child for ever).
_LIVE_OPS: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for op in list(_LIVE_OPS):
        op._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Op(CodeViews):
    """A compiled aot kernel bound as a Python callable: ``op(*arrays, *attr_args)``."""

    def __init__(self, spec: OpSpec, library: KernelLibrary, host: Host, artifact: Artifact | None = None,
                 source: Path | None = None):
        self._spec = spec
        self._host = host
        self._plans: dict = {}
        self._lock = threading.Lock()
        self._reload_callbacks: list = []
        self._reload_error_callbacks: list = []
        self._check_next_call = False
        self._export_next_call = self.last_export = None  # see export_after_next_call
        # Each plan frees its AotExtra when it dies (see Plan), so dropping the plans is the whole release, and
        # a call still running keeps its own plan alive.
        self._finalizer = weakref.finalize(self, self._plans.clear)
        self._install(library, artifact, source)
        _LIVE_OPS.add(self)

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
        #: Where the op runs (:mod:`aotbench.device.seam`): a gpu op's calls go through the device's run path.
        self.device = seam.for_target(spec.target)

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
    def resources(self) -> list[dict]:
        """ptxas's per-kernel report for a gpu build (registers, shared memory, spills); empty otherwise."""
        return self.artifact.manifest.get("resource_usage", []) if self.artifact else []

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

    def _repr_html_(self) -> str:
        from ..notebook.display import op_html

        return op_html(self)

    def __reduce__(self):  # the recipe and the source files it read: see aotbench.travel
        from ..travel import reduce_op
        return reduce_op(self)

    # -- derived ops ----------------------------------------------------------------------------------
    def with_flags(self, flags: Any) -> Op:
        """The same op built with other compiler flags (a cache entry of its own; the recipe is otherwise the
        same). ``compare_flags`` uses it."""
        from ..custom import _from_spec  # the constructor, one layer up (as unpickling uses it)

        return _from_spec(replace(self._spec, flags=parse_flags(flags)))

    def with_attrs(self, **attrs: Any) -> Op:
        """A new op on the same library with some attributes changed or added."""
        merged = {a.name: a for a in self._spec.attrs}
        for name, value in attrs.items():
            if name in self._spec.call_attrs:
                raise ArgumentError(f"{name!r} is a call argument of this op; pass it when calling")
            merged[name] = typed(name, value)
        spec = replace(self._spec, attrs=tuple(merged.values()))
        return type(self)(spec, self.library, self._host, self.artifact, self.source_path)  # subclasses too

    def _adopt(self, other: Op) -> None:
        """Hot reload: take over ``other``'s recipe and build, keeping this object's identity.

        References to this op (and panels showing it) keep working; the old library's plans are released, and
        every callback registered with :meth:`on_reload` runs.
        """
        with self._lock:
            self._plans.clear()
            self._spec = other._spec
            self._host = other._host
            self._install(other.library, other.artifact, other.source_path)
        for callback in list(self._reload_callbacks):
            callback(self)

    def on_reload(self, callback) -> None:
        """Call ``callback(op)`` each time this op is rebuilt in place (e.g. its ``%%aot_kernel`` cell re-run)."""
        self._reload_callbacks.append(callback)

    def on_reload_error(self, callback) -> None:
        """Call ``callback(error)`` when a rebuild of this op failed (its cell no longer compiles); the op keeps
        its previous build."""
        self._reload_error_callbacks.append(callback)

    def _reload_failed(self, error: BaseException) -> None:
        for callback in list(self._reload_error_callbacks):
            callback(error)

    @property
    def check_next_call(self) -> bool:
        """When True, the next call runs in check mode and raises ContractViolation on a problem (``--check``)."""
        return self._check_next_call

    @check_next_call.setter
    def check_next_call(self, value: bool) -> None:
        with self._lock:
            self._check_next_call = bool(value)
            if value:
                self._plans.clear()  # so the next call takes the slow path, where the check happens

    def export_after_next_call(self, directory: Any) -> None:
        """Once the next call has returned, export the op to ``directory`` with that call's inputs as the example
        (:meth:`export_mindspore`; ``%%aot_kernel --export DIR``); ``last_export`` then says what was written.
        ``None`` cancels. A failed export warns; the call's result is returned either way."""
        with self._lock:
            self._export_next_call = directory
            if directory is not None:
                self._plans.clear()  # so the next call takes the slow path, where the export happens

    def _exporting_call(self, call, args) -> Any:
        from ..mindspore.export import call_then_export  # the MindSpore layer, above this one

        return call_then_export(self, call, args)

    def close(self) -> None:
        """Release every per-signature AotExtra (running DestructKernelData). The op stays usable."""
        with self._lock:
            self._plans.clear()

    # -- calling --------------------------------------------------------------------------------------
    def __call__(self, *args: Any):
        if self.device.runs_elsewhere:
            return self._call_device(args)
        if self._spec.call_attrs:
            return self._call_slow(args)
        try:
            plan = self._plans[tuple([(a.shape, a.dtype) for a in args])]
        except (AttributeError, KeyError, TypeError):
            plan = None  # leave the except block first, so errors raised below are not chained to a KeyError
        if plan is None:
            return self._call_slow(args)
        return self._invoke(plan, args)

    def _invoke(self, plan: Plan, arrays: tuple) -> Any:
        """Allocate the outputs and call the kernel: one ctypes call on the fast path."""
        if plan.single:
            out = np.empty(plan.shape0, plan.dtype0)
            code = self._host.call_buffers(plan.address, arrays, (out,))
            if not code:
                return out
            outs: tuple = (out,)
        else:
            outs = tuple([np.empty(s, d) for s, d in plan.outputs])
            code = self._host.call_buffers(plan.address, arrays, outs)
            if not code:
                return outs
        return self._retry(code, plan, arrays, outs)

    def _retry(self, code: int, plan: Plan, arrays: tuple, outs: tuple) -> Any:
        """After a fast call that did not run F: another call held the plan's workspaces (run on a set of this
        call's own), or the buffer protocol refused an argument (convert it); or raise the kernel's error."""
        if code == BUSY:
            code = self._call_own_workspaces(plan, arrays, outs)
        if code == BAD_BUFFER:
            arrays = tuple(self._contiguous(a, i) for i, a in enumerate(arrays))
            code = self._call_own_workspaces(plan, arrays, outs)
            if code == BAD_BUFFER:  # e.g. dtypes numpy cannot export as buffers
                code = self._call_pointers(plan, [a.ctypes.data for a in arrays + outs])
        if code:
            self._host.raise_for(code, self.name, 0, plan.attrs)
        return outs[0] if plan.single else outs

    def _call_own_workspaces(self, plan: Plan, arrays: tuple, outs: tuple) -> int:
        """The buffer call on a workspace set checked out for this call alone; the outcome code."""
        workspaces = plan.checkout()
        try:
            return self._host.call_buffers_with(plan.address, arrays, outs, workspaces.address)
        finally:
            plan.checkin(workspaces)

    def _call_pointers(self, plan: Plan, pointers: list[int], stream: int | None = None) -> int:
        """Slow but universal: F on raw data pointers (inputs, outputs, then the workspaces — given, as check
        mode's guarded ones, or else checked out for this call) on ``stream``; the outcome code."""
        workspaces = plan.checkout() if len(pointers) < plan.record.nparam else None
        if workspaces is not None:
            pointers = [*pointers, *workspaces.pointers]
        params = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        try:
            return self._host.call_params(plan.address, params, stream)
        finally:
            if workspaces is not None:
                plan.checkin(workspaces)

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

    def _arrays_and_extras(self, args) -> tuple[tuple, tuple]:
        """A call's arguments as (arrays, call-attribute values), as given; the count checked first."""
        self._check_arity(args)
        n_attr = len(self._spec.call_attrs)
        return (tuple(args[:len(args) - n_attr]), tuple(args[len(args) - n_attr:])) if n_attr else (tuple(args), ())

    def _check_arity(self, args) -> None:
        """Refuse a call with the wrong number of arguments, when the registration says how many."""
        n_attr = len(self._spec.call_attrs)
        n = self._n_inputs
        if n is not None and len(args) != n + n_attr:
            names = ", ".join(self._spec.reg_info.inputs)  # type: ignore[union-attr]
            attrs = f" then {n_attr} attribute argument(s) ({', '.join(self._spec.call_attrs)})" if n_attr else ""
            raise ArgumentError(f"{self.name} takes {n} input array(s) ({names}){attrs}; got {len(args)} arguments")

    def _split(self, args) -> tuple[tuple, tuple]:
        arrays, extras = self._arrays_and_extras(args)
        converted = []
        for i, a in enumerate(arrays):
            if not isinstance(a, np.ndarray) or not a.dtype.isnative:
                if seam.GPU.owns(a):
                    raise ArgumentError(f"input {i} is a GPU array ({type(a).__name__}); this is a cpu op, pass a "
                                        "numpy array (e.g. arr.get() for cupy)")
                a = self._contiguous(a, i)
            dtype_string(a.dtype)  # refuses object, string, datetime ... arrays
            converted.append(a)
        return tuple(converted), extras

    def _call_checked(self, args) -> Any:
        """The call ``--check`` asked for: check mode, raising ContractViolation on a problem."""
        self._check_next_call = False
        report = self.check(*args)
        if not report.ok:
            raise ContractViolation(self.name, report)
        return report.outputs

    def _call_device(self, args) -> Any:
        if self._export_next_call is not None:
            return self._exporting_call(self._call_device, args)
        if self._check_next_call:
            return self._call_checked(args)
        return self.device.call(self, args)

    def _remember_plan(self, key, plan: Plan) -> None:
        with self._lock:
            if len(self._plans) >= MAX_PLANS:
                del self._plans[next(iter(self._plans))]
            self._plans[key] = plan

    def _call_slow(self, args) -> Any:
        if self._export_next_call is not None:
            return self._exporting_call(self._call_slow, args)
        if self._check_next_call:
            return self._call_checked(args)
        arrays, extras = self._split(args)
        call_attrs = self._typed_call_attrs(extras)
        key = signature_key(arrays, call_attrs)
        plan = self._plans.get(key)
        if plan is not None:
            return self._invoke(plan, arrays)
        plan = make_plan(self._spec, self._host, self.library, arrays, self._attr_list + call_attrs)
        if not self._spec.guard:
            self._remember_plan(key, plan)
            return self._invoke(plan, arrays)
        # The first call of a signature runs guarded; the fast path is for a kernel that stayed in bounds.
        outputs = guard.first_call(self, plan, tuple(self._contiguous(a, i) for i, a in enumerate(arrays)))
        self._remember_plan(key, plan)
        return outputs

    def infer_shape(self, *shapes: Any):
        """Run only the shape rule: ``None`` for an unknown dim or an unknown rank, as InferShape's -1/-2.

        Arguments are input shapes (``None`` inside a shape is an unknown dim, ``None`` for a whole shape an
        unknown rank), then the values of call attributes, if the op has any.
        """
        n_attr = len(self._spec.call_attrs)
        if self._n_inputs is not None and len(shapes) != self._n_inputs + n_attr:
            raise ArgumentError(f"{self.name}.infer_shape takes {self._n_inputs} input shape(s)"
                                + (f" then {n_attr} attribute value(s)" if n_attr else "") + f"; got {len(shapes)}")
        shape_args, extras = (shapes[:len(shapes) - n_attr], shapes[len(shapes) - n_attr:]) if n_attr else (shapes, ())
        coded = rules.code_unknown_dims(shape_args)
        if self._spec.out_shape is not None:
            if any(-1 in s or -2 in s for s in coded) and callable(self._spec.out_shape):
                raise ShapeError("out_shape is a function of concrete shapes; it cannot infer from unknown dims")
            result = rules.output_shapes(self._spec.out_shape, coded, self._spec.n_outputs)
        else:
            attrs = self._attr_list + self._typed_call_attrs(extras)
            extra = self._host.new_extra(attrs)
            try:
                result = call_infer_shape(self._spec, self._host, self.library, coded, extra, attrs)
            finally:
                self._host.free_extra(extra)
        for i, s in enumerate(result):
            if len(s) > MAX_RANK:
                raise ShapeError(f"output {i} of {self.name} would have {len(s)} dimensions; arrays have at most "
                                 f"{MAX_RANK} (numpy's limit): check the shape rule")
        decoded = [None if list(s) == [-2] else tuple(None if d == -1 else d for d in s) for s in result]
        return tuple(decoded) if self._spec.returns_tuple else decoded[0]

    def check(self, *arrays: Any, reference: Any = None, rtol: float | None = None, atol: float | None = None,
              dynamic: list | None = None):
        """Run once with guarded, poisoned buffers and report contract violations (see :mod:`aotbench.check`).

        ``reference`` is the expected output(s) or a function of the inputs; ``dynamic`` lists one shape per
        input with ``None`` for dims MindSpore would see as -1, to also check Init as graph mode calls it.
        """
        from ..safety.check import check

        return check(self, *arrays, reference=reference, rtol=rtol, atol=atol, dynamic=dynamic)

    def bench(self, *arrays: Any, **options: Any):
        """Time calls on these inputs: :func:`aotbench.bench` (``budget_ms=``, ``warmup=``, ``flush_cache=``)."""
        from ..device.timing import bench

        return bench(self, *arrays, **options)

    def launcher(self, *arrays: Any):
        """A gpu op's call prepared on these inputs: ``launch()`` enqueues the kernel on the current cupy stream
        without waiting, ``launch.finish()`` synchronizes and raises a CUDA error, ``launch.outputs`` are written
        (allocated once). What device timing and CUDA graphs use (:class:`aotbench.gpu.Launcher`)."""
        if not self.device.runs_elsewhere:
            raise ArgumentError(f"{self.name} is a cpu op: its calls are synchronous already; call it directly")
        from ..device.gpu.run import Launcher

        return Launcher(self, *arrays)

    def compute_sanitizer(self, *arrays: Any, tool: str = "memcheck", timeout_s: float = 300.0):
        """Run one call of this gpu op under NVIDIA's compute-sanitizer (``memcheck``, ``racecheck``,
        ``initcheck`` or ``synccheck``) in a subprocess, built with ``-lineinfo``; returns a
        :class:`~aotbench.gpu_sanitize.SanitizerReport` (``ok``, ``findings`` with kernel, source line, thread)."""
        from ..safety.compute_sanitizer import run_compute_sanitizer

        return run_compute_sanitizer(self, *arrays, tool=tool, timeout_s=timeout_s)

    def explore(self, *example_inputs: Any, reference: Any = None, dynamic: list | None = None,
                debounce_ms: float = 100.0, **options: Any):
        """An interactive panel (ipywidgets) over this op: attribute and dimension controls, the inferred shape,
        errors against ``reference``, timings and a plot, updated live (see :mod:`aotbench.widgets`)."""
        from ..notebook.widgets import explore  # the UI layer, imported only when a panel is asked for

        return explore(self, *example_inputs, reference=reference, dynamic=dynamic, debounce_ms=debounce_ms,
                       **options)

    def export_mindspore(self, directory: Any, *example_inputs: Any):
        """Write this op as a MindSpore aot op (kernel, header, registration and Cell, the example inputs and
        this op's outputs, and a test that checks MindSpore agrees bit for bit) into ``directory``."""
        from ..mindspore.export import export  # the MindSpore layer, above this one

        return export(self, directory, *example_inputs)

    def plan_info(self, *arrays: Any) -> dict:
        """What the op would allocate for these inputs: output shapes/dtypes and workspace sizes (runs Init).

        Only shapes and dtypes are read, so a gpu op's device arrays stay where they are (and no workspace is
        allocated on the device: this plan is the host's)."""
        if self.device.runs_elsewhere:
            head, extras = self._arrays_and_extras(arrays)
            converted = tuple(a if self.device.owns(a) else self._contiguous(a, i) for i, a in enumerate(head))
        else:
            converted, extras = self._split(arrays)
        plan = make_plan(self._spec, self._host, self.library, converted,
                         self._attr_list + self._typed_call_attrs(extras))
        return {"outputs": [(s, np.dtype(d)) for s, d in plan.outputs],
                "workspaces": [{"requested": r, "allocated": a} for r, a in plan.workspaces]}


__all__ = ["MAX_PLANS", "Op", "OpSpec", "workspace_allocation"]
