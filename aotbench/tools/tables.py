"""Plain-text and HTML tables, and sizes in words, for the results of ``compare`` and ``sweep``."""

from __future__ import annotations

import html
from typing import Any


def format_bytes(n: float) -> str:
    """Bytes in decimal units, matching GB/s: ``512 B``, ``4.1 kB``, ``268 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def size_text(size: Any) -> str:
    return "x".join(str(d) for d in size) if isinstance(size, tuple) else str(size)


def text_table(header: list[str], body: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     .rstrip() for row in [header, *body])


def html_table(header: list[str], body: list[list[str]], caption: str = "") -> str:
    """An HTML table, every cell escaped (labels come from users)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td style='text-align:{'left' if i == 0 else 'right'}'>{html.escape(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in body)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table class='aotbench-table'>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


__all__ = ["format_bytes", "html_table", "size_text", "text_table"]
