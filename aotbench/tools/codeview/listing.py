"""The parts every view is made of: a function's instructions grouped under the source line they came from.

What objdump, nvdisasm and a PTX file have in common once parsed: :class:`Function` objects, each a run
of :class:`Block` (a source location, or none, and the instructions generated for it). The text and HTML views
(:mod:`aotbench.tools.codeview.views`) render these, with the kernel's own lines shown from its source text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The file name a notebook cell's source has in diagnostics and debug info (``#line 1 "<cell>"``).
CELL_LABEL = "<cell>"


@dataclass
class Block:
    """Instructions generated for one source location: ``file`` and ``line`` (None when the tool gave none)."""

    file: str | None
    line: int | None
    instructions: list[str] = field(default_factory=list)


@dataclass
class Function:
    """One function of the build: its demangled name, the architecture (``x86-64``, ``sm_90``) and its code."""

    name: str
    arch: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def instruction_count(self) -> int:
        """Instructions, not counting labels, PTX declarations (``.reg``) and braces."""
        return sum(1 for b in self.blocks for i in b.instructions if is_instruction(i))

    def lines(self, source_file: str) -> set[int]:
        """The lines of ``source_file`` this function has code for."""
        return {b.line for b in self.blocks if b.line is not None and same_file(b.file, source_file)}


class SourceText:
    """The kernel's source as the user wrote it: the file's lines, or a cell's (its ``#line 1 "<cell>"`` line
    is aotbench's, so line 1 is the cell's first line, as in diagnostics)."""

    def __init__(self, path: str, text: str):
        lines = text.splitlines()
        self.is_cell = bool(lines) and lines[0].strip() == f'#line 1 "{CELL_LABEL}"'
        self.path = CELL_LABEL if self.is_cell else path
        self.lines = lines[1:] if self.is_cell else lines

    def line(self, number: int) -> str:
        return self.lines[number - 1] if 1 <= number <= len(self.lines) else ""

    def owns(self, file: str | None) -> bool:
        """Whether a location's file is this source (debug info may prefix a cell's label with a folder)."""
        return same_file(file, self.path)


def is_instruction(text: str) -> bool:
    return not (text.endswith(":") or text.startswith((".", "{", "}", ")", ",")) or text in ("", "("))


def same_file(file: str | None, wanted: str) -> bool:
    if file is None:
        return False
    if wanted == CELL_LABEL:
        return file == CELL_LABEL or file.endswith("/" + CELL_LABEL)
    return file == wanted
