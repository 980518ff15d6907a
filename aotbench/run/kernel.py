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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArgumentTypeError
from ..native.attrs import TypedAttr, typed
from ..native.dtypes import dtype_string
from ..native.loading import KernelLibrary
from ..native.runtime import Runtime
from ..spec.spec import OpSpec
from . import forking, interop
from .plan import Plan, make_plan
from .plan_cache import PlanCache

if TYPE_CHECKING:
    from ..build.compile import Artifact

# Every kernel alive in this process, so that a child made by os.fork() gets fresh locks (see _after_fork).
_LIVE: weakref.WeakSet = weakref.WeakSet()
_ORPHANED_PLANS: list = []  # in a forked child: OpenMP kernels' plans, kept so that no kernel code frees them there


_NOTHING_DECLARED: Mapping[str, str] = MappingProxyType({})


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
        """The call attributes with these values, typed (a value no attribute can hold is refused here), each
        with the value_type its registration declares (for the advice of a kernel's mistyped read)."""
        reg = self.spec.reg_info
        declared = reg.declared if reg is not None else _NOTHING_DECLARED
        return [typed(name, v, True, declared.get(name)) for name, v in zip(self.spec.call_attrs, values)]

    def all_attrs(self, values: tuple) -> list[TypedAttr]:
        """Every attribute a call's AotExtra holds: the op's own, then the call attributes with these values."""
        return self.attrs + self.call_attrs(values)

    def host_arrays(self, args: tuple) -> tuple[tuple, tuple]:
        """(inputs as host arrays a kernel can take, call-attribute values) for a call in this process: numpy
        arrays as they are, any other array read through the protocols without a copy where they allow
        (:func:`aotbench.run.interop.host_array`: DLPack first), masked arrays and device memory refused, dtypes
        checked."""
        arrays, extras, _ = self.host_call(args)
        return arrays, extras

    def host_call(self, args: tuple) -> tuple[tuple, tuple, interop.Library | None]:
        """:meth:`host_arrays`, and the library the call's outputs go back in (None: numpy; see
        :func:`aotbench.run.interop.caller_library`)."""
        arrays, extras = self.split(args)
        converted = []
        foreign = False
        for i, a in enumerate(arrays):
            if isinstance(a, np.ndarray):
                if type(a) is not np.ndarray and isinstance(a, np.ma.MaskedArray):
                    raise ArgumentTypeError(
                        f"input {i} is a numpy masked array: a kernel reads only its data, so the mask would be lost "
                        "silently. Pass x.filled(value) to give the masked elements a value the kernel can use, or "
                        "np.ma.getdata(x) to pass the data as it is (and apply the mask to the result yourself)")
                if not a.dtype.isnative:
                    a = contiguous(a, i)
                dtype_string(a.dtype)  # refuses object, string, datetime ... arrays
            else:  # another library's array (or a list ...): read through the array protocols
                foreign = True
                given = a
                a = interop.host_array(a, i, self.runs_on)
                interop.checked_dtype(a, i, given)
            converted.append(a)
        return tuple(converted), extras, interop.caller_library(arrays) if foreign else None

    @property
    def runs_on(self) -> str:
        """Where this build's kernels run, in the words of a device error ("on the CPU" ...)."""
        return "on the CPU (aotbench's CUDA emulator)" if self.library.emulator else "on the CPU"

    def caller(self, args: tuple) -> interop.Library | None:
        """The library a call's outputs go back in (:func:`aotbench.run.interop.caller_library`; None: numpy)."""
        return interop.caller_library(self.split(args)[0])

    def plan(self, arrays: tuple, call_attrs: list[TypedAttr], **where: Any) -> Plan:
        """A new plan for these (converted) arrays and typed call attributes (:func:`aotbench.run.plan.make_plan`;
        ``where``: its ``allocate_workspace`` and ``memory_limit``)."""
        return make_plan(self.spec, self.runtime, self.library, arrays, self.attrs + call_attrs, **where)


def contiguous(a: Any, index: int, writable: bool = False) -> np.ndarray:
    """``a`` as a C-contiguous ndarray in native byte order (0-d stays 0-d; another library's array read as
    :func:`aotbench.run.interop.host_array` reads it); with ``writable``, a read-only array (``np.memmap(mode="r")``,
    ``np.frombuffer(bytes)``, a DLPack tensor its producer marked read-only) is copied. ``index`` names the input
    in errors."""
    if not isinstance(a, np.ndarray):  # DLPack, __array_interface__, the buffer protocol ...: run.interop
        a = interop.host_array(a, index)
    arr = np.asarray(a, order="C")
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
