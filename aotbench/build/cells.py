"""Kernel source that lives in a notebook cell: where it is written for the compiler, and which function
in it is the kernel.

Core layer (no IPython): the ``%%aot_kernel`` magic only parses its line and calls these.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from . import cache

#: The file name diagnostics show for the cell (a ``#line`` directive maps compiler lines to cell lines).
CELL_LABEL = "<cell>"

# Comments, string literals and character literals, matched in one pass so that each hides the others.
_NOISE = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.DOTALL)
_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_EXTERN_C_FUNCTION = re.compile(r'extern\s+"C"\s+(?:[\w:*&<>]+\s+)*?int\s+(\w+)\s*\(([^()]*)\)\s*\{')
_ANY_FUNCTION = re.compile(r"\bint\s+(\w+)\s*\(([^()]*)\)\s*\{")
_EXTERN_C_BLOCK = re.compile(r'extern\s+"C"\s*\{')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def kernel_functions(source: str) -> list[str]:
    """Names of the ``extern "C"`` functions with the 7-parameter kernel signature, in source order.

    ``Init`` (4 parameters) and ``InferShape`` (returns a vector) companions never qualify. Functions inside an
    ``extern "C" { ... }`` block count too.
    """
    text = _NOISE.sub(_blank, source)
    found = [(m.start(), m[1]) for m in _EXTERN_C_FUNCTION.finditer(text) if _param_count(m[2]) == 7]
    for block in _EXTERN_C_BLOCK.finditer(text):
        body = _block_body(text, block.end())
        found += [(block.end() + m.start(), m[1]) for m in _ANY_FUNCTION.finditer(body) if _param_count(m[2]) == 7]
    return list(dict.fromkeys(name for _, name in sorted(found)))


def _blank(match: re.Match) -> str:
    token = match.group(0)
    if token == '"C"':
        return token  # keep extern "C"
    return '""' if token[0] == '"' else "' '" if token[0] == "'" else " "


def includes_local_headers(source: str) -> bool:
    """True when the source has a quoted ``#include`` of anything but ``custom_aot_extra.h``."""
    return any(name != "custom_aot_extra.h" for name in _LOCAL_INCLUDE.findall(source))


def _param_count(params: str) -> int:
    params = params.strip()
    return 0 if params in ("", "void") else params.count(",") + 1


def _block_body(text: str, start: int) -> str:
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1]


def write_cell_source(cell: str, name: str, target: str, cache_dir: Path | None = None) -> Path:
    """Write ``cell`` where the compiler will read it and return the path.

    The file is content-addressed (``<cache>/cells/<name>-<hash>/<name>.cc``, ``.cu`` for gpu), so two notebooks
    using one name cannot race. The cell's text wins over the file: a file edited (or damaged) since it was
    written is replaced, atomically, with the cell's text, so what is compiled is always the cell. Its first
    line is ``#line 1 "<cell>"``, so every diagnostic names the cell and counts the cell's own lines.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a C identifier")
    text = f'#line 1 "{CELL_LABEL}"\n{cell}'
    if not text.endswith("\n"):
        text += "\n"
    suffix = ".cu" if target == "gpu" else ".cc"
    digest = hashlib.sha256(f"{suffix}\0{text}".encode()).hexdigest()[:16]
    root = cache.prepare(cache_dir if cache_dir is not None else cache.default_cache_dir())
    folder = root / "cells" / f"{name}-{digest}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{name}{suffix}"
    data = text.encode()
    try:
        same = path.read_bytes() == data
    except OSError:
        same = False  # missing or unreadable: write it
    if not same:
        with cache.full_disk_is_cache_error(root, f"writing the cell's source {path.name}"):
            cache.write_atomic(path, data)
    return path
