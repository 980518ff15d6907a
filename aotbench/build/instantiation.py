"""Point a compile error raised inside a header's template at the user's line that instantiated it.

``Attr<double>`` fails aotbench's static assertion, which g++ locates in ``custom_aot_extra.h``; the line to
fix is the kernel's, which g++ prints only as a context line (``k.cc:7:29:   required from here``, before the
error) and nvcc as ``detected during instantiation of "..." at line 7 of k.cu`` (after it). :func:`relocate`
moves such an error to that line (the cell's own line for a ``%%aot_kernel`` cell, through its ``#line``
directive), says in its message where the failing code and the template argument are, and keeps the header's
location as a note.
"""

from __future__ import annotations

import os
import re

from .diagnostics import Diagnostic

_GCC_HERE = re.compile(r"^(?P<file>[^\n:]+):(?P<line>\d+):(?:(?P<col>\d+):)?\s+required from here\s*$", re.MULTILINE)
_GCC_CONTEXT = re.compile(r"^[^\n:]+: In (?:instantiation of (?P<what>.*)|.*):$", re.MULTILINE)
_NVCC_AT = re.compile(r'instantiation of "(?P<what>[^\n]*)" at line (?P<line>\d+) of (?P<file>[^\n]+?)\s*$',
                      re.MULTILINE)
_WITH = re.compile(r"\[with (?P<args>[^;\]]+)")
_ERRORS = ("error", "fatal error")


def relocate(log: str, found: list[tuple[int, Diagnostic]]) -> list[Diagnostic]:
    """The diagnostics (``found``: (offset in ``log``, diagnostic)) in order, with each error that a template
    instantiation caused in another file moved to the instantiating line, the original kept as a note."""
    events: list[tuple[int, str, object]] = [(pos, "diag", d) for pos, d in found]
    events += [(m.start(), "here", m) for m in _GCC_HERE.finditer(log)]
    events += [(m.start(), "context", m) for m in _GCC_CONTEXT.finditer(log)]
    nvcc_at = [(m.start(), m) for m in _NVCC_AT.finditer(log)]
    events.sort(key=lambda e: e[0])
    out: list[Diagnostic] = []
    here, what = None, None
    for i, (pos, kind, item) in enumerate(events):
        if kind == "context":
            here, what = None, item["what"]
        elif kind == "here":
            here = item
        elif item.severity in _ERRORS:
            site = here
            if site is None:  # nvcc: the instantiation lines follow the error, up to the next diagnostic
                end = next((p for p, k, _ in events[i + 1:] if k == "diag"), len(log))
                after = [m for p, m in nvcc_at if pos < p < end]
                site = after[-1] if after else None
                what = site["what"] if site is not None else what
            if site is not None and site["file"] != item.file:
                out += [_moved(item, site, what), Diagnostic(item.file, item.line, item.column, "note",
                                                              "the failing code, in the template")]
                continue
            out.append(item)
        else:
            out.append(item)
    return out


def _moved(error: Diagnostic, site: re.Match, what: str | None) -> Diagnostic:
    """``error`` located at ``site`` (the instantiating line), its message naming the template argument."""
    args = _WITH.search(what or "")
    named = f"{args['args'].strip()}; " if args else ""
    col = site.groupdict().get("col")
    message = (f"{error.message} (instantiated here with {named}the failing code is in "
               f"{os.path.basename(error.file)}:{error.line})")
    return Diagnostic(site["file"], int(site["line"]), int(col) if col else None, error.severity, message)
