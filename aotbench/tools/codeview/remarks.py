"""What the optimiser said, line by line: GCC's ``-fopt-info`` remarks and ptxas's per-kernel resource report.

GCC writes one remark per line, ``file:line:col: optimized|missed|note: message``, for the groups asked for with
:data:`GCC_REMARK_FLAGS` (vectorizer, loop optimizer, inliner). The flags only add output: the code generated is
the same as without them. Each remark of the kernel's own source becomes a :class:`Remark` with a kind a person
reads (vectorized, not vectorized, loop, inlined, missed); a loop GCC could not vectorize gets one remark with
GCC's reason. For CUDA, ptxas's report (registers, shared and local memory, spills) is put on the line that
defines each kernel.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...build import nvcc
from .listing import SourceText

#: Asks GCC for the vectorizer's, the loop optimizer's and the inliner's remarks, done and missed.
GCC_REMARK_FLAGS = ("-fopt-info-vec-loop-inline-optimized-missed",)

#: The kinds, most telling first: a line with several remarks is shaded by the first of its kinds here.
KINDS = ("not vectorized", "vectorized", "loop", "registers", "inlined", "missed")

_REMARK = re.compile(r"^(?P<file>[^\n]+?):(?P<line>\d+):(?P<col>\d+): (?P<gcc>optimized|missed|note): +(?P<msg>.*)$",
                     re.MULTILINE)
_SIGNATURE = re.compile(r"(?<=[\w>])\((?:[^()]|\([^()]*\))*\)")  # a parameter list, one level of nesting
_GLOBAL = re.compile(r"__global__\s+(?:[\w:<>,*&\s]+?\s+)?(\w+)\s*(?:<[^>]*>\s*)?\(")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")


@dataclass(frozen=True)
class Remark:
    """One thing the compiler said about a source line: ``kind`` (see :data:`KINDS`) and the message."""

    line: int
    kind: str
    message: str
    column: int | None = None


def gcc_remarks(log: str, source: SourceText) -> list[Remark]:
    """The remarks in a GCC log that are about ``source``, sorted by line, one per (line, kind, message)."""
    found: dict[tuple, Remark] = {}
    raw = [(int(m["line"]), int(m["col"]), m["gcc"], m["msg"].strip()) for m in _REMARK.finditer(log)
           if source.owns(m["file"])]
    reason_of = set()  # GCC says "couldn't vectorize loop", then (next) "not vectorized: <why>"
    for i, (line, col, gcc, msg) in enumerate(raw):
        if i in reason_of:
            continue
        if msg.startswith("couldn't vectorize loop"):
            after = raw[i + 1] if i + 1 < len(raw) else None
            why = "GCC gave no reason"
            if after is not None and after[3].startswith("not vectorized:"):
                why = after[3].removeprefix("not vectorized:").strip()
                reason_of.add(i + 1)
            found.setdefault((line, "not vectorized", why), Remark(line, "not vectorized", why, col))
            continue
        if "static initializers for" in msg or "__static_initialization_and_destruction" in msg:
            continue  # <iostream>'s initialiser (the header includes it), not the kernel's code
        kind, text = _classify(gcc, msg)
        found.setdefault((line, kind, text), Remark(line, kind, text, col))
    return sorted(found.values(), key=lambda r: (r.line, KINDS.index(r.kind), r.column or 0))


def _classify(gcc: str, msg: str) -> tuple[str, str]:
    if gcc == "optimized" and "vectorized" in msg and msg.startswith(("loop vectorized", "basic block")):
        return "vectorized", msg
    if gcc == "optimized" and msg.startswith(("Inlined", "Inlining")):
        return "inlined", _short_inline(msg)
    if gcc == "optimized" and "loop" in msg:
        return "loop", msg
    return "missed", _short_inline(msg) if "inline" in msg else msg


def _short_inline(msg: str) -> str:
    """An inliner remark without parameter lists, template arguments and cgraph numbers, which make it
    unreadably long: ``Inlined add_rows into col_sums``."""
    text = re.sub(r" \[with [^\]]*\]", "", msg)
    for _ in range(3):
        text = _SIGNATURE.sub("", text)
    text = re.sub(r"/\d+", "", text)
    text = re.sub(r"(?:[\w:]+ )?\{anonymous\}::", "", text)
    return re.sub(r" which now has time .*$| net change .*$", "", text).strip()


def count_elsewhere(log: str, source: SourceText, files: frozenset[str]) -> int:
    """How many remarks in a GCC log are about ``files`` (the kernel's own headers) rather than its source."""
    return sum(1 for m in _REMARK.finditer(log) if not source.owns(m["file"]) and os.path.normpath(m["file"]) in files)


def ptxas_remarks(resource_usage: list[dict], source: SourceText) -> list[Remark]:
    """ptxas's report for each kernel and architecture, on the source line that defines the kernel (line 0, no
    line, when no ``__global__`` definition of that name is found, or several are: kernels of one name in two
    namespaces)."""
    definitions: dict[str, list[int]] = {}
    for number, text in enumerate(source.lines, 1):
        for m in _GLOBAL.finditer(_LAUNCH_BOUNDS.sub(" ", text)):
            definitions.setdefault(m[1], []).append(number)
    remarks = []
    for entry in resource_usage:
        short = nvcc.short_kernel_name(str(entry.get("kernel", "?")))
        base = short.split("<", 1)[0].rsplit("::", 1)[-1]
        lines = definitions.get(base, [])
        remarks.append(Remark(lines[0] if len(lines) == 1 else 0, "registers",
                              f"{short} [{entry.get('arch', '?')}]: " + resource_text(entry)))
    return sorted(remarks, key=lambda r: r.line)


def resource_text(entry: dict) -> str:
    """``32 registers, 0 B shared, 0 B local (stack), no spills`` (ptxas's numbers, in words)."""
    spills = entry.get("spill_stores", 0) + entry.get("spill_loads", 0)
    spill = (f"spills: {entry.get('spill_stores', 0)} B stored, {entry.get('spill_loads', 0)} B loaded" if spills
             else "no spills")
    return (f"{entry.get('registers')} registers, {entry.get('shared_bytes', 0)} B shared, "
            f"{entry.get('stack_bytes', 0)} B local (stack), {spill}")
