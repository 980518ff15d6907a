"""Host assembly of a kernel library: ``objdump -d -l -C --no-show-raw-insn`` parsed into functions.

The library is the op's inspection build (its command plus ``-g``: GCC's code does not change with debug info,
only the line table is added), so every instruction is grouped under the source line it came from. Only the
kernel's own functions are kept: those with code from the kernel's source or the user's own headers (main,
Init, InferShape, helpers and their ``.cold`` parts); the PLT, the C runtime's, the standard library's and the
static initialisers ``<iostream>`` brings are left out.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import binaries as tools
from .listing import Block, Function, SourceText

_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>.+)>:$")
_LOCATION = re.compile(r"^(?P<file>\S.*):(?P<line>\d+)(?: \(discriminator \d+\))?$")
_STATIC_INIT = ("_GLOBAL__sub_I_", "__static_initialization_and_destruction_0")  # <iostream>'s, not the kernel's
_INSTRUCTION = re.compile(r"^\s+(?P<addr>[0-9a-f]+):\t(?P<text>.*)$")
_FUNCTION_MARK = re.compile(r"^\S.*\(\):$")  # "row_sums():", the function a run of lines belongs to


def objdump_listing(library: Path, syntax: str = "intel") -> str:
    """objdump's disassembly of ``library`` with line numbers and demangled names."""
    argv = [tools.find("objdump"), "-d", "-l", "-C", "--no-show-raw-insn", "-w"]
    if syntax == "intel":
        argv += ["-M", "intel"]
    return tools.run([*argv, str(library)])


def parse(text: str, arch: str = "x86-64") -> list[Function]:
    """Every function of an objdump listing, its instructions under their source locations."""
    functions: list[Function] = []
    block: Block | None = None
    for raw in text.splitlines():
        if m := _FUNCTION.match(raw):
            functions.append(Function(m["name"], arch))
            block = None
        elif not functions or not raw.strip() or _FUNCTION_MARK.match(raw):
            continue
        elif m := _LOCATION.match(raw):
            if block is None or (block.file, block.line) != (m["file"], int(m["line"])):  # not a discriminator
                block = Block(m["file"], int(m["line"]))
                functions[-1].blocks.append(block)
        elif m := _INSTRUCTION.match(raw):
            if block is None:
                block = Block(None, None)
                functions[-1].blocks.append(block)
            block.instructions.append(f"{m['addr']}  {' '.join(m['text'].split())}")
    return functions


def kernel_functions(functions: list[Function], source: SourceText | None, main: str,
                     local_headers: frozenset[str] = frozenset()) -> list[Function]:
    """The functions with code from ``source`` or from the user's own headers it includes (without a source, a
    prebuilt library's: ``main``, its Init and InferShape and their ``.cold`` parts), static initialisers left
    out: ``main``, ``mainInit`` and ``mainInferShape`` first, each followed by its cold part, then the rest in
    address order."""
    first = {main: 0, f"{main}Init": 1, f"{main}InferShape": 2}
    if source is None:
        own = [f for f in functions if f.name.removesuffix(".cold") in first]
    else:
        own = [f for f in functions if not f.name.startswith(_STATIC_INIT) and any(
            source.owns(b.file) or (b.file is not None and os.path.normpath(b.file) in local_headers)
            for b in f.blocks)]
    return sorted(own, key=lambda f: (first.get(f.name.removesuffix(".cold"), 3), f.name.endswith(".cold")))
