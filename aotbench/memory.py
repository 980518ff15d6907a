"""How much memory this process may use, so that an impossible output is refused before it is allocated.

numpy's ``np.empty`` of a few terabytes raises a bare ``MemoryError``; one that fits the address space but not
the machine succeeds (Linux overcommits) and the process is killed when the kernel writes it. The limit is the
machine's physical memory, or the container's cgroup limit when that is lower (a Binder pod has a few GiB).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@functools.cache
def host_limit_bytes() -> int:
    """Physical memory, or the cgroup's memory limit if it is set and smaller (read once per process)."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        physical = 1 << 62
    limit = physical
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < limit:
            limit = int(text)
    return limit


def size_text(n: int) -> str:
    """``n`` bytes in binary units: "512 B", "3.0 MiB", "4.0 TiB"."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
