"""llvm-mca's prediction for a loop (:func:`predict`): the loop's objdump lines made into assembly llvm-mca reads
(:func:`to_llvm_asm`), llvm-mca run with ``-mcpu=native`` and its report read back as a :class:`Prediction`.

llvm-mca treats the instructions as one straight block repeated, so a loop with a branch inside it is predicted
as if every instruction ran every iteration, and a call's callee is not modelled (llvm-mca says so in ``notes``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from ...errors import AotbenchError, ArgumentTypeError, ArgumentValueError
from .finding import INSTRUCTION, Loop, direct_target

#: How many times llvm-mca repeats the loop's instructions (the cycles per iteration are its total / this).
ITERATIONS = 100
#: How long one llvm-mca run may take; a loop is small, so this only stops a hung tool.
TIMEOUT_S = 60
#: The one-line fix when no llvm-mca is found.
INSTALL_HINT = "install LLVM's llvm-mca (Debian/Ubuntu: apt-get install llvm)"


@dataclass(frozen=True)
class Prediction:
    """What llvm-mca predicts for one loop on this machine's CPU model.

    ``cycles_per_iteration``: llvm-mca's Total Cycles / Iterations for ``iterations`` repetitions of the loop's
    instructions; ``block_rthroughput``: its Block RThroughput (the cycles per iteration the busiest resource or
    the dispatch width alone allow); ``bottleneck``: what limits the loop, in words; ``pressure``: cycles per
    iteration on each resource (port) llvm-mca models; ``llvm_mca`` and ``version``: the tool and its LLVM
    version; ``cpu``: the CPU model it assumed (``-mcpu=native`` resolves to the host's);
    ``model``: the name LLVM's scheduling model gives its resources (``ICX``: Ice Lake server), when it has one;
    ``left_out``: instructions llvm-mca could not read, left out of the analysis; ``notes``: llvm-mca's
    warnings (a call in the loop, for instance); ``source``: the assembly given to llvm-mca; ``output``: its
    report. When llvm-mca is missing or fails, the numbers are None and ``reason`` says why in one line.
    """

    cycles_per_iteration: float | None = None
    block_rthroughput: float | None = None
    bottleneck: str = ""
    uops_per_iteration: float | None = None
    dispatch_width: int | None = None
    pressure: Mapping[str, float] = field(default_factory=dict)
    llvm_mca: str | None = None
    version: str | None = None
    cpu: str | None = None
    model: str | None = None
    iterations: int = ITERATIONS
    left_out: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    source: str = ""
    output: str = ""
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """Whether llvm-mca gave a prediction."""
        return self.cycles_per_iteration is not None

    @property
    def text(self) -> str:
        """One line: the prediction, or why there is none."""
        if not self.ok:
            return f"Predicted: none ({self.reason})"
        cpu = f"{self.cpu}, {self.model} model" if self.model else f"{self.cpu}"
        out = (f"Predicted by llvm-mca {self.version} for {cpu}: {self.cycles_per_iteration:.2f} cycles/iteration "
               f"(block throughput {self.block_rthroughput:.2f}); bottleneck: {self.bottleneck}")
        if self.left_out:
            out += f" [{len(self.left_out)} instruction(s) llvm-mca could not read left out]"
        if self.notes:
            out += f" [llvm-mca: {' '.join(self.notes)}]"
        return out

    def __str__(self) -> str:
        return self.text


def find_llvm_mca() -> str | None:
    """The path of ``llvm-mca`` on PATH, else of the newest ``llvm-mca-NN`` there, else None."""
    plain = shutil.which("llvm-mca")
    if plain:
        return plain
    versioned: list[tuple[int, str]] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            m = re.fullmatch(r"llvm-mca-(\d+)", name)
            path = os.path.join(folder or ".", name)
            if m and os.path.isfile(path) and os.access(path, os.X_OK):
                versioned.append((int(m[1]), path))
    return max(versioned)[1] if versioned else None


def predict(loop: Loop, *, mcpu: str = "native", iterations: int = ITERATIONS,
            llvm_mca: str | None = None) -> Prediction:
    """llvm-mca's prediction for ``loop`` on CPU ``mcpu`` (default: this machine's).

    Never raises for a tool problem: without llvm-mca, or when it fails on the loop, the :class:`Prediction`
    has no numbers and its ``reason`` says why and what to do. Instructions llvm-mca's assembler rejects are
    left out (named in ``left_out``) and the rest analysed, unless none is left. Answers are kept per loop
    (its instructions), CPU and tool, so asking again costs nothing.
    """
    if not isinstance(loop, Loop):
        raise ArgumentTypeError(f"predict takes a Loop (from find_hot_loop), not {type(loop).__name__}")
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise ArgumentValueError(f"iterations={iterations!r}: give a positive int (llvm-mca's -iterations)")
    if not isinstance(mcpu, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", mcpu):
        raise ArgumentValueError(f"mcpu={mcpu!r}: give a CPU name llvm-mca knows ('native', 'skylake', ...)")
    tool = llvm_mca or find_llvm_mca()
    if tool is None:
        return Prediction(reason=f"no llvm-mca on PATH: {INSTALL_HINT}")
    return _predict(tool, tuple(loop.instructions), mcpu, iterations)


@lru_cache(maxsize=128)
def _predict(tool: str, instructions: tuple[str, ...], mcpu: str, iterations: int) -> Prediction:
    try:
        version, host_cpu = _version(tool)
    except AotbenchError as exc:
        return Prediction(llvm_mca=tool, reason=str(exc))
    cpu = host_cpu if mcpu == "native" else mcpu
    lines = to_llvm_asm(instructions)
    header = _ATT_HEADER if any("%" in text for text, _ in lines) else _INTEL_HEADER
    left_out: list[str] = []
    argv = [tool, f"-mcpu={mcpu}", f"-iterations={iterations}", "-bottleneck-analysis", "-output-asm-variant=1",
            "-"]
    for _ in range(len(lines) + 1):  # each retry leaves out at least one line
        if not any(original is not None for _, original in lines):
            said = f" (the last: {left_out[-1]!r})" if left_out else ""
            return Prediction(llvm_mca=tool, version=version, cpu=cpu, left_out=tuple(left_out),
                              reason=f"llvm-mca could read none of the loop's instructions{said}")
        source = header + "\n".join(text for text, _ in lines) + "\n"
        try:
            proc = subprocess.run(argv, input=source, capture_output=True, text=True, errors="replace",
                                  timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Prediction(llvm_mca=tool, version=version, cpu=cpu, source=source,
                              reason=f"llvm-mca could not be run ({exc}); check {tool} runs, or {INSTALL_HINT}")
        # llvm-mca 14 skips the instructions its assembler rejects and analyses the rest (exit 0); where it
        # stops instead, the rejected ones are left out here and it runs again
        rejected = _rejected_lines(proc.stderr, len(header.splitlines()))
        bad = sorted({n for n in rejected if 0 <= n < len(lines) and lines[n][1] is not None})
        left_out += [lines[n][1] for n in bad]
        if proc.returncode == 0:
            break
        if not bad:
            said = " ".join(proc.stderr.strip().splitlines()[:2])[:300] or f"exit {proc.returncode}"
            return Prediction(llvm_mca=tool, version=version, cpu=cpu, source=source, left_out=tuple(left_out),
                              reason=f"llvm-mca failed on this loop: {said}")
        lines = [line for n, line in enumerate(lines) if n not in set(bad)]
    notes = tuple(dict.fromkeys(_notes(proc.stderr)))
    try:
        return _parse_report(proc.stdout, tool=tool, version=version, cpu=cpu, iterations=iterations,
                             left_out=tuple(left_out), notes=notes, source=source)
    except _ReportError as exc:
        return Prediction(llvm_mca=tool, version=version, cpu=cpu, source=source, output=proc.stdout,
                          reason=f"llvm-mca's report could not be read ({exc})")


_INTEL_HEADER = ".intel_syntax noprefix\n"
_ATT_HEADER = ".att_syntax\n"  # op.disassemble(syntax="att")


@lru_cache(maxsize=8)
def _version(tool: str) -> tuple[str, str]:
    """LLVM's version and the host CPU name from ``llvm-mca --version``."""
    try:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AotbenchError(f"{tool} could not be run ({exc}): {INSTALL_HINT}") from exc
    text = proc.stdout + proc.stderr
    version = re.search(r"LLVM version (\S+)", text)
    host = re.search(r"Host CPU:\s*(\S+)", text)
    if proc.returncode != 0 or version is None:
        raise AotbenchError(f"{tool} --version did not name an LLVM version: {INSTALL_HINT}")
    return version[1], host[1] if host else "native"


def _rejected_lines(stderr: str, header_lines: int) -> list[int]:
    """The indices (into the loop's lines) of the instructions llvm-mca's assembler rejected."""
    return [int(m[1]) - 1 - header_lines for m in re.finditer(r"^<stdin>:(\d+):\d+: error:", stderr, re.MULTILINE)]


def _notes(stderr: str) -> list[str]:
    out = []
    for m in re.finditer(r"(?:warning|note): (.+)", stderr):
        out.append(m[1].strip())
    return out


# objdump -> llvm-mca's Intel syntax
_COMMENT = re.compile(r"\s+#.*$")
_SYMBOL = re.compile(r"\s*<[^<>]*>$")
_BARE_PREFIX = re.compile(r"^(?:(?:bnd|notrack|ds|cs|es|ss|data16|addr32)\s+)+(?=\S)")
_SEGMENT_ABS = re.compile(r"\b([c-gs]s):(0x[0-9a-f]+|\d+)(?![\w\[])")
_BROADCAST = re.compile(r"\b(?P<size>BYTE|WORD|DWORD|QWORD) BCST (?P<mem>(?:[c-gs]s:)?\[[^\]]*\])")
_ELEMENT_BYTES = {"BYTE": 1, "WORD": 2, "DWORD": 4, "QWORD": 8}
_VECTOR_BYTES = {"zmm": 64, "ymm": 32, "xmm": 16}
_VECTOR_WORD = {64: "ZMMWORD", 32: "YMMWORD", 16: "XMMWORD"}
# A gather's or scatter's memory operand (a vector index register): objdump sizes it by the element, LLVM by
# the data register ("vgatherdps zmm0{k2},DWORD PTR [rsi+zmm1*4]" -> "ZMMWORD PTR").
_VSIB = re.compile(r"\b(?:BYTE|WORD|DWORD|QWORD) PTR (?=\[[^\]]*\b[xyz]mm\d+)")


def to_llvm_asm(instructions: Sequence[str]) -> list[tuple[str, str | None]]:
    """The loop's objdump lines (``"addr  text"``) as llvm-mca's Intel-syntax input: a list of
    ``(llvm text, objdump text)``, with a label line (objdump text None) before every instruction a branch of
    the loop jumps to. Targets outside the loop become labels defined after it (llvm-mca never follows a
    branch; it only needs the name), and so do a call's."""
    parsed = []
    for raw in instructions:
        m = INSTRUCTION.match(raw.strip())
        if m is None:
            raise ArgumentValueError(f"{raw!r} is not an 'address  instruction' line of the disassembly")
        parsed.append((int(m["addr"], 16), m["text"].strip()))
    inside = {addr for addr, _ in parsed}
    targets: set[int] = set()
    out: list[tuple[str, str | None]] = []
    converted = []
    for addr, text in parsed:
        direct = direct_target(text)
        if direct is not None:
            op, target = direct
            targets.add(target)
            converted.append((addr, f"{op} {_label(target)}", text))
        else:
            converted.append((addr, _operands(text), text))
    outside = sorted(targets - inside)
    for addr, llvm, text in converted:
        if addr in targets:
            out.append((f"{_label(addr)}:", None))
        out.append((llvm, text))
    out += [(f"{_label(t)}:", None) for t in outside]
    return out


def _label(address: int) -> str:
    return f".L{address:x}"


def _operands(text: str) -> str:
    """One non-branch instruction as LLVM's assembler reads it."""
    text = _COMMENT.sub("", text)
    text = _SYMBOL.sub("", text)
    text = _BARE_PREFIX.sub("", text)
    if "%" in text:  # AT&T syntax: LLVM reads objdump's forms as they are
        return text
    text = _SEGMENT_ABS.sub(r"\1:[\2]", text)
    if _VSIB.search(text):
        outside = re.sub(r"\[[^\]]*\]", "", text)
        width = max((_VECTOR_BYTES[r] for r in re.findall(r"\b(zmm|ymm|xmm)\d+", outside)), default=0)
        if width:
            text = _VSIB.sub(f"{_VECTOR_WORD[width]} PTR ", text)
    if "BCST" in text:
        width = max((_VECTOR_BYTES[r] for r in re.findall(r"\b(zmm|ymm|xmm)\d+", text)), default=64)
        text = _BROADCAST.sub(lambda m: f"{m['size']} PTR {m['mem']}"
                              f"{{1to{max(width // _ELEMENT_BYTES[m['size']], 1)}}}", text)
    return text


# llvm-mca's report


_ReportError = LookupError  # what the report's parsers raise for a line or value llvm-mca did not print


def _number(pattern: str, text: str) -> float:
    m = re.search(pattern, text, re.MULTILINE)
    if not m:
        raise _ReportError(f"no {pattern.split(':')[0].strip('^')!r} line")
    return float(m[1])


def _pressure(text: str) -> dict[str, float]:
    """Cycles per iteration on each resource, from the Resources list and the pressure-per-iteration table."""
    names: dict[str, str] = {}
    section = re.search(r"^Resources:\n(.*?)\n\n", text, re.MULTILINE | re.DOTALL)
    if section:
        for m in re.finditer(r"^\[([\d.]+)\]\s+-\s+(\S+)", section[1], re.MULTILINE):
            names[m[1]] = m[2]
    table = re.search(r"^Resource pressure per iteration:\n(.*)\n(.*)\n", text, re.MULTILINE)
    if not table or not names:
        return {}
    heads = re.findall(r"\[([\d.]+)\]", table[1])
    values = table[2].split()
    out: dict[str, float] = {}
    for head, value in zip(heads, values):
        name = names.get(head, head)
        if head.count(".") and names.get(head) is not None:  # a unit of a multi-unit resource: "[4.0] SBPort23"
            name = f"{name}.{head.split('.')[1]}"
        out[name] = 0.0 if value == "-" else float(value)
    return out


def _percent(label: str, text: str) -> float | None:
    m = re.search(rf"{label}\s*\[\s*([\d.]+)%\s*\]", text)
    return float(m[1]) if m else None


def _parse_report(text: str, *, tool: str, version: str, cpu: str, iterations: int, left_out: tuple[str, ...],
                  notes: tuple[str, ...], source: str) -> Prediction:
    iters = _number(r"^Iterations:\s+(\d+)", text)
    total = _number(r"^Total Cycles:\s+(\d+)", text)
    uops = _number(r"^Total uOps:\s+(\d+)", text)
    width = int(_number(r"^Dispatch Width:\s+(\d+)", text))
    block = _number(r"^Block RThroughput:\s+([\d.]+)", text)
    if iters <= 0:
        raise _ReportError("zero iterations")
    cycles = total / iters
    pressure = _pressure(text)
    model = _model_name(pressure)
    bottleneck = _bottleneck(cycles, uops / iters, width, pressure, text)
    return Prediction(cycles, block, bottleneck, uops / iters, width, MappingProxyType(pressure), tool, version,
                      cpu, model, iterations, left_out, notes, source, text)


# What each port of LLVM's Intel scheduling models does (Sandy Bridge to Ice Lake: SBPort*, HWPort*, BWPort*,
# SKLPort*, SKXPort*, ICXPort*); a few of the models name a port pair as one resource ("SBPort23").
_INTEL_PORT = re.compile(r"^(?P<model>[A-Z]+)Port(?P<port>\d+)(?:\.\d+)?$")
_INTEL_ROLES = {"0": "ALU/vector", "1": "ALU/vector", "5": "ALU/shuffle", "6": "ALU/branch", "2": "load",
                "3": "load", "23": "load", "4": "store data", "9": "store data", "49": "store data",
                "7": "store address", "8": "store address", "78": "store address"}
_OTHER_ROLES = (("FPDivider", "floating-point divider"), ("Divider", "divider"), ("AGU", "address generation"),
                ("ALU", "integer ALU"), ("FP", "floating-point/vector"), ("LSU", "load/store"),
                ("Load", "load"), ("Store", "store"), ("Branch", "branch"))


def _model_name(pressure: Mapping[str, float]) -> str | None:
    """The scheduling model's resource prefix (``ICX``, ``SKL``, ``Zn3``) when all the resources share one."""
    prefixes = set()
    for name in pressure:
        m = re.match(r"^([A-Z][A-Za-z]*?\d?)(?=Port|Divider|FPDivider|ALU|AGU|FP|LSU|Load|Store|Branch)", name)
        prefixes.add(m[1] if m else None)
    return prefixes.pop() if len(prefixes) == 1 and None not in prefixes else None


def describe_resources(names: Sequence[str]) -> str:
    """Resources in words: ``"load ports (2, 3)"``, ``"ALU ports (0, 1, 5, 6)"``, ``"ports 2 (load), 4 (store
    data)"``, or the resource names themselves (with their role where the name says it) for other models."""
    ports = [_INTEL_PORT.match(n) for n in names]
    if names and all(ports):
        numbers = list(dict.fromkeys(p["port"] for p in ports))
        roles = {n: _INTEL_ROLES.get(n, "") for n in numbers}
        kinds = list(dict.fromkeys(roles.values()))
        families = {k.split("/")[0].split(" ")[0] for k in kinds}
        noun = "ports" if len(numbers) > 1 else "port"
        if len(kinds) == 1 and kinds[0]:
            return f"{kinds[0]} {noun} ({', '.join(numbers)})"
        if len(families) == 1 and all(kinds):
            return f"{families.pop()} {noun} ({', '.join(numbers)})"
        groups = [", ".join(n for n in numbers if roles[n] == k) + (f" ({k})" if k else "") for k in kinds]
        return f"{noun} " + ", ".join(groups)
    out = []
    for name in names:
        role = next((words for key, words in _OTHER_ROLES if key in name), None)
        out.append(f"{name} ({role})" if role else name)
    return ", ".join(out)


def _bottleneck(cycles: float, uops: float, width: int, pressure: Mapping[str, float], report: str) -> str:
    """What limits the loop, in words, with the cycles per iteration it allows: a chain of dependent
    instructions carried from one iteration to the next (when the loop takes clearly longer than any resource
    needs), the dispatch width, or the most pressured resources (those within 1 % of the busiest)."""
    busiest = max(pressure.values(), default=0.0)
    group = [n for n, v in pressure.items() if busiest > 0 and v >= busiest * 0.99 - 1e-9]
    dispatch = uops / width if width else 0.0
    bound = max(busiest, dispatch)
    if cycles > 1.2 * bound and cycles - bound >= 0.5:
        register = _percent(r"- Register Dependencies", report) or 0.0
        memory = _percent(r"- Memory Dependencies", report) or 0.0
        kind = " through memory" if memory > register else " through registers" if register > 0 else ""
        limit = (f"the busiest resource, {describe_resources(group)}, allows {busiest:.2f}" if busiest >= dispatch
                 else f"the dispatch width allows {dispatch:.2f}")
        return f"a dependency carried from one iteration to the next{kind}: {cycles:.2f} cycles/iteration ({limit})"
    if dispatch > busiest * 1.03:
        return f"dispatch width ({width} uops/cycle, {uops:g} uops/iteration): {dispatch:.2f} cycles/iteration"
    if not group:
        return f"none found by llvm-mca: {cycles:.2f} cycles/iteration"
    return f"{describe_resources(group)}: {busiest:.2f} cycles/iteration"
