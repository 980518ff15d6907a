"""How much memory this process may use, so that an impossible output is refused before it is allocated.

numpy's ``np.empty`` of a few terabytes raises a bare ``MemoryError``; one that fits the address space but not
the machine succeeds (Linux overcommits) and the process is killed when the kernel writes it. The limit is the
machine's physical memory, or a cgroup's memory limit when lower: the process's own cgroup or any above it (a
Binder pod has a few GiB; a Slurm job or ``systemd-run -p MemoryMax=`` limits a nested cgroup).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")


@functools.cache
def host_limit_bytes() -> int:
    """Physical memory, or the smallest memory limit of this process's cgroup and its ancestors if lower (read
    once per process)."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        physical = 1 << 62
    return min([physical, *_cgroup_limits()])


def _cgroup_limits(lines: list[str] | None = None, root: Path = _CGROUP_ROOT) -> list[int]:
    """The memory limits set on this process's cgroup and each cgroup above it (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), from ``/proc/self/cgroup``'s ``lines``; v2's "max" is no limit, and v1's
    "unlimited" (a huge number) loses to physical memory in the caller's min."""
    if lines is None:
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return []
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: one unified hierarchy
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        folder = base / path.lstrip("/")
        for directory in [folder, *folder.parents]:
            candidates.append(directory / name)
            if directory == base:
                break
    limits = []
    for file in candidates:
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            limits.append(int(text))
    return limits


def size_text(n: int) -> str:
    """``n`` bytes in binary units: "512 B", "3.0 MiB", "4.0 TiB" (for messages, the doctor and the cache CLI)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
