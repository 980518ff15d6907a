"""What a guarded call tells about its inputs (:mod:`aotbench.run.guard` runs it).

A kernel gets raw pointers, so nothing stops it writing into an input: the caller's array changes, a file
behind ``np.memmap(mode="r+")`` too, and a read-only mapping (``np.memmap(mode="r")``) or an immutable ``bytes``
object behind ``np.frombuffer`` is a crash or a silent change of immutable memory. The guarded call copies
read-only inputs first (:func:`writable`), takes a :func:`snapshot` of them and reports, after its first run,
which input the kernel wrote and how many elements (:func:`input_writes`); the confirming run gets the inputs
back as they were. :func:`dtype_hint` names a dtype mix-up: a kernel for float32 given float64 arrays writes
half the bytes of its float64 output.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

CHUNK_BYTES = 1 << 22  # buffers are inspected this much at a time: memory stays bounded for any output
SNAPSHOT_BYTES = 64 << 20  # inputs are copied before a guarded call up to this much in all (see snapshot)
SHOW_INDICES = 5


def writable(arrays: tuple) -> tuple[tuple, list[bool]]:
    """The inputs with each read-only one replaced by a copy (a kernel writing into it would crash or change
    immutable memory), and which ones were read-only."""
    readonly = [not a.flags.writeable for a in arrays]
    return tuple(np.array(a) if ro else a for a, ro in zip(arrays, readonly)), readonly


def chunks(n: int, step: int, reverse: bool = False) -> Iterator[tuple[int, int]]:
    starts = range(0, n, step)
    for start in reversed(starts) if reverse else starts:
        yield start, min(start + step, n)


def words(data: np.ndarray) -> np.ndarray:
    """An array's elements (C-contiguous) as unsigned words of their size (or rows of bytes for other sizes), flat."""
    item = data.dtype.itemsize
    flat = data.reshape(-1)
    return flat.view(f"u{item}") if item in (1, 2, 4, 8) else flat.view(np.uint8).reshape(-1, item)


def snapshot(arrays: tuple) -> list:
    """Per input, what a write into it is told by: a copy (while the inputs copied stay under SNAPSHOT_BYTES in
    all, so a large first call does not double its memory), or else a CRC-32 of every CHUNK_BYTES."""
    out, budget = [], SNAPSHOT_BYTES
    for a in arrays:
        if a.nbytes <= budget:
            out.append(a.copy())
            budget -= a.nbytes
        else:
            out.append(_crcs(a))
    return out


def _crcs(a: np.ndarray) -> list[int]:
    flat = a.reshape(-1).view(np.uint8)
    return [zlib.crc32(flat[lo:hi]) for lo, hi in chunks(flat.size, CHUNK_BYTES)]


def input_writes(arrays: tuple, before: list, readonly: list[bool], findings: list[str]) -> list[int]:
    """The copied inputs the kernel wrote into (compared with :func:`snapshot`'s copies), each write said as a
    finding: which input, how many elements (or, for an input too large to copy, how many chunks changed)."""
    written = []
    for k, (now, then) in enumerate(zip(arrays, before)):
        if not now.size:
            continue
        whose = ("it is read-only, so the kernel wrote into a copy and the caller's array is unchanged" if readonly[k]
                 else "the caller's array now holds what the kernel wrote, unless aotbench passed the kernel a "
                 "copy of it (a non-contiguous or byte-swapped input, or one numpy could only copy, such as a list)")
        rule = ("A kernel must not write into its inputs (MindSpore may share their memory with other tensors): "
                "write the result to an output")
        if isinstance(then, list):  # a large input: its chunks' checksums
            changed = sum(c != d for c, d in zip(_crcs(now), then))
            if changed:
                findings.append(f"input {k}: the kernel wrote into {changed} of its {len(then)} blocks of "
                                f"{CHUNK_BYTES >> 20} MiB (too large to count elements here: op.check on a smaller "
                                f"input counts them); {whose}. {rule}")
            continue
        a, b = words(now), words(then)
        step = max(CHUNK_BYTES // now.dtype.itemsize, 1)
        count, first = 0, []
        for lo, hi in chunks(a.shape[0], step):
            differs = a[lo:hi] != b[lo:hi] if a.ndim == 1 else (a[lo:hi] != b[lo:hi]).any(axis=1)
            count += int(differs.sum())
            if len(first) < SHOW_INDICES:
                first += [lo + int(i) for i in np.flatnonzero(differs)[:SHOW_INDICES - len(first)]]
        if not count:
            continue
        written.append(k)
        at = ", ".join(str(tuple(int(v) for v in np.unravel_index(i, now.shape))) for i in first)
        findings.append(f"input {k}: {count} elements of {now.size} were written by the kernel (first at {at}); "
                        f"{whose}. {rule}")
    return written


_RATIO_WORDS = {2: "half", 4: "a quarter of", 0.5: "twice", 0.25: "four times"}


def dtype_hint(dtype: np.dtype, nbytes: int, extent: int, in_dtypes) -> str:
    """When a kernel wrote, from the start of an output, the bytes of its element count in another dtype (half
    the bytes of a float64 output: float32 elements; twice those of a float32 output: float64), a sentence
    asking whether it expects that dtype, naming the inputs' dtypes; else "". ``extent`` is one past the last
    byte written."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "fiuc" or not nbytes:
        return ""
    for ratio in (2, 4, 0.5, 0.25):
        size = dtype.itemsize / ratio
        other = _same_kind(dtype, size)
        if other is None:
            continue
        target = int(nbytes / ratio)
        slack = int(min(size, dtype.itemsize))  # the last element may end in bytes that equal the poison
        if target - slack < extent <= target:
            words = _RATIO_WORDS[ratio]
            inputs = f" (the inputs are {', '.join(in_dtypes)})" if in_dtypes else ""
            return (f" — the kernel wrote {words} the bytes of the {dtype} output: does it expect {other}?"
                    f"{inputs}")
    return ""


def _same_kind(dtype: np.dtype, size: float) -> np.dtype | None:
    """The dtype of ``dtype``'s kind with ``size``-byte elements (float32 for a float64 and 4), if numpy has one."""
    sizes = {"f": (2, 4, 8), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "c": (8, 16)}[dtype.kind]
    if size != int(size) or int(size) not in sizes:
        return None
    return np.dtype(f"{dtype.kind}{int(size)}")


__all__ = ["CHUNK_BYTES", "SHOW_INDICES", "SNAPSHOT_BYTES", "chunks", "dtype_hint", "input_writes", "snapshot",
           "words", "writable"]
