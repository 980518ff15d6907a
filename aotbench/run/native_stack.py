"""Where a crashed kernel was: the native stack an isolated worker writes as it dies, as readable frames.

The native host's crash report (``aotb_install_crash_report`` in ``native/src/runtime.cc``) writes, on a fatal signal,
the faulting instruction and the ``backtrace()`` frames as module-relative addresses. Here they become the
frames that matter to the kernel's author: from the faulting instruction outwards to the call from aotbench's
host (the host, libffi and Python frames beyond it are aotbench's machinery, not the kernel's), named with
``addr2line`` (function, and file:line when the library has debug information: ``flags=["-g"]``), else with the
dynamic symbol the loader knows.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

_START = re.compile(r"^aotbench-native-stack (\d+)$")
_PC = re.compile(r"^aotbench-pc (0x[0-9a-f]+) (.*)$")
_FRAME = re.compile(r"^aotbench-frame (0x[0-9a-f]+) (\S+) (.*)$")
_END = "aotbench-native-stack-end"
MAX_FRAMES = 12
REPORT_FRAMES = 64  # what the crash report holds at most (native/src/runtime.cc)
_MACHINERY = re.compile(r"(^|/)(libpython[\d.]*\.so|libffi\.so|_ctypes\.|python3?(\.\d+)?$)")


@dataclass(frozen=True)
class Frame:
    """One native frame: its module (shared object path), the module-relative address and the dynamic symbol
    the loader found for it ("" when none); ``exact`` for the faulting instruction (not a return address)."""

    module: str
    offset: int
    symbol: str = ""
    exact: bool = False


@dataclass(frozen=True)
class Report:
    """A parsed crash report: the frames that are the kernel's (innermost first), the lines of the worker's
    output that are not the report (what the kernel printed), and whether a report was found at all."""

    frames: list[Frame]
    output: str
    found: bool
    ending: str = "host"  # how the kernel's part of the stack ended (see _kernel_part)


def parse(text: str, host_library: str = "") -> Report:
    """Split the worker's output into the crash report's kernel frames and everything else."""
    output, frames, pc = [], [], None
    inside = found = False
    for line in text.splitlines():
        if _START.match(line):
            inside = found = True
            continue
        if inside:
            if line == _END:
                inside = False
            elif m := _PC.match(line):
                pc = Frame(m[2], int(m[1], 16), exact=True)
            elif m := _FRAME.match(line):
                frames.append(Frame(m[3], int(m[1], 16), "" if m[2] == "-" else m[2]))
            continue
        output.append(line)
    kernel, ending = _kernel_part(frames, pc, host_library)
    return Report(kernel, "\n".join(output).strip("\n"), found, ending)


def _kernel_part(frames: list[Frame], pc: Frame | None, host_library: str) -> tuple[list[Frame], str]:
    """The frames from the faulting instruction up to (not including) the first one in aotbench's host, and how
    the stack ended: "host" (reached it), "deeper" (the report's frames ran out: a stack overflow), or "ends"
    (the stack stops first: a thread the kernel started, or a stack the kernel overwrote)."""
    start = next((i for i, f in enumerate(frames) if pc and (f.module, f.offset) == (pc.module, pc.offset)), None)
    if start is not None:
        chosen = [pc, *frames[start + 1:]]
    else:  # the pc not among the frames (backtrace stopped early, or no pc): skip the handler and trampoline
        after = next((i + 1 for i, f in enumerate(frames) if f.symbol == "__restore_rt"), min(2, len(frames)))
        chosen = ([pc] if pc else []) + frames[after:]
    host = os.path.realpath(host_library) if host_library else None
    out = []
    for f in chosen:
        if (host and os.path.realpath(f.module) == host) or _MACHINERY.search(f.module):
            return out, "host"
        out.append(f)
    return out, "deeper" if len(frames) >= REPORT_FRAMES else "ends"


def describe(frames: list[Frame], sources: dict[str, str] | None = None, ending: str = "host",
             aliases: dict[str, str] | None = None) -> list[str]:
    """One line per frame ("Kernel at kernel.cc:12", "memcpy in libc.so.6 (+0x..)"), the first source line
    shown, repeated frames counted on one line, at most MAX_FRAMES lines of frames. ``aliases`` renames files
    (a cell's file to "<cell>": its lines are the cell's, after ``#line 1 "<cell>"``, though addr2line names
    the file itself for DWARF 5 debug information)."""
    names = _addr2line(frames)
    if aliases:
        names = {key: (function, _alias(where, aliases)) for key, (function, where) in names.items()}
    lines, shown, repeats = [], False, 0
    previous = None
    for f in frames:
        function, where = names.get((f.module, f.offset), ("", ""))
        function = function or f.symbol or f"0x{f.offset:x}"
        lib = os.path.basename(f.module)
        line_text = f"  {function} at {where}" if where else f"  {function} in {lib} (+0x{f.offset:x})"
        if line_text == previous:  # deep recursion: one line, counted
            repeats += 1
            continue
        if repeats:
            lines.append(f"    ... the same frame {repeats} more time{'s' * (repeats != 1)}")
            repeats = 0
        if sum(not line.startswith("    ") for line in lines) == MAX_FRAMES:
            lines.append("  ... (outer frames left out)")
            ending = "host"
            break
        lines.append(line_text)
        previous = line_text
        file, _, line = where.rpartition(":")
        text = _source_line(file, int(line), sources or {}) if line.isdigit() and not shown else ""
        if text:
            lines.append(f"    {int(line):>4} | {text.strip()}")
            shown = True
    if repeats:
        lines.append(f"    ... the same frame {repeats} more time{'s' * (repeats != 1)}")
    if ending == "deeper" and frames:
        lines.append(f"  ... and deeper: the report holds the innermost {len(frames)} frames (a stack overflow?)")
    elif ending == "ends" and frames:
        lines.append("  (the stack ends here, not in aotbench's call: a thread the kernel started, or a stack it "
                     "overwrote)")
    return lines


def _addr2line(frames: list[Frame]) -> dict[tuple[str, int], tuple[str, str]]:
    """(function, "file:line" or "") for each frame, from ``addr2line`` per module (nothing if it is missing)."""
    tool = shutil.which("addr2line")
    out: dict[tuple[str, int], tuple[str, str]] = {}
    if tool is None:
        return out
    by_module: dict[str, list[Frame]] = {}
    for f in frames:
        by_module.setdefault(f.module, []).append(f)
    for module, group in by_module.items():
        # a return address points after its call: the line of the call is one byte before it
        addresses = [f"0x{f.offset if f.exact else max(f.offset - 1, 0):x}" for f in group]
        try:
            proc = subprocess.run([tool, "-C", "-f", "-e", module, *addresses], capture_output=True, text=True,
                                  timeout=20, check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            continue
        answer = proc.stdout.splitlines()
        if proc.returncode != 0 or len(answer) != 2 * len(group):
            continue
        for k, f in enumerate(group):
            function, where = answer[2 * k], answer[2 * k + 1].split(" (discriminator")[0]
            function = "" if function == "??" else function
            where = "" if where.startswith("??") or where.endswith((":0", ":?")) else where
            out[(f.module, f.offset)] = (function, _short(where))
    return out


def _alias(where: str, aliases: dict[str, str]) -> str:
    file, _, line = where.rpartition(":")
    return f"{aliases[file]}:{line}" if file in aliases else where


def _short(where: str) -> str:
    """A file:line with the file's directory dropped (the kernel's author knows where the file is)."""
    file, _, line = where.rpartition(":")
    return f"{os.path.basename(file)}:{line}" if file else where


def _source_line(file: str, line: int, sources: dict[str, str]) -> str:
    """Line ``line`` of a cell's source (by its label) or of a file next to nothing (found by basename only in
    ``sources``); "" when unknown."""
    text = sources.get(file)
    if text is None:
        return ""
    rows = text.splitlines()
    return rows[line - 1] if 0 < line <= len(rows) else ""
