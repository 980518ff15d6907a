"""The op: the callable a user holds.

It owns one build (a :class:`~aotbench.run.kernel.Kernel`: recipe, library, runtime and the plans made for it)
and a runner (:mod:`aotbench.run.runner`), chosen once: where calls run. A repeated call of an in-process op
takes the fast path (the kept plan for the arguments' shapes, dtypes and types, then one ctypes call); every
other call goes to the runner. Its other verbs are one-line methods over the functions that do the work.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from ..native import interrupts
from ..native.attrs import describe, typed
from ..native.loading import KernelLibrary
from ..native.runtime import Runtime
from ..run.calls import invoke
from ..run.kernel import Kernel
from ..run.plan import workspace_allocation
from ..run.plan_cache import MAX_PLANS, PlanCache
from ..run import devices
from ..run.emulation import EMULATED, is_emulated
from ..run.runner import Runner
from ..spec import rules
from ..spec.spec import OpSpec, parse_flags
from ..errors import ArgumentTypeError, ArgumentValueError, ShapeError
from .accessors import Accessors

_NO_PLANS: dict = {}  # what the fast path reads when it must not be taken: never written
# The one-shot wrappers of the next call, innermost first: an export keeps the outputs of a checked call.
_ONCE_ORDER = ("check", "export", "profile")


# Every op alive in this process: a child made by os.fork() gives each a fresh lock (a lock another thread held
# at the fork would otherwise stay held in the child for ever; the plan caches do the same for theirs).
_LIVE_OPS: weakref.WeakSet = weakref.WeakSet()


def _fresh_locks_after_fork() -> None:
    for op in list(_LIVE_OPS):
        op._lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_locks_after_fork)


def _clear(caches: list[PlanCache]) -> None:
    for cache in caches:
        cache.clear()


class Op(Accessors):
    """A compiled aot kernel bound as a Python callable: ``op(*arrays, *attr_args)``."""

    def __init__(self, spec: OpSpec, library: KernelLibrary, runtime: Runtime, artifact: Any = None,
                 source: Path | None = None, runner: Runner | None = None):
        if spec.out_shape is None and not library.infer_shape:
            raise ShapeError(
                f"{library.name} has no {library.name}InferShape and out_shape is None, so the output shape is "
                f"unknown. Pass out_shape= (a shape, a tuple of shapes, or a function of the input shapes) or "
                f"define extern \"C\" std::vector<int64_t> {library.name}InferShape(int *ndims, int64_t **shapes, "
                "AotExtra *extra).")
        #: Where the calls run (:class:`aotbench.run.runner.Runner`), chosen once.
        self.runner = runner if runner is not None else (
            EMULATED.runner() if is_emulated(library) else devices.for_target(spec.target).runner())
        self._lock = threading.Lock()
        self._once: dict[str, Callable] = {}  # the next call's one-shot wrappers (see call_next_through)
        self._reload_callbacks: list = []
        self._reload_error_callbacks: list = []
        self.last_export = None  # what export_after_next_call wrote
        self.last_profile = None  # what profile_next_call measured (%%aot_kernel --profile)
        # At exit (or when the op is dropped) the current build's plans are freed, running DestructKernelData.
        self._caches: list[PlanCache] = []
        self._finalizer = weakref.finalize(self, _clear, self._caches)
        self._use(Kernel(spec, library, runtime, artifact, source))
        #: Whose memory the arrays live in and whose clock times the op (:mod:`aotbench.run.devices`).
        self.device = self.runner.device
        _LIVE_OPS.add(self)

    def _use(self, kernel: Kernel) -> None:
        """Make ``kernel`` this op's build: the runner starts on it, and the fast path reads its plans."""
        self.runner.start(kernel)
        self.kernel = kernel
        self._caches[:] = [kernel.plans]
        self._plans = kernel.plans.table if self.runner.fast and not self._once else _NO_PLANS

    # -- what was built -------------------------------------------------------------------------------
    @property
    def spec(self) -> OpSpec:
        return self.kernel.spec

    @property
    def library(self) -> KernelLibrary:
        return self.kernel.library

    @property
    def artifact(self):
        """The build (:class:`aotbench.build.compile.Artifact`); None for a prebuilt library."""
        return self.kernel.artifact

    @property
    def source_path(self) -> Path | None:
        return self.kernel.source

    @property
    def name(self) -> str:
        return self.kernel.library.name

    @property
    def attrs(self) -> dict[str, Any]:
        return {a.name: a.value for a in self.spec.attrs}

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
        return list(self.artifact.manifest.resource_usage) if self.artifact else []

    @property
    def log(self) -> str:
        """The compiler's output (warnings) for this build; empty for a prebuilt library."""
        return self.artifact.log if self.artifact else ""

    def __repr__(self) -> str:
        spec = self.spec
        attrs = ", ".join(describe(a) for a in spec.attrs) or "none"
        calls = f", call attrs: {', '.join(spec.call_attrs)}" if spec.call_attrs else ""
        origin = f"built {self.artifact.path.name}" if self.artifact else f"prebuilt {self.library.path}"
        target = f"{spec.target}, emulated on the CPU" if self.emulated else spec.target
        return (f"<aotbench.{type(self).__name__} {self.name} [{target}] outputs: {spec.n_outputs} by "
                f"{rules.describe_rule(spec.out_shape)}; attrs: {attrs}{calls}; {origin}>")

    @property
    def emulated(self) -> bool:
        """True when this gpu op runs on aotbench's CUDA emulator, on the CPU (``Custom(..., emulate=...)``)."""
        return is_emulated(self.library)

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
        from .custom import _from_spec  # the constructor (as unpickling uses it)

        return _from_spec(replace(self.spec, flags=parse_flags(flags)))

    def with_attrs(self, **attrs: Any) -> Op:
        """A new op on the same library with some attributes changed or added."""
        spec, kernel = self.spec, self.kernel
        merged = {a.name: a for a in spec.attrs}
        for name, value in attrs.items():
            if name in spec.call_attrs:
                raise ArgumentTypeError(f"{name!r} is a call argument of this op; pass it when calling")
            merged[name] = typed(name, value)
        spec = replace(spec, attrs=tuple(merged.values()))
        return type(self)(spec, kernel.library, kernel.runtime, kernel.artifact, kernel.source)  # subclasses too

    # -- hot reload -----------------------------------------------------------------------------------
    def reload_from(self, other: Op) -> None:
        """Hot reload: take over ``other``'s build, keeping this object's identity.

        References to this op (and panels showing it) keep working; the old build's plans are released, and
        every callback registered with :meth:`on_reload` runs.
        """
        old = self.kernel
        with self._lock:
            self._use(replace(other.kernel, plans=PlanCache()))  # plans of its own: other's die with other
        old.plans.clear()
        for callback in list(self._reload_callbacks):
            callback(self)

    def reload_failed(self, error: BaseException) -> None:
        """Tell the :meth:`on_reload_error` callbacks that a rebuild failed; the op keeps its build."""
        for callback in list(self._reload_error_callbacks):
            callback(error)

    def on_reload(self, callback) -> None:
        """Call ``callback(op)`` each time this op is rebuilt in place (e.g. its ``%%aot_kernel`` cell re-run)."""
        self._reload_callbacks.append(callback)

    def on_reload_error(self, callback) -> None:
        """Call ``callback(error)`` when a rebuild of this op failed (its cell no longer compiles); the op keeps
        its previous build."""
        self._reload_error_callbacks.append(callback)

    # -- the next call, once ----------------------------------------------------------------------------
    def call_next_through(self, kind: str, wrapper: Callable[[Callable, tuple], Any] | None) -> None:
        """Run the next call as ``wrapper(call, args)`` (``call(args)`` makes the call itself), once; ``kind``
        names the wrapper ("check", "export"), and ``None`` cancels it. Both kinds may be pending: the export
        wraps the checked call."""
        if kind not in _ONCE_ORDER:
            raise ArgumentValueError(f"kind={kind!r}: use one of {', '.join(_ONCE_ORDER)}")
        with self._lock:
            if wrapper is None:
                self._once.pop(kind, None)
            else:
                self._once[kind] = wrapper
            self._plans = self.kernel.plans.table if self.runner.fast and not self._once else _NO_PLANS

    @property
    def check_next_call(self) -> bool:
        """When True, the next call runs in check mode and raises ContractViolation on a problem (``--check``)."""
        return "check" in self._once

    @check_next_call.setter
    def check_next_call(self, value: bool) -> None:
        from ..tools.check import checked_call

        self.call_next_through("check", functools.partial(checked_call, self) if value else None)

    @property
    def profile_next_call(self) -> bool:
        """When True, the next call returns its outputs as usual and then profiles the op on that call's inputs
        (:meth:`profile`), shown in the notebook (``%%aot_kernel --profile``); ``last_profile`` keeps it."""
        return "profile" in self._once

    @profile_next_call.setter
    def profile_next_call(self, value: bool) -> None:
        from ..tools.profile import profiled_call

        self.call_next_through("profile", functools.partial(profiled_call, self) if value else None)

    def export_after_next_call(self, directory: Any) -> None:
        """Once the next call has returned, export the op to ``directory`` with that call's inputs as the example
        (:meth:`export_mindspore`; ``%%aot_kernel --export DIR``); ``last_export`` then says what was written.
        ``None`` cancels. A failed export warns; the call's result is returned either way."""
        from ..mindspore.export import exporting_call

        wrapper = None if directory is None else functools.partial(exporting_call, self, directory)
        self.call_next_through("export", wrapper)

    def close(self) -> None:
        """Release every per-signature AotExtra (running DestructKernelData) and what the runner holds (a
        worker process). The op stays usable."""
        self.kernel.plans.clear()
        self.runner.close()

    # -- calling --------------------------------------------------------------------------------------
    def __call__(self, *args: Any):
        try:
            plan = self._plans[tuple([(a.shape, a.dtype, type(a)) for a in args])]  # as run.plan.signature_key
        except (AttributeError, KeyError, TypeError):
            plan = None  # leave the except block first, so errors raised below are not chained to a KeyError
        if plan is None:
            return self._call(args)
        try:  # free until raised (3.11): the stop button on an endless kernel (see aotbench.native.interrupts)
            return invoke(plan, args)
        except KeyboardInterrupt as exc:
            self._interrupted(exc)

    def _call(self, args: tuple) -> Any:
        """Every call but the fast path's: the one-shot wrappers first, then the runner."""
        if self._once:
            return self._call_once(args)
        kernel = self.kernel  # one build for the whole call, even if the op is reloaded meanwhile
        try:
            return self.runner.call(kernel, args)
        except KeyboardInterrupt as exc:
            self._interrupted(exc, kernel)

    def _call_once(self, args: tuple) -> Any:
        with self._lock:
            once, self._once = self._once, {}
            self._plans = self.kernel.plans.table if self.runner.fast else _NO_PLANS
        call = self._call
        for kind in _ONCE_ORDER:
            if kind in once:
                call = functools.partial(once[kind], call)
        return call(args)

    def _interrupted(self, exc: KeyboardInterrupt, kernel: Kernel | None = None,
                     ordinary: Callable[[], None] | None = None) -> NoReturn:
        """Raise, after a KeyboardInterrupt in a call: if the runtime abandoned the call's kernel (it did not return
        in time after SIGINT), retire the call's plan without freeing its kernel data and raise the honest
        :class:`~aotbench.errors.KernelInterrupted`; else run ``ordinary`` (a clean-up) and raise ``exc``."""
        kernel = kernel or self.kernel
        if not interrupts.retire_abandoned(kernel.runtime) and not isinstance(exc, interrupts.KernelInterrupted):
            if ordinary is not None:
                ordinary()
            raise exc
        interrupts.keep(exc.__traceback__)  # the call's arrays: an OpenMP worker of it may still write them
        kernel.plans.drop_retired()
        if isinstance(exc, interrupts.KernelInterrupted):
            raise exc
        raise interrupts.abandoned(self.name) from None

    def interrupted(self, exc: KeyboardInterrupt, ordinary: Callable[[], None] | None = None) -> NoReturn:
        """What a verb running this op's kernel outside a call (check mode, the shape rule) does on Ctrl-C:
        see :meth:`_interrupted`."""
        self._interrupted(exc, None, ordinary)


__all__ = ["MAX_PLANS", "Op", "OpSpec", "workspace_allocation"]
