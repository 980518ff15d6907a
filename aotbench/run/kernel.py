"""One build of an op, as the runners see it: the recipe, the loaded library, the native runtime that calls it, and
the plans made for it.

An op holds one :class:`Kernel` at a time and replaces it whole on a rebuild (a hot reload), so whatever a call
read from it (spec, library, plans) belongs together. What every runner needs to turn a call's arguments into a
plan is here, once: the argument count, the split into arrays and call-attribute values, the typed attributes,
the conversion of host arrays, and the plan itself.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArgumentTypeError
from ..native.attrs import TypedAttr, typed
from ..native.dtypes import dtype_string
from ..native.loading import KernelLibrary
from ..native.runtime import Runtime
from ..spec.spec import OpSpec
from . import forking
from .devices import GPU
from .plan import Plan, make_plan
from .plan_cache import PlanCache

if TYPE_CHECKING:
    from ..build.compile import Artifact

# Every kernel alive in this process, so that a child made by os.fork() gets fresh locks (see _after_fork).
_LIVE: weakref.WeakSet = weakref.WeakSet()
_ORPHANED_PLANS: list = []  # in a forked child: OpenMP kernels' plans, kept so that no kernel code frees them there


@dataclass(frozen=True, eq=False)
class Kernel:
    """A built kernel: ``spec`` (the recipe), ``library`` (loaded), ``runtime`` (the native host that calls it),
    ``artifact`` and ``source`` (None for a prebuilt library) and ``plans``, the plans made for this build."""

    spec: OpSpec
    library: KernelLibrary
    runtime: Runtime
    artifact: Artifact | None = None
    source: Path | None = None
    plans: PlanCache = field(default_factory=PlanCache, repr=False)

    def __post_init__(self) -> None:
        _LIVE.add(self)

    @property
    def name(self) -> str:
        return self.library.name

    @property
    def attrs(self) -> list[TypedAttr]:
        """The op's own attributes (without call attributes), as the AotExtra holds them."""
        return list(self.spec.attrs)

    @property
    def n_inputs(self) -> int | None:
        """How many input arrays a call takes, when the registration says so (else None: any number)."""
        reg = self.spec.reg_info
        return len(reg.inputs) if reg and reg.inputs else None

    def split(self, args: tuple) -> tuple[tuple, tuple]:
        """A call's arguments as (arrays, call-attribute values), as given; the count checked first."""
        n_attr = len(self.spec.call_attrs)
        n = self.n_inputs
        if n is not None and len(args) != n + n_attr:
            names = ", ".join(self.spec.reg_info.inputs)  # type: ignore[union-attr]
            attrs = f" then {n_attr} attribute argument(s) ({', '.join(self.spec.call_attrs)})" if n_attr else ""
            raise ArgumentTypeError(f"{self.name} takes {n} input array(s) ({names}){attrs}; got {len(args)} arguments")
        if not n_attr:
            return tuple(args), ()
        return tuple(args[:len(args) - n_attr]), tuple(args[len(args) - n_attr:])

    def call_attrs(self, values: tuple) -> list[TypedAttr]:
        """The call attributes with these values, typed (a mistyped value is refused here)."""
        return [typed(name, v) for name, v in zip(self.spec.call_attrs, values)]

    def all_attrs(self, values: tuple) -> list[TypedAttr]:
        """Every attribute a call's AotExtra holds: the op's own, then the call attributes with these values."""
        return self.attrs + self.call_attrs(values)

    def host_arrays(self, args: tuple) -> tuple[tuple, tuple]:
        """(inputs as host arrays a kernel can take, call-attribute values) for a call in this process: anything
        array-like converted (:func:`contiguous`), masked and GPU arrays refused, dtypes checked."""
        arrays, extras = self.split(args)
        converted = []
        for i, a in enumerate(arrays):
            if type(a) is not np.ndarray and isinstance(a, np.ma.MaskedArray):
                raise ArgumentTypeError(
                    f"input {i} is a numpy masked array: a kernel reads only its data, so the mask would be lost "
                    "silently. Pass x.filled(value) to give the masked elements a value the kernel can use, or "
                    "np.ma.getdata(x) to pass the data as it is (and apply the mask to the result yourself)")
            if not isinstance(a, np.ndarray) or not a.dtype.isnative:
                if GPU.owns(a):
                    raise ArgumentTypeError(f"input {i} is a GPU array ({type(a).__name__}); this is a cpu op, pass a "
                                        "numpy array (e.g. arr.get() for cupy)")
                a = contiguous(a, i)
            dtype_string(a.dtype)  # refuses object, string, datetime ... arrays
            converted.append(a)
        return tuple(converted), extras

    def plan(self, arrays: tuple, call_attrs: list[TypedAttr], **where: Any) -> Plan:
        """A new plan for these (converted) arrays and typed call attributes (:func:`aotbench.run.plan.make_plan`;
        ``where``: its ``allocate_workspace`` and ``memory_limit``)."""
        return make_plan(self.spec, self.runtime, self.library, arrays, self.attrs + call_attrs, **where)


def contiguous(a: Any, index: int, writable: bool = False) -> np.ndarray:
    """``a`` as a C-contiguous ndarray in native byte order (0-d stays 0-d); with ``writable``, a read-only
    array (``np.memmap(mode="r")``, ``np.frombuffer(bytes)``) is copied. ``index`` names the input in errors."""
    try:
        arr = np.asarray(a, order="C")
    except Exception as exc:
        raise ArgumentTypeError(f"input {index} ({type(a).__name__}) cannot be used as a numpy array: {exc}") from exc
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if writable and not arr.flags.writeable:
        arr = np.array(arr)
    return arr


def _after_fork() -> None:
    openmp_ran = forking.after_fork_in_child()
    for kernel in list(_LIVE):
        kernel.plans.after_fork()
        if openmp_ran and len(kernel.plans) and forking.uses_libgomp(kernel.library):
            # libgomp's threads are gone: the next call makes a plan, which refuses (run.forking)
            _ORPHANED_PLANS.extend(kernel.plans.take_all())


os.register_at_fork(after_in_child=_after_fork)


__all__ = ["Kernel", "contiguous"]
