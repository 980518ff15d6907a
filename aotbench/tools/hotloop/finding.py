"""Loops in a kernel's host disassembly, and the one the samples say is hottest (:func:`find_hot_loop`).

A loop is a backward branch (a ``jcc`` or ``jmp`` to a lower address in the same function) that closes a cycle
within its range: control can go from its target to it again without leaving the addresses between them. That
rules out the jumps GCC makes backward into code that does not lead back to them, such as a vectorized loop's
preheader jumping back to the scalar loop, or into a remainder's straight-line code (a loop around both would
connect them otherwise). The loop's instructions are the addresses from its target to its branch.
"""

from __future__ import annotations

import os

import bisect
import numbers
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ...errors import ArgumentTypeError, ArgumentValueError
from ..codeview.listing import Function

INSTRUCTION = re.compile(r"^(?P<addr>[0-9a-f]+)\s+(?P<text>.*)$")
# A direct branch as objdump writes it: "jne 1340 <gather+0x10>", "bnd jmp 11db <f+0xdb>", "loop 1200 <f+0x3>".
_PREFIXES = r"(?:(?:bnd|notrack|ds|cs|rex\.?\w*|data16|repz|repnz|rep)\s+)*"
_DIRECT = re.compile(rf"^{_PREFIXES}(?P<op>j[a-z]+|loop[a-z]*|call|xbegin)\s+(?P<target>[0-9a-f]+)(?:\s+<[^>]*>)?$")
_BRANCH_MNEMONIC = re.compile(r"^(?:j[a-z]+|loop[a-z]*)$")
_ENDS_FLOW = re.compile(rf"^{_PREFIXES}(?:ret[a-z]*|ud2|ud1|hlt)\b")
_INDIRECT_JMP = re.compile(rf"^{_PREFIXES}jmp\s+(?![0-9a-f]+(?:\s|$))")


@dataclass(frozen=True)
class Loop:
    """One loop of the kernel's host code.

    ``function`` is the demangled name of the function it is in; ``start`` the address its backward branch
    jumps to, ``end`` the address of that branch (its last instruction), ``branch`` the same address (the one
    a breakpoint counts iterations on); ``instructions`` the ``"addr  text"`` strings from ``start`` to ``end``
    as the disassembly shows them; ``lines`` the ``(file, line)`` source locations they came from;
    ``samples`` the samples on its instructions and ``share`` that count over all the samples given.
    Addresses are objdump's: offsets into the library for a shared object.
    """

    function: str
    start: int
    end: int
    branch: int
    instructions: tuple[str, ...]
    lines: tuple[tuple[str | None, int], ...] = ()
    samples: int = 0
    share: float = 0.0

    @property
    def size(self) -> int:
        """How many instructions the loop has."""
        return len(self.instructions)

    def contains(self, other: Loop) -> bool:
        """Whether ``other`` lies inside this loop's address range (and is not this loop)."""
        return (self.function == other.function and self.start <= other.start and other.end <= self.end
                and (self.start, self.end) != (other.start, other.end))

    @property
    def where(self) -> str:
        """``"Loops 0x1170-0x1187"``: the function and the address range."""
        return f"{self.function} {self.start:#x}-{self.end:#x}"

    def line_text(self) -> str:
        """The loop's source lines in a few words: ``"line 20"``, ``"lines 20-21"``, ``"lines 7, 20"``; the file
        most of them come from (the kernel's) is given by number, the others (inlined headers) by name."""
        files = [file for file, _ in self.lines]
        if not files:
            return "no line information"
        main = max(dict.fromkeys(files), key=files.count)
        numbers = sorted({line for file, line in self.lines if file == main})
        others = sorted({os.path.basename(file or "?") for file, _ in self.lines if file != main})
        if len(numbers) == 1:
            text = f"line {numbers[0]}"
        elif numbers == list(range(numbers[0], numbers[-1] + 1)):
            text = f"lines {numbers[0]}-{numbers[-1]}"
        else:
            text = "lines " + ", ".join(map(str, numbers))
        return text + (f" (and code inlined from {', '.join(others)})" if others else "")


@dataclass(frozen=True)
class _Insn:
    addr: int
    text: str
    raw: str
    file: str | None
    line: int | None


def _instructions(function: Function) -> list[_Insn]:
    """A function's instructions in address order, each with its source location."""
    out = []
    for block in function.blocks:
        for raw in block.instructions:
            m = INSTRUCTION.match(raw.strip())
            if m:
                out.append(_Insn(int(m["addr"], 16), m["text"].strip(), raw, block.file, block.line))
    out.sort(key=lambda i: i.addr)
    return out


def direct_target(text: str) -> tuple[str, int] | None:
    """``(mnemonic, target)`` of a direct branch or call, else None."""
    m = _DIRECT.match(text)
    return (m["op"], int(m["target"], 16)) if m else None


def _successors(code: list[_Insn], index: dict[int, int], i: int) -> list[int] | None:
    """Indices control may go to after instruction ``i``; None for an indirect jump (anywhere)."""
    text = code[i].text
    if _INDIRECT_JMP.match(text):
        return None
    if _ENDS_FLOW.match(text):
        return []
    nxt = [i + 1] if i + 1 < len(code) else []
    direct = direct_target(text)
    if direct is None or direct[0] in ("call", "xbegin"):
        return nxt
    op, target = direct
    out = [index[target]] if target in index else []
    return out if op == "jmp" else out + nxt


def _reaches(code: list[_Insn], index: dict[int, int], start: int, goal: int) -> bool:
    """Whether control can go from instruction ``start`` to instruction ``goal`` without leaving the
    instructions between them (a loop around both would connect them otherwise)."""
    seen, todo = {start}, [start]
    while todo:
        i = todo.pop()
        if i == goal:
            return True
        nxt = _successors(code, index, i)
        if nxt is None:  # a jump table: assume it may go anywhere
            return True
        for j in nxt:
            if start <= j <= goal and j not in seen:
                seen.add(j)
                todo.append(j)
    return False


def loops(functions: Iterable[Function]) -> list[Loop]:
    """Every loop of these functions (without samples): for each backward-branch target, the loop from it to
    the last backward branch that jumps to it and closes a cycle, in address order."""
    found: list[Loop] = []
    for function in functions:
        if not isinstance(function, Function):
            raise ArgumentTypeError(f"functions must be codeview Function objects (op.disassemble().functions), "
                                    f"not {type(function).__name__}")
        code = _instructions(function)
        index = {insn.addr: n for n, insn in enumerate(code)}
        latest: dict[int, int] = {}  # target index -> index of the last branch closing a cycle through it
        for n, insn in enumerate(code):
            direct = direct_target(insn.text)
            if direct is None or not _BRANCH_MNEMONIC.match(direct[0]):
                continue
            target = index.get(direct[1])
            if target is None or target > n or not _reaches(code, index, target, n):
                continue
            latest[target] = max(latest.get(target, n), n)
        for first, last in sorted(latest.items()):
            body = code[first:last + 1]
            lines = tuple(dict.fromkeys((i.file, i.line) for i in body if i.line is not None))
            found.append(Loop(function.name, body[0].addr, body[-1].addr, body[-1].addr,
                              tuple(i.raw.strip() for i in body), lines))
    return found


def find_hot_loop(functions: Iterable[Function], samples: Mapping[int, int], *,
                  total: int | None = None) -> Loop | None:
    """The innermost loop that holds the most samples, or None when no loop holds any.

    ``functions``: the host disassembly's functions (``op.disassemble().functions``); ``samples``: sample
    counts by instruction address, in objdump's addresses (a sample between two addresses counts for the
    loop whose range it is in). ``total``: what the loop's ``share`` is a fraction of (default: every sample
    in ``samples``; pass the call's whole count when ``samples`` holds only the library's).

    Innermost: no other loop lies inside its address range. Ties (the same count) go to the loop with fewer
    instructions, then to the lower address.
    """
    counts = _checked_samples(samples)
    everything = sum(counts.values())
    if total is not None:
        if not _is_int(total) or total < everything:
            raise ArgumentValueError(f"total={total!r}: give the number of samples the share is a fraction of, "
                                     f"at least the {everything} in samples")
        everything = int(total)
    found = loops(functions)
    innermost = [lp for lp in found if not any(lp.contains(other) for other in found)]
    ordered = sorted(counts.items())
    addresses = [a for a, _ in ordered]
    best, best_key = None, None
    for lp in innermost:
        held = _samples_between(ordered, addresses, lp.start, lp.end)
        key = (held, -lp.size, -lp.start)
        if held > 0 and (best_key is None or key > best_key):
            best, best_key = lp, key
    if best is None:
        return None
    held = best_key[0]
    share = held / everything if everything else 0.0
    return Loop(best.function, best.start, best.end, best.branch, best.instructions, best.lines, held, share)


def _checked_samples(samples: Mapping[int, int]) -> dict[int, int]:
    """The counts as plain ints by address (numpy integers welcome); a malformed entry is named."""
    if not isinstance(samples, Mapping):
        raise ArgumentTypeError(f"samples must be a dict {{instruction address: count}}, not "
                                f"{type(samples).__name__}")
    out: dict[int, int] = {}
    for address, count in samples.items():
        if not _is_int(address) or address < 0:
            raise ArgumentValueError(f"samples: the key {address!r} is not an instruction address (an int >= 0)")
        if not _is_int(count) or count < 0:
            raise ArgumentValueError(f"samples[{int(address):#x}] = {count!r}: a sample count is an int >= 0")
        out[int(address)] = out.get(int(address), 0) + int(count)
    return out


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _samples_between(ordered: list[tuple[int, int]], addresses: list[int], low: int, high: int) -> int:
    lo, hi = bisect.bisect_left(addresses, low), bisect.bisect_right(addresses, high)
    return sum(count for _, count in ordered[lo:hi])
