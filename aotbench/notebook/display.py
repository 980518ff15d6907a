"""Text and HTML renderings of ops, compile errors and aotbench's warnings, as plain strings.

No UI library is imported here: IPython calls ``Op._repr_html_`` and ``CompileError._render_traceback_``,
which delegate to these functions. Under IPython, an aotbench warning raised from a cell's line is written as
``Cell In[5], line 3: ContractWarning: ...`` (as IPython names the cell in a traceback) instead of Python's
``/tmp/ipykernel_1234/2745139043.py:3: ContractWarning: ...``: :func:`install_warning_format` wraps
:func:`warnings.formatwarning` for that, and leaves every other warning, and every warning outside IPython (a
plain script), in Python's standard form.
"""

from __future__ import annotations

import ast
import html
import linecache
import sys
import warnings
from typing import TYPE_CHECKING

from ..spec import rules
from ..build.diagnostics import Diagnostic
from ..errors import AotbenchWarning, CompileError

if TYPE_CHECKING:
    from ..op.op import Op

MAX_DIAGNOSTICS = 12


def op_rows(op: Op) -> list[tuple[str, str]]:
    """(label, value) pairs describing an op: what it is and how it was built."""
    spec = op.spec
    attrs = ", ".join(f"{name}={value!r}" for name, value in op.attrs.items()) or "none"
    if spec.call_attrs:
        attrs += f" (call arguments: {', '.join(spec.call_attrs)})"
    if op.artifact is None:
        build = f"prebuilt {op.library.path}"
    elif op.artifact.cache_hit:
        build = f"cache hit, {op.artifact.path.name}"
    else:
        build = f"compiled in {op.artifact.build_time_s:.2f} s, {op.artifact.path.name}"
    outputs = f"{spec.n_outputs} by {rules.describe_rule(spec.out_shape)}"
    target = f"{spec.target}, emulated on the CPU" if getattr(op, "emulated", False) else spec.target
    rows = [("function", op.name), ("target", target), ("attributes", attrs), ("outputs", outputs),
            ("build", build)]
    record = op.artifact.manifest if op.artifact else None
    if record is not None and record.arch_reason is not None:
        rows.append(("arch", record.arch_reason))
    rows += [("kernel", resource_text(r)) for r in op.resources]
    rows += [("note", note) for note in (record.notes if record else ())]
    return rows


def resource_text(r: dict) -> str:
    """One ptxas report entry in words."""
    return (f"{r['kernel']} ({r['arch']}): {r['registers']} registers, {r['shared_bytes']} B shared, "
            f"{r['stack_bytes']} B stack, {r['spill_stores']}/{r['spill_loads']} B spill stores/loads")


def op_text(op: Op) -> str:
    return "\n".join(f"{label:>10}: {value}" for label, value in op_rows(op))


def op_html(op: Op) -> str:
    rows = "".join(
        f"<tr><th style='text-align:right;padding-right:1em'>{html.escape(label)}</th>"
        f"<td style='text-align:left'><code>{html.escape(value)}</code></td></tr>" for label, value in op_rows(op))
    return f"<div><b>aotbench op</b><table>{rows}</table></div>"


def _snippet(diag: Diagnostic, sources: dict[str, str]) -> list[str]:
    """The offending source line with its number and a caret under the column, if the source is known."""
    lines = sources.get(diag.file, "").splitlines()
    if not 1 <= diag.line <= len(lines):
        return []
    raw = lines[diag.line - 1]
    gutter = f"{diag.line:>5} | "
    out = [gutter + raw.expandtabs(4)]
    if diag.column:
        # g++ counts bytes; the caret goes under the same character of the tab-expanded line.
        before = raw.encode()[:diag.column - 1].decode(errors="ignore").expandtabs(4)
        out.append(" " * (len(gutter) + len(before)) + "^")
    return out


def _shown(err: CompileError) -> list[Diagnostic]:
    return [d for d in err.diagnostics if d.severity != "note" or d.file in err.sources][:MAX_DIAGNOSTICS]


def compile_error_text(err: CompileError) -> str:
    """Each diagnostic (cell line numbers where the source is a cell) with the offending line and a caret."""
    errors = len(err.errors)
    head = (f"CompileError: compilation failed with {errors} error{'s' * (errors != 1)} "
            f"({err.argv[0]} exited with status {err.returncode})")
    out = [head]
    for diag in _shown(err):
        out.append(str(diag))
        out += _snippet(diag, err.sources)
    if len(err.diagnostics) > MAX_DIAGNOSTICS:
        out.append(f"... {len(err.diagnostics) - MAX_DIAGNOSTICS} more diagnostics")
    if not err.diagnostics:
        out += err.log.strip().splitlines()[-15:]
    out.append("(the complete compiler output is in the exception's .log)")
    return "\n".join(out)


def compile_error_html(err: CompileError) -> str:
    colors = {"error": "#b00020", "fatal error": "#b00020", "warning": "#8a6d00", "note": "#555"}
    items = []
    for diag in _shown(err):
        snippet = "\n".join(_snippet(diag, err.sources))
        where = f"{diag.file}:{diag.line}" + (f":{diag.column}" if diag.column else "")
        code = f"<pre style='margin:0.2em 0'>{html.escape(snippet)}</pre>" if snippet else ""
        items.append(
            f"<div style='margin:0.3em 0'><code>{html.escape(where)}</code> "
            f"<b style='color:{colors.get(diag.severity, '#000')}'>{html.escape(diag.severity)}</b>: "
            f"{html.escape(diag.message)}{code}</div>")
    errors = len(err.errors)
    return (f"<div style='border-left:4px solid #b00020;padding-left:0.6em'>"
            f"<b>Compile failed</b>: {errors} error{'s' * (errors != 1)}{''.join(items)}"
            f"<details><summary>complete compiler output</summary><pre>{html.escape(err.log)}</pre>"
            f"<pre>{html.escape(' '.join(err.argv))}</pre></details></div>")


def cell_warning_text(message, category, filename: str, lineno: int, line: str | None = None) -> str | None:
    """An aotbench warning raised from an IPython cell, named by the cell (``Cell In[5], line 3: ...``) with the
    cell's line under it; None for any other warning, or where IPython does not know the file as a cell."""
    if not (isinstance(category, type) and issubclass(category, AotbenchWarning)):
        return None
    from .tracebacks import _cell_label  # imported here: tracebacks imports this module

    label = _cell_label(filename)
    if label is None:
        return None
    text = f"{label}, line {lineno}: {category.__name__}: {message}\n"
    source = _as_typed(linecache.getline(filename, lineno) if line is None else line)
    return text + (f"  {source.strip()}\n" if source.strip() else "")


def _as_typed(source: str) -> str:
    """A cell's line as the user typed it: IPython compiles ``%%aot_kernel gpu ...`` (or ``%magic ...``) into
    ``get_ipython().run_cell_magic('aot_kernel', 'gpu ...', '<the whole body>')``, which is shown as the magic's
    line instead."""
    stripped = source.strip()
    for call, prefix in (("get_ipython().run_cell_magic(", "%%"), ("get_ipython().run_line_magic(", "%")):
        if stripped.startswith(call):
            try:
                args = ast.literal_eval(stripped[len(call) - 1:].rstrip())
                return f"{prefix}{args[0]} {args[1]}".rstrip()
            except (ValueError, SyntaxError, TypeError, IndexError):
                return source
    return source


def install_warning_format() -> None:
    """Make :func:`warnings.formatwarning` write aotbench's warnings from cells by :func:`cell_warning_text`,
    delegating everything else to the function it replaces (idempotent)."""
    previous = warnings.formatwarning
    if getattr(previous, "aotbench_cells", False):
        return

    def formatwarning(message, category, filename, lineno, line=None):
        return (cell_warning_text(message, category, filename, lineno, line)
                or previous(message, category, filename, lineno, line))

    formatwarning.aotbench_cells = True
    warnings.formatwarning = formatwarning


def _under_ipython() -> bool:
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


if _under_ipython():  # imported in a notebook or IPython (``import aotbench``); %load_ext aotbench installs it too
    install_warning_format()
