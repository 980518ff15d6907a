"""CUDA device code of a kernel library: SASS (machine code) and PTX, per kernel and per architecture.

The library is the op's inspection build (its command plus ``-lineinfo``, which adds the line table and does
not change the code). SASS comes from ``nvdisasm -g`` on each cubin ``cuobjdump -xelf all`` extracts, so every
instruction sits under its source line; a kernel nvdisasm did not give (two cubins of one name overwrite each
other when extracted) is taken from ``cuobjdump -sass``, without lines. PTX comes from ``cuobjdump -ptx``,
whose ``.loc`` directives give the lines. No GPU is needed for any of it.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ...build import nvcc
from . import binaries as tools
from .listing import Block, Function

_TARGET = re.compile(r"^\s*\.target\s+(sm_\w+)")
_ARCH = re.compile(r"^arch = (sm_\w+)")
_SECTION = re.compile(r"^\.text\.(?P<name>\S+):$")
_SASS_LOCATION = re.compile(r'^\s*//## File "(?P<file>[^"]+)", line (?P<line>\d+)')
_SASS_INSTRUCTION = re.compile(r"^\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<text>[^/]*?;)")
_SASS_LABEL = re.compile(r"^(\.L_\w+):")
_CUOBJDUMP_FUNCTION = re.compile(r"^\s*Function : (\S+)")
_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_PTX_FUNCTION = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")


def sass(library: Path) -> list[Function]:
    """Every kernel's SASS, per architecture, with source lines where nvdisasm gives them."""
    with tempfile.TemporaryDirectory(prefix="aotbench-sass-") as scratch:
        tools.run([tools.find("cuobjdump"), "-xelf", "all", str(library)], cwd=Path(scratch))
        nvdisasm = tools.find("nvdisasm")
        functions = []
        for cubin in sorted(Path(scratch).glob("*.cubin")):
            functions += parse_nvdisasm(tools.run([nvdisasm, "-g", "-c", str(cubin)]))
    have = {(f.name, f.arch) for f in functions}
    functions += [f for f in parse_cuobjdump_sass(tools.run([tools.find("cuobjdump"), "-sass", str(library)]))
                  if (f.name, f.arch) not in have]
    return _demangled(functions)


def ptx(library: Path) -> list[Function]:
    """Every kernel's PTX, per virtual architecture, with source lines from ``.loc``."""
    return _demangled(parse_ptx(tools.run([tools.find("cuobjdump"), "-ptx", str(library)])))


def parse_nvdisasm(text: str) -> list[Function]:
    """nvdisasm's listing of one cubin: a function per ``.text.<name>`` section, trailing NOP padding dropped."""
    arch, functions, block = "sm_?", [], None
    for raw in text.splitlines():
        if (m := _TARGET.match(raw)) and not functions:
            arch = m[1]
        elif m := _SECTION.match(raw):
            functions.append(Function(m["name"], arch))
            block = None
        elif not functions:
            continue
        elif m := _SASS_LOCATION.match(raw):
            block = Block(m["file"], int(m["line"]))
            functions[-1].blocks.append(block)
        elif (m := _SASS_INSTRUCTION.match(raw)) or (m := _SASS_LABEL.match(raw)):
            if block is None:
                block = Block(None, None)
                functions[-1].blocks.append(block)
            text_ = f"{m['addr']}  {' '.join(m['text'].split())}" if "addr" in m.groupdict() else m[1] + ":"
            block.instructions.append(text_)
    for f in functions:
        _drop_padding(f)
    return [f for f in functions if f.instruction_count]


def parse_cuobjdump_sass(text: str) -> list[Function]:
    """``cuobjdump -sass``: a function per ``Function :`` line, under the latest ``arch =``; no source lines."""
    arch, functions = "sm_?", []
    for raw in text.splitlines():
        if m := _ARCH.match(raw):
            arch = m[1]
        elif m := _CUOBJDUMP_FUNCTION.match(raw):
            functions.append(Function(m[1], arch, [Block(None, None)]))
        elif functions and (m := _SASS_INSTRUCTION.match(raw)):
            functions[-1].blocks[0].instructions.append(f"{m['addr']}  {' '.join(m['text'].split())}")
    for f in functions:
        _drop_padding(f)
    return [f for f in functions if f.instruction_count]


def parse_ptx(text: str) -> list[Function]:
    """``cuobjdump -ptx``: a function per ``.entry``/``.func`` body, its instructions under their ``.loc``."""
    files = {m[1]: m[2] for m in map(_PTX_FILE.match, text.splitlines()) if m}
    arch, functions, block, depth = "compute_?", [], None, 0
    for raw in text.splitlines():
        line = raw.strip()
        if m := _ARCH.match(raw):
            arch = m[1].replace("sm_", "compute_")
        elif depth == 0 and (m := _PTX_FUNCTION.match(raw)):
            functions.append(Function(m[1], arch))
            block = None
        elif functions and depth == 0 and line == "{":
            depth = 1
        elif functions and depth:
            depth += line.count("{") - line.count("}")
            if depth <= 0:
                depth = 0
            elif m := _PTX_LOC.match(raw):
                block = Block(files.get(m[1]), int(m[2]))
                functions[-1].blocks.append(block)
            elif line and not line.startswith("//"):
                if block is None:
                    block = Block(None, None)
                    functions[-1].blocks.append(block)
                block.instructions.append(line)
    return [f for f in functions if f.instruction_count]


def _drop_padding(function: Function) -> None:
    """Remove the NOPs and labels (and the empty blocks) after a function's last real instruction."""
    for block in reversed(function.blocks):
        while block.instructions and (block.instructions[-1].split("  ", 1)[-1].startswith("NOP")
                                      or block.instructions[-1].endswith(":")):
            block.instructions.pop()
        if block.instructions:
            break
    function.blocks = [b for b in function.blocks if b.instructions]


def _demangled(functions: list[Function]) -> list[Function]:
    for f, name in zip(functions, nvcc.demangle([f.name for f in functions])):
        f.name = name
    return functions
