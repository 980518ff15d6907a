"""A compiler diagnostic as data: what :class:`~aotbench.errors.CompileError` carries and the notebook shows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnostic:
    """One compiler diagnostic: where (file, 1-based line and column) and what."""

    file: str
    line: int
    column: int | None
    severity: str  # "error", "fatal error", "warning" or "note"
    message: str

    def __str__(self) -> str:
        col = f":{self.column}" if self.column is not None else ""
        return f"{self.file}:{self.line}{col}: {self.severity}: {self.message}"
