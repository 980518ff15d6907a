"""The plans of one build, by input signature: where "key -> plan -> guarded first call -> remember" happens, once.

Every runner (:mod:`aotbench.run.runner`) calls through :meth:`PlanCache.call`: a known signature runs on its
plan; a new one makes a plan, runs its first call (guarded, unless the op has ``guard=False``) and keeps the plan
only when that call returned. A cache belongs to one :class:`~aotbench.run.kernel.Kernel` (one build): a rebuild
makes a new kernel with an empty cache, so a plan is never used with a library it was not made for, and a call
that was still planning on the old build remembers its plan where nobody looks any more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from ..native import interrupts
from .plan import Plan

MAX_PLANS = 64
_FILLED = ("filled",)  # appended to the key of a plan with fill values: the op's fast path never finds it


class PlanCache:
    """Plans by signature key (:func:`aotbench.run.plan.signature_key`), at most :data:`MAX_PLANS` (the oldest
    goes first). ``table`` is the dict the op's fast path reads directly."""

    __slots__ = ("_lock", "table")

    def __init__(self) -> None:
        self.table: dict[Hashable, Plan] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.table)

    def find(self, key: tuple) -> Plan | None:
        """The plan kept for ``key`` (with or without fill values), or None."""
        table = self.table
        plan = table.get(key)
        return plan if plan is not None else table.get(key + _FILLED)

    def remember(self, key: tuple, plan: Plan) -> None:
        """Keep ``plan`` for later calls of ``key``. A plan whose outputs must be filled before each call
        (``plan.fill``) is kept off the fast path's key, so it always takes a path that fills them."""
        if plan.fill is not None:
            key = key + _FILLED
        with self._lock:
            if len(self.table) >= MAX_PLANS and key not in self.table:
                del self.table[next(iter(self.table))]
            self.table[key] = plan

    def call(self, key: tuple, make: Callable[[], Plan], run: Callable[[Plan], Any],
             first: Callable[[Plan], Any] | None = None) -> Any:
        """One call of signature ``key``: ``run(plan)`` on the kept plan; else ``make()`` a plan, call
        ``first(plan)`` (the guarded first call) and keep the plan once that returned (with no ``first``, keep
        it and ``run`` it)."""
        plan = self.find(key)
        if plan is not None:
            return run(plan)
        plan = make()
        if first is None:  # kept before it runs: a kernel error does not cost the next call a new plan
            self.remember(key, plan)
            return run(plan)
        outputs = first(plan)
        self.remember(key, plan)
        return outputs

    def clear(self) -> None:
        """Drop every plan (each frees its AotExtra when the last call using it is done)."""
        with self._lock:
            self.table.clear()

    def drop_retired(self) -> None:
        """Forget the plans an abandoned call retired (:func:`aotbench.native.interrupts.retire_abandoned`)."""
        with self._lock:
            for key in [k for k, p in self.table.items() if interrupts.is_retired(p)]:
                del self.table[key]

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread may have held this one at the fork)."""
        self._lock = threading.Lock()

    def take_all(self) -> list[Plan]:
        """Every plan, taken out of the cache (for a caller that must keep them from being freed)."""
        with self._lock:
            plans = list(self.table.values())
            self.table.clear()
        return plans


__all__ = ["MAX_PLANS", "PlanCache"]
