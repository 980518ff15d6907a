"""The two views, as text (``.text``, ``str``) and as HTML for notebooks (``_repr_html_``).

The HTML never sets a text colour: lines are shaded with translucent backgrounds over the page's own colours,
so the same output reads in JupyterLab's light and dark themes (and in a stored notebook on GitHub).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from ...errors import ArgumentValueError
from .listing import Function, SourceText, same_file
from .remarks import KINDS, Remark

#: Background of a line by the first of its remarks' kinds (translucent: light and dark themes alike).
SHADES = {
    "not vectorized": "rgba(230, 140, 0, 0.30)",
    "vectorized": "rgba(40, 170, 80, 0.30)",
    "loop": "rgba(60, 130, 230, 0.25)",
    "registers": "rgba(150, 90, 220, 0.28)",
    "inlined": "rgba(128, 128, 128, 0.20)",
    "missed": "rgba(128, 128, 128, 0.12)",
}
SOURCE_SHADE = "rgba(128, 128, 128, 0.16)"  # a source line between instructions
MARKS = {"not vectorized": "X", "vectorized": "V", "loop": "L", "registers": "R", "inlined": "I", "missed": "m"}
_PRE = "font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.45; margin: 0"
_BOX = "max-height: 36em; overflow: auto; border: 1px solid rgba(128, 128, 128, 0.35); padding: 4px"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


@dataclass(frozen=True, repr=False)
class Disassembly:
    """What the compiler generated for the kernel: ``functions`` (name, architecture, code by source line),
    ``text`` and an HTML view. ``kind`` is ``"asm"`` (host), ``"sass"`` or ``"ptx"``; ``command`` is the
    inspection build's (the op's command plus ``-g`` or ``-lineinfo``)."""

    kind: str
    functions: tuple[Function, ...]
    source: SourceText
    command: tuple[str, ...]
    note: str = ""  # why there are no functions, when there are none

    def function(self, name: str) -> str:
        """The text of the functions whose name (without namespace, return type or parameters) starts with
        ``name``: ``"CustomKernel"``, ``"saxpy"``, ``"scale<float>"``."""
        picked = [f for f in self.functions if _short(f.name).startswith(name)]
        if not picked:
            names = ", ".join(dict.fromkeys(_short(f.name) for f in self.functions)) or "none"
            raise ArgumentValueError(f"no function {name!r} in this disassembly; its functions are: {names}")
        return "\n".join(self._function_text(f) for f in picked)

    def for_line(self, line: int) -> str:
        """Every instruction generated for the kernel's source line ``line``, function by function."""
        out = []
        for f in self.functions:
            code = [i for b in f.blocks if b.line == line and self.source.owns(b.file) for i in b.instructions]
            if code:
                out += [f"== {f.name} [{f.arch}] ==", self._location(self.source.path, line),
                        *(f"        {i}" for i in code)]
        return "\n".join(out) + "\n" if out else ""

    @property
    def text(self) -> str:
        if not self.functions:
            return f"({self.note or 'no functions'})\n"
        return "\n".join(self._function_text(f) for f in self.functions)

    def _function_text(self, f: Function) -> str:
        out = [f"== {f.name} [{f.arch}] {f.instruction_count} instructions =="]
        for block in f.blocks:
            out.append(self._location(block.file, block.line))
            out += [f"        {i}" for i in block.instructions]
        return "\n".join(line for line in out if line is not None) + "\n"

    def _location(self, file: str | None, line: int | None) -> str | None:
        if line is None:
            return None
        if self.source.owns(file):
            return f"{line:5d} | {self.source.line(line)}"
        return f"      [{_basename(file)}:{line}]"

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's text view: the whole listing
        printer.text(self.text)

    def __repr__(self) -> str:
        names = ", ".join(dict.fromkeys(_short(f.name) for f in self.functions)) or "none"
        archs = ", ".join(dict.fromkeys(f.arch for f in self.functions))
        return f"<aotbench Disassembly ({self.kind}, {archs}): {names}>"

    def _repr_html_(self) -> str:
        extra = "-lineinfo" if "-lineinfo" in self.command else "-g"
        built = f" of the inspection build (the op's command plus <code>{extra}</code>)" if self.command else ""
        parts = [f"<div style=\"{_BOX}\"><div><b>{_e(self.kind)}</b>{built}</div>"]
        for n, f in enumerate(self.functions):
            rows = []
            for block in f.blocks:
                loc = self._location(block.file, block.line)
                if loc is not None:
                    own = same_file(block.file, self.source.path)
                    rows.append(f"<div style=\"background: {SOURCE_SHADE if own else 'transparent'}; "
                                f"font-weight: {'bold' if own else 'normal'}\">{_e(loc)}</div>")
                rows += [f"<div>        {_e(i)}</div>" for i in block.instructions]
            parts.append(f"<details{' open' if n == 0 else ''}><summary><code>{_e(f.name)}</code> [{_e(f.arch)}], "
                         f"{f.instruction_count} instructions</summary><pre style=\"{_PRE}\">{''.join(rows)}</pre>"
                         "</details>")
        return "".join(parts) + "</div>"


@dataclass(frozen=True, repr=False)
class Annotation:
    """The kernel's source with what the compiler said about each line: ``remarks`` (line, kind, message),
    ``text`` and an HTML view shading each line by its most telling remark. ``note`` says why there may be
    none (no optimisation flags)."""

    source: SourceText
    remarks: tuple[Remark, ...]
    flags: tuple[str, ...]
    note: str = ""
    hidden_kinds: frozenset = frozenset({"missed"})

    @property
    def vectorized_lines(self) -> list[int]:
        """The lines GCC vectorized: a loop, or straight-line code ("basic block part vectorized")."""
        return sorted({r.line for r in self.remarks if r.kind == "vectorized"})

    @property
    def not_vectorized_lines(self) -> list[int]:
        return sorted({r.line for r in self.remarks if r.kind == "not vectorized"})

    def _shown(self) -> dict[int, list[Remark]]:
        by_line: dict[int, list[Remark]] = {}
        for r in self.remarks:
            if r.kind not in self.hidden_kinds:
                by_line.setdefault(r.line, []).append(r)
        return by_line

    def _outside(self, by_line: dict[int, list[Remark]]) -> list[int]:
        """Remark lines the source does not have: 0 (no line) and lines past its end (a ``#line`` of its own)."""
        return sorted(n for n in by_line if not 1 <= n <= len(self.source.lines))

    def summary(self) -> str:
        counts = {k: sum(r.kind == k for r in self.remarks) for k in KINDS}
        said = ", ".join(f"{n} ptxas report{'s' * (n != 1)} (kernel, architecture)" if k == "registers" else
                         f"{n} {k}" for k, n in counts.items() if n and k not in self.hidden_kinds) or "no remarks"
        return f"flags {' '.join(self.flags) or '(none)'}: {said}" + (f". {self.note}" if self.note else "")

    @property
    def text(self) -> str:
        by_line = self._shown()
        out = [self.summary()]
        for number, code in enumerate(self.source.lines, 1):
            here = by_line.get(number, [])
            mark = MARKS[min((r.kind for r in here), key=KINDS.index)] if here else " "
            out.append(f"{number:5d} {mark} | {code}")
            out += [f"        |   {r.kind}: {r.message}" for r in here]
        out += [f"        ({_where(n)}) {r.kind}: {r.message}" for n in self._outside(by_line) for r in by_line[n]]
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's text view: the annotated source
        printer.text(self.text)

    def __repr__(self) -> str:
        return f"<aotbench Annotation: {self.summary()}>"

    def _repr_html_(self) -> str:
        by_line = self._shown()
        legend = " ".join(f"<span style=\"background: {SHADES[k]}; padding: 0 4px\">{_e(k)}</span>"
                          for k in KINDS if any(r.kind == k for rs in by_line.values() for r in rs))
        rows = []
        for number, code in enumerate(self.source.lines, 1):
            here = by_line.get(number, [])
            shade = SHADES[min((r.kind for r in here), key=KINDS.index)] if here else "transparent"
            tip = _e("\n".join(f"{r.kind}: {r.message}" for r in here))
            rows.append(f"<div class=\"aotb-line\" style=\"background: {shade}\" title=\"{tip}\">"
                        f"{number:5d}  {_e(code) or ' '}</div>")
            rows += [f"<div class=\"aotb-remark\" style=\"background: {SHADES[r.kind]}; font-style: italic\">"
                     f"          {_e(r.kind)}: {_e(r.message)}</div>" for r in here]
        rows += [f"<div class=\"aotb-remark\" style=\"background: {SHADES[r.kind]}\">({_where(n)}) "
                 f"{_e(r.kind)}: {_e(r.message)}</div>" for n in self._outside(by_line) for r in by_line[n]]
        return (f"<div style=\"{_BOX}\"><div>{_e(self.summary())}</div><div>{legend}</div>"
                f"<pre style=\"{_PRE}\">{''.join(rows)}</pre></div>")


def _short(name: str) -> str:
    """``void (anonymous namespace)::scale<float>(float*, long)`` -> ``scale<float>``: no return type, namespace
    or parameters (template arguments stay)."""
    head, depth, cut = name.replace("(anonymous namespace)::", ""), 0, 0
    for i, ch in enumerate(head):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0 and not head[:i].endswith("operator"):
            head = head[:i]
            break
        if ch == " " and depth == 0 and not head[:i].endswith("operator"):
            cut = i + 1  # a return type ends here
    head, depth, start = head[cut:], 0, 0
    for i in range(len(head) - 1):
        depth += (head[i] == "<") - (head[i] == ">")
        if head[i:i + 2] == "::" and depth == 0:
            start = i + 2
    return head[start:]


def _where(line: int) -> str:
    return "no line" if line == 0 else f"line {line}"


def _basename(file: str | None) -> str:
    return (file or "?").rsplit("/", 1)[-1]
