"""How IPython shows an aotbench error: the user's own frames and the message, without aotbench's frames.

IPython renders an exception that has ``_render_traceback_`` with the lines it returns; the error classes are
data (:mod:`aotbench.errors`), and :func:`install` gives them that method when the notebook layer is loaded (as
``import aotbench`` does): :func:`user_traceback` for every aotbench error, the diagnostics with their source
lines for a ``CompileError``, one message for an interrupted isolated call. A learner's cell that calls
``op(x)`` then sees that line and the error's sentences, not half a dozen frames of aotbench's plan, guard and
host code. Left out: frames in this package, in IPython or ipykernel (the machinery that ran the cell), and
frames that set ``__tracebackhide__`` (IPython's convention). A cause that is not aotbench's (the user's
``out_shape`` function raising, say) is shown first, as Python does. A ``%%aot_kernel`` cell's frame is shown as
its magic line, not as the ``get_ipython().run_cell_magic(...)`` call IPython runs, which holds the whole cell
on one line.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import traceback
from types import TracebackType

from ..errors import AotbenchError, CompileError, IsolatedCallInterrupted
from .display import compile_error_text

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # all of aotbench
_HEADER = "Traceback (most recent call last; aotbench's own frames are left out):"
_CELL_MAGIC_CALL = "get_ipython().run_cell_magic("


def _machinery_dirs() -> tuple[str, ...]:
    """Directories whose frames are not the user's: this package and, when loaded, IPython and ipykernel."""
    dirs = [_PACKAGE]
    for name in ("IPython", "ipykernel"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return tuple(dirs)


def _cell_label(filename: str) -> str | None:
    """IPython's "Cell In[n]" for a cell's code, when IPython is running and knows the file."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if isinstance(names, dict) and filename in names:
        return f"Cell In[{names[filename]}]"
    return None


def user_frames(tb: TracebackType | None) -> list[str]:
    """The user's frames of a traceback, formatted two lines each (where, then the source line)."""
    skip = _machinery_dirs()
    out = []
    for frame, lineno in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if os.path.abspath(filename).startswith(skip) or frame.f_locals.get("__tracebackhide__"):
            continue
        label = _cell_label(filename)
        where = f"{label}, line {lineno}" if label else f'File "{filename}", line {lineno}, in {frame.f_code.co_name}'
        out.append(f"  {where}")
        text = linecache.getline(filename, lineno, frame.f_globals).strip()
        if label and text.startswith(_CELL_MAGIC_CALL):
            text = _magic_line(text) or "%%(a cell magic)"  # not the whole cell, folded onto one line
        if text:
            out.append(f"    {text}")
    return out


def _magic_line(call: str) -> str | None:
    """``%%aot_kernel cpu --isolate`` for the line IPython runs a magic cell as,
    ``get_ipython().run_cell_magic('aot_kernel', 'cpu --isolate', '<the whole cell>')``."""
    try:
        node = ast.parse(call, mode="eval").body
        name, line = (ast.literal_eval(a) for a in node.args[:2])  # type: ignore[attr-defined]
    except (SyntaxError, ValueError, AttributeError, TypeError):
        return None
    return f"%%{name} {line}".rstrip() if isinstance(name, str) and isinstance(line, str) else None


def _message(exc: BaseException) -> list[str]:
    text = str(exc)
    return [f"{type(exc).__name__}: {text}" if text else type(exc).__name__]


def user_traceback(exc: BaseException) -> list[str]:
    """The lines IPython shows for ``exc``: its cause (when not aotbench's own), the user's frames, the message."""
    lines: list[str] = []
    cause = exc.__cause__
    if cause is not None and not isinstance(cause, AotbenchError):
        frames = user_frames(cause.__traceback__)
        if frames:
            lines += [_HEADER, *frames, *_message(cause), "",
                      "The above exception was the direct cause of the following exception:", ""]
    frames = user_frames(exc.__traceback__)
    if frames:
        lines += [_HEADER, *frames]
    return lines + _message(exc)


def _compile_error_lines(err: CompileError) -> list[str]:
    """A ``CompileError``: each diagnostic with its source line, not a Python traceback (one line when the
    magic has already shown it as HTML)."""
    if err.html_shown:
        return [f"CompileError: {len(err.errors)} error(s), shown above (the compiler output is in .log)"]
    return compile_error_text(err).splitlines()


def _interrupted_lines(exc: IsolatedCallInterrupted) -> list[str]:
    """An interrupted isolated call: the user's frames and one message, no aotbench or multiprocessing frame."""
    lines = user_traceback(exc)
    return [*lines[:-1], f"KeyboardInterrupt ({type(exc).__name__}): {exc}"]


#: The ``_render_traceback_`` each class gets (a subclass inherits its nearest base's).
RENDERERS = {AotbenchError: user_traceback, CompileError: _compile_error_lines,
             IsolatedCallInterrupted: _interrupted_lines}


def install() -> None:
    """Give the error classes the ``_render_traceback_`` method IPython looks for (idempotent)."""
    for cls, render in RENDERERS.items():
        cls._render_traceback_ = render
