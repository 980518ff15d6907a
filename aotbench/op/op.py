"""The op: the callable a user holds.

It owns the recipe (:class:`~aotbench.spec.OpSpec`), the library, and a plan (:mod:`aotbench.plan`) per input
signature (shapes, dtypes, call-attribute values): a repeated call allocates the outputs, then one ctypes call.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..native.attrs import TypedAttr, describe, typed
from ..native.dtypes import dtype_string
from ..native import interrupts
from ..native.runtime import BAD_BUFFER, BUSY, Runtime
from ..native.loading import KernelLibrary
from ..build.compile import Artifact
from ..run import forking, guard, prints
from ..spec import rules
from ..run.plan import Plan, make_plan, signature_key, workspace_allocation
from ..spec.spec import OpSpec, parse_flags
from ..run import devices as seam
from .accessors import Accessors
from ..errors import ArgumentError, ContractViolation, ShapeError

MAX_PLANS = 64
# Every op alive in this process, so that a child made by os.fork() gets fresh locks (a lock held by another
# thread at the moment of the fork would otherwise stay held in the child for ever).
_LIVE_OPS: weakref.WeakSet = weakref.WeakSet()


_ORPHANED_PLANS: list = []  # in a forked child: OpenMP ops' plans, kept so that no kernel code frees them there
_FILLED = ("filled",)  # appended to the key of a plan with fill values: the fast path's key never finds it


def _after_fork_in_child() -> None:
    openmp_ran = forking.after_fork_in_child()
    for op in list(_LIVE_OPS):
        op._lock = threading.Lock()
        if openmp_ran and op._plans and forking.uses_libgomp(op.library):
            # libgomp's threads are gone: the next call takes the slow path, which refuses (call.forking)
            _ORPHANED_PLANS.extend(op._plans.values())
            op._plans.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Op(Accessors):
    """A compiled aot kernel bound as a Python callable: ``op(*arrays, *attr_args)``."""

    def __init__(self, spec: OpSpec, library: KernelLibrary, host: Runtime, artifact: Artifact | None = None,
                 source: Path | None = None):
        self._spec = spec
        self._host = host
        self._plans: dict = {}
        self._lock = threading.Lock()
        # Bumped by every _adopt: a plan is kept only if made on the generation it is stored under (see
        # _call_slow), so the fast path never holds a plan of a library the op no longer has.
        self._generation = 0
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
        #: Where the op runs (:mod:`aotbench.run.devices`): a gpu op's calls go through the device's run path.
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

    def __reduce__(self):  # the recipe and the source files it read: see aotbench.op.travel
        from .travel import reduce_op
        return reduce_op(self)

    def disassemble(self, kind: str | None = None, *, syntax: str = "intel"):
        """The kernel's generated code under its source lines: :func:`aotbench.tools.codeview.inspection.disassemble`."""
        from ..tools.codeview.inspection import disassemble

        return disassemble(self, kind, syntax=syntax)

    def annotate(self, *, missed: bool = False):
        """The kernel's source with the compiler's remarks: :func:`aotbench.tools.codeview.inspection.annotate`."""
        from ..tools.codeview.inspection import annotate

        return annotate(self, missed=missed)

    # -- derived ops ----------------------------------------------------------------------------------
    def with_flags(self, flags: Any) -> Op:
        """The same op built with other compiler flags (a cache entry of its own; the recipe is otherwise the
        same). ``compare_flags`` uses it."""
        from .custom import _from_spec  # the constructor, one layer up (as unpickling uses it)

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
            self._generation += 1
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
            plan = self._plans[tuple([(a.shape, a.dtype, type(a)) for a in args])]  # as plan.signature_key
        except (AttributeError, KeyError, TypeError):
            plan = None  # leave the except block first, so errors raised below are not chained to a KeyError
        if plan is None:
            return self._call_slow(args)
        try:  # free until raised (3.11): the stop button on an endless kernel (see aotbench.native.interrupts)
            return self._invoke(plan, args)
        except KeyboardInterrupt as exc:
            self._interrupted(exc)

    def _interrupted(self, exc: KeyboardInterrupt, ordinary: Callable[[], None] | None = None) -> NoReturn:
        """Raise, after a KeyboardInterrupt in a call: if the host abandoned the call's kernel (it did not return in
        time after SIGINT), retire the call's plan without freeing its kernel data and raise the honest
        :class:`~aotbench.errors.KernelInterrupted`; else run ``ordinary`` (a clean-up) and raise ``exc``."""
        if not interrupts.retire_abandoned(self._host) and not isinstance(exc, interrupts.KernelInterrupted):
            if ordinary is not None:
                ordinary()
            raise exc
        interrupts.keep(exc.__traceback__)  # the call's arrays: an OpenMP worker of it may still write them
        with self._lock:
            for key in [k for k, p in self._plans.items() if interrupts.is_retired(p)]:
                del self._plans[key]
        if isinstance(exc, interrupts.KernelInterrupted):
            raise exc
        raise interrupts.abandoned(self.name) from None

    def _invoke(self, plan: Plan, arrays: tuple) -> Any:
        """Allocate the outputs and call the kernel: one ctypes call on the fast path."""
        if plan.prints and prints.needs_capture():  # a library that can print: its stdout shown in order
            with prints.shown():
                return self._invoke(plan, arrays)
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
        call's own), or the buffer protocol refused an argument (convert it); or raise the kernel's error. A
        kernel that changed the floating-point or signal state (restored by the host) is warned about."""
        code = self._host.note_changes(code, self.name, self.library.path)
        if code == BUSY:
            code = self._host.note_changes(self._call_own_workspaces(plan, arrays, outs), self.name, self.library.path)
        if code == BAD_BUFFER:  # read-only inputs are copied: the kernel must not crash on or write through them
            arrays = tuple(self._contiguous(a, i, writable=True) for i, a in enumerate(arrays))
            code = self._host.note_changes(self._call_own_workspaces(plan, arrays, outs), self.name, self.library.path)
            if code == BAD_BUFFER:  # e.g. dtypes numpy cannot export as buffers
                code = self._call_pointers(plan, [a.ctypes.data for a in arrays + outs])
        if code:
            self._host.raise_for(code, self.name, 0, plan.attrs, self.library.path)
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
    def _contiguous(a, index: int, writable: bool = False) -> np.ndarray:
        """``a`` as a C-contiguous ndarray in native byte order (0-d stays 0-d); with ``writable``, a read-only
        array (``np.memmap(mode="r")``, ``np.frombuffer(bytes)``) is copied."""
        try:
            arr = np.asarray(a, order="C")
        except Exception as exc:
            raise ArgumentError(f"input {index} ({type(a).__name__}) cannot be used as a numpy array: {exc}") from exc
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if writable and not arr.flags.writeable:
            arr = np.array(arr)
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
            if type(a) is not np.ndarray and isinstance(a, np.ma.MaskedArray):
                raise ArgumentError(
                    f"input {i} is a numpy masked array: a kernel reads only its data, so the mask would be lost "
                    "silently. Pass x.filled(value) to give the masked elements a value the kernel can use, or "
                    "np.ma.getdata(x) to pass the data as it is (and apply the mask to the result yourself)")
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
        try:
            return self.device.call(self, args)
        except KeyboardInterrupt as exc:  # an abandoned host-side call: retire its plan as for a cpu op
            self._interrupted(exc)

    def _remember_plan(self, key, plan: Plan, generation: int | None = None) -> None:
        """Keep ``plan`` for the fast path, unless the op was rebuilt (``_adopt``) since ``generation`` (read
        before the plan's library was): a plan belongs to the library it was made for."""
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            if len(self._plans) >= MAX_PLANS:
                del self._plans[next(iter(self._plans))]
            self._plans[key] = plan

    def _call_slow(self, args) -> Any:
        if self._export_next_call is not None:
            return self._exporting_call(self._call_slow, args)
        if self._check_next_call:
            return self._call_checked(args)
        arrays, extras = self._split(args)
        with self._lock:  # one consistent build: a reload (_adopt) replaces all of these together
            spec, host, library, attr_list = self._spec, self._host, self.library, self._attr_list
            generation = self._generation
        call_attrs = [typed(name, v) for name, v in zip(spec.call_attrs, extras)]
        key = signature_key(arrays, call_attrs)
        plan = self._plans.get(key)
        try:
            if plan is not None:
                return self._invoke(plan, arrays)
            plan = self._plans.get(key + _FILLED)
            if plan is not None:
                return self._invoke_filled(plan, arrays)
            host.install_signal_handlers()  # again, in case the program replaced them (a syscall: fine here)
            with prints.shown(library.prints):  # what Init prints
                plan = make_plan(spec, host, library, arrays, attr_list + call_attrs)
            if not spec.guard:
                self._remember_plan(key, plan, generation)
                return self._invoke(plan, arrays)
            # The first call of a signature runs guarded; the fast path is for a kernel that stayed in bounds.
            outputs = guard.first_call(self, plan, tuple(self._contiguous(a, i) for i, a in enumerate(arrays)))
        except KeyboardInterrupt as exc:
            self._interrupted(exc)
        self._remember_plan(key if plan.fill is None else key + _FILLED, plan, generation)
        return outputs

    def _invoke_filled(self, plan: Plan, arrays: tuple) -> Any:
        """A call of a signature whose guarded first call found unwritten outputs: the outputs are filled with
        ``plan.fill`` (NaN for floats, see :func:`aotbench.run.plan.fill_value`) before the kernel runs, so
        what it leaves unwritten never shows reused memory. Such plans are kept off the fast path's key."""
        if plan.prints and prints.needs_capture():
            with prints.shown():
                return self._invoke_filled(plan, arrays)
        outs = tuple([np.full(s, v, d) for (s, d), v in zip(plan.outputs, plan.fill)])
        code = self._host.call_buffers(plan.address, arrays, outs)
        if code:
            return self._retry(code, plan, arrays, outs)
        return outs[0] if plan.single else outs


__all__ = ["MAX_PLANS", "Op", "OpSpec", "workspace_allocation"]
