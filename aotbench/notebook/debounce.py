"""Run an action once changes stop: each trigger restarts the wait, so a dragged slider runs only its last value.

The wait is a timer on the running asyncio loop when there is one (a Jupyter kernel's: the action then runs
between messages, on the kernel's thread), else a thread's timer. A delay of 0 runs the action at once,
synchronously, for scripts and tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ArgumentValueError


class Debouncer:
    """Run ``action`` once changes stop for ``delay_ms``: every trigger restarts the wait, so while a control
    is dragged only the latest setting runs. ``delay_ms=0`` runs at once, synchronously."""

    def __init__(self, action: Callable[[], None], delay_ms: float):
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)) or delay_ms < 0:
            raise ArgumentValueError(f"debounce_ms must be a number >= 0, got {delay_ms!r}")
        self._action = action
        self._delay_s = delay_ms / 1000
        self._pending: Any = None
        self._lock = threading.Lock()

    def trigger(self) -> None:
        if self._delay_s == 0:
            self._action()
            return
        with self._lock:
            if self._pending is not None:
                self._pending.cancel()
            try:
                loop = asyncio.get_running_loop()  # a Jupyter kernel's: the run happens between messages
            except RuntimeError:
                loop = None
            if loop is not None:
                self._pending = loop.call_later(self._delay_s, self._fire)
            else:
                self._pending = threading.Timer(self._delay_s, self._fire)
                self._pending.daemon = True
                self._pending.start()

    def cancel(self) -> None:
        """Drop the pending run, if any (a caller about to run now)."""
        with self._lock:
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None

    def _fire(self) -> None:
        with self._lock:
            self._pending = None
        self._action()

    @property
    def pending(self) -> bool:
        return self._pending is not None


__all__ = ["Debouncer"]
