"""The one seam between an op and the place its kernel runs: a :class:`Runner`, chosen once when the op is made.

Every way an op runs is one small implementation of the same four verbs: :class:`InProcess` (here, on host
memory: the default for a cpu op), :class:`aotbench.run.gpu.OnDevice` (a CUDA device through cupy: a gpu op) and
:class:`aotbench.run.worker.InWorker` (an isolated worker process: ``isolate=True``). The op itself only keeps
the build (a :class:`~aotbench.run.kernel.Kernel`), the fast path for runners that allow it, and what happens on
an interrupt; each runner's ``call`` goes through the kernel's :class:`~aotbench.run.plan_cache.PlanCache`.
"""

from __future__ import annotations

from typing import Any

from . import guard, prints
from .calls import invoke_filled
from .devices import CPU, Device
from .kernel import Kernel, contiguous
from .plan import Plan, signature_key


class Runner:
    """Where an op's calls run. ``fast``: the op may call a kept plan itself (:func:`aotbench.run.calls.invoke`)
    without asking the runner, which only an in-process runner allows."""

    name = ""
    fast = False

    @property
    def device(self) -> Device:
        """Whose memory the op's arrays live in and whose clock times it (:mod:`aotbench.run.devices`)."""
        raise NotImplementedError

    def start(self, kernel: Kernel) -> None:
        """Called with every build the op gets (the first, then each hot reload) before its first call."""

    def call(self, kernel: Kernel, args: tuple) -> Any:
        """One call of ``kernel`` on the call's arguments (arrays, then call-attribute values)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the runner holds besides the plans (a worker process, say). The op stays usable."""

    def __repr__(self) -> str:
        return f"<aotbench runner {self.name}>"


class InProcess(Runner):
    """The kernel runs in this process, on host memory; a kept plan is what the op's fast path calls."""

    name = "in-process"
    fast = True

    @property
    def device(self) -> Device:
        return CPU

    def call(self, kernel: Kernel, args: tuple) -> Any:
        arrays, extras, caller = kernel.host_call(args)  # caller None: numpy inputs, numpy outputs
        call_attrs = kernel.call_attrs(extras)

        def make() -> Plan:
            kernel.runtime.install_signal_handlers()  # again, in case the program replaced them (a syscall: fine)
            with prints.shown(kernel.library.prints):  # what Init prints
                return kernel.plan(arrays, call_attrs)

        def first(plan: Plan) -> Any:  # a kernel that stayed in bounds gets the fast path
            return guard.first_call(plan, tuple(contiguous(a, i) for i, a in enumerate(arrays)))

        # another library's inputs: outputs allocated so that its from_dlpack takes them as they are, handed back
        alignment = caller.alignment if caller is not None else 1
        result = kernel.plans.call(signature_key(arrays, call_attrs), make,
                                   lambda plan: invoke_filled(plan, arrays, alignment),
                                   first if kernel.spec.guard else None)
        return result if caller is None else caller.wrap(result)


__all__ = ["InProcess", "Runner"]
