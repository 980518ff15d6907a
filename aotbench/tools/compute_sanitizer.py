"""One call of a gpu op under NVIDIA's compute-sanitizer, in a subprocess.

``op.compute_sanitizer(*inputs, tool="memcheck")`` rebuilds the op with ``-lineinfo`` (so findings name source
lines), writes the recipe and the inputs (copied to the host) to a scratch directory, and runs
``compute-sanitizer --tool TOOL python -m aotbench.cli.gpu_call DIR``. The child makes the op, copies the inputs to
the device and calls it once. An illegal address there kills only the child's CUDA context, never this
process's. The tool's report is parsed into :class:`Finding`\\ s (what, kernel, source line, thread and block).
"""

from __future__ import annotations

import html
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..build import nvcc
from ..run.gpu_availability import require_gpu
from ..spec.pickling import portable_spec
from ..errors import ArgumentTypeError, ArgumentValueError, DeviceUnavailableError, KernelTimeoutError, ToolchainNotFoundError

if TYPE_CHECKING:
    from ..op.op import Op

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: What compute-sanitizer says when it cannot run at all (rather than finding something).
TOOL_FAILURES = ("Device not supported", "Internal Sanitizer Error", "terminated before first instrumented",
                 "Failed to initialize", "Unable to find injection library")
SANITIZER_HINT = ("compute-sanitizer comes with the CUDA toolkit (<cuda>/bin or <cuda>/compute-sanitizer); put it "
                  "on PATH or set CUDA_HOME")
_PREFIX = re.compile(r"^========= ?(.*)$")
_WHERE = re.compile(r"(?:at (?P<kernel>.+?)\+0x[0-9a-fA-F]+ in (?P<file>.+?):(?P<line>\d+)(?:\s|$))"
                    r"|(?:at 0x[0-9a-fA-F]+ in (?P<file2>.+?):(?P<line2>\d+):(?P<kernel2>.+))")
_THREAD = re.compile(r"by thread \((?P<thread>[^)]*)\) in block \((?P<block>[^)]*)\)")
CUDA_ROOT = Path("/usr/local/cuda")  # the toolkit's usual home, searched last
_SUMMARY = re.compile(r"^(ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY)")
_API_ERROR = re.compile(r'^Program hit (?P<error>\w+)(?: \(error \d+\))?(?: due to "(?P<description>[^"]*)")?'
                        r"(?: on CUDA API call to (?P<call>[\w:]+))?")


@dataclass
class Finding:
    """One error compute-sanitizer reported: what, where (kernel, file, line), which thread and block."""

    what: str
    kernel: str = ""
    file: str = ""
    line: int | None = None
    thread: str = ""
    block: str = ""
    details: list[str] = field(default_factory=list)  # the other lines of the report's entry (addresses ...)

    def __str__(self) -> str:
        where = f" in {self.kernel}" if self.kernel else ""
        if self.file:
            where += f" at {Path(self.file).name}:{self.line}"
        who = f" (thread ({self.thread}) of block ({self.block}))" if self.thread else ""
        detail = f"; {self.details[0]}" if self.details else ""
        return f"{self.what}{where}{who}{detail}"


@dataclass
class ApiError:
    """A CUDA API call that returned an error while the tool watched ("Program hit ... on CUDA API call to ...").
    Kept apart from :class:`Finding`: it is not a memory access, and after a memory fault it is mostly the
    fault's echo (the synchronization that saw it)."""

    error: str  # cudaErrorIllegalAddress
    description: str = ""
    call: str = ""  # the API call that returned it

    def __str__(self) -> str:
        said = f' ("{self.description}")' if self.description else ""
        return f"{self.error}{said} from {self.call or 'a CUDA API call'}"


class ParsedReport(NamedTuple):
    """compute-sanitizer's output, read: memory (or race, init, sync) findings, API errors, the summary line."""

    findings: list[Finding]
    api_errors: list[ApiError]
    summary: str


@dataclass
class SanitizerReport:
    """What one call under compute-sanitizer found: ``ok``, ``findings``, the tool's summary line and output."""

    tool: str
    findings: list[Finding]
    summary: str
    output: str
    child_error: str = ""  # what the call itself raised in the child (e.g. the CudaError of an illegal access)
    api_errors: list[ApiError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No finding and no error raised by the call. API errors alone do not count: they are listed apart."""
        return not self.findings and not self.child_error

    def __str__(self) -> str:
        head = f"compute-sanitizer {self.tool}: " + ("no errors" if self.ok else f"{len(self.findings)} finding(s)")
        if self.api_errors:
            head += f"; {len(self.api_errors)} CUDA API error(s), listed apart"
        lines = [head] + [f"  - {f}" for f in self.findings]
        lines += [f"  ~ API: {e}" for e in self.api_errors]
        if self.child_error:
            lines.append(f"  ! the call raised: {self.child_error}")
        if self.summary:
            lines.append(f"  ({self.summary})")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = "#1b7f3b" if self.ok else "#b00020"
        items = "".join(f"<li>{html.escape(str(f))}</li>" for f in self.findings)
        items += "".join(f"<li><i>CUDA API error:</i> {html.escape(str(e))}</li>" for e in self.api_errors)
        if self.child_error:
            items += f"<li><i>the call raised:</i> {html.escape(self.child_error)}</li>"
        head = html.escape(str(self).splitlines()[0])
        return f"<div style='border-left:4px solid {color};padding-left:0.6em'><b>{head}</b><ul>{items}</ul></div>"


def find_compute_sanitizer() -> str:
    """compute-sanitizer on PATH, beside nvcc, or in the CUDA toolkit's compute-sanitizer directory."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    try:
        roots.append(Path(nvcc.find_nvcc()).resolve().parent.parent)
    except ToolchainNotFoundError:
        pass
    roots.append(CUDA_ROOT)
    for root in roots:
        for candidate in (root / "bin" / "compute-sanitizer", root / "compute-sanitizer" / "compute-sanitizer"):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise ToolchainNotFoundError("compute-sanitizer", SANITIZER_HINT)


def parse_report(text: str) -> ParsedReport:
    """compute-sanitizer's output (lines starting ``=========``) read into findings, API errors and the summary
    line."""
    findings: list[Finding] = []
    api_errors: list[ApiError] = []
    summary = ""
    current: Finding | None = None
    for raw in text.splitlines():
        m = _PREFIX.match(raw)
        if not m:
            continue
        body = m[1]
        if not body.strip():
            current = None
            continue
        if not body.startswith(" "):  # an entry's first line
            if _SUMMARY.match(body):
                summary = body.strip()
                current = None
            elif body.startswith(("COMPUTE-SANITIZER", "Saved host backtrace", "Target application returned")):
                current = None
            elif a := _API_ERROR.match(body):
                api_errors.append(ApiError(a["error"], a["description"] or "", a["call"] or ""))
                current = None
            else:
                current = Finding(body.strip().removeprefix("Error: "))
                findings.append(current)
                _locate(current, body)
            continue
        line = body.strip()
        if current is None or line.startswith(("Host Frame", "Saved host backtrace")):
            continue
        if not current.file and _WHERE.search(line):
            _locate(current, line)
        elif t := _THREAD.search(line):
            current.thread, current.block = t["thread"], t["block"]
        else:
            current.details.append(line)
    return ParsedReport(findings, api_errors, summary)


def _locate(finding: Finding, line: str) -> None:
    w = _WHERE.search(line)
    if not w:
        return
    finding.kernel = nvcc.short_kernel_name(w["kernel"] or w["kernel2"] or "")
    finding.file = w["file"] or w["file2"] or ""
    finding.line = int(w["line"] or w["line2"])


def run_compute_sanitizer(op: Op, *args: Any, tool: str = "memcheck", timeout_s: float = 300.0) -> SanitizerReport:
    """Run one call of the gpu ``op`` on ``args`` under compute-sanitizer's ``tool`` (see the module); an op on
    the CUDA emulator gets the emulator's own memcheck, racecheck or synccheck instead (same report type)."""
    if getattr(op, "emulated", False):  # no GPU: the emulator's own checks (aotbench.tools.emulator_sanitizer)
        from .emulator_sanitizer import run_on_emulator

        return run_on_emulator(op, *args, tool=tool, timeout_s=timeout_s)
    if tool not in TOOLS:
        raise ArgumentValueError(f"tool={tool!r}: compute-sanitizer's tools are {', '.join(TOOLS)}")
    if not op.device.runs_elsewhere:
        raise ArgumentValueError(f"{op.name} is a cpu op: use sanitize='address' or 'undefined' (Custom/--sanitize)")
    if getattr(op, "artifact", None) is None:
        raise ArgumentValueError("compute_sanitizer rebuilds the op with -lineinfo: it needs an op built from source")
    require_gpu(op.name)
    sanitizer = find_compute_sanitizer()
    payload = {"spec": _travelling_spec(op),
               "args": [op.device.to_host(a) if op.device.owns(a) else a for a in args]}
    try:
        data = pickle.dumps(payload, protocol=5)
    except Exception as exc:  # whatever stops pickling (a local class in the recipe ...)
        raise ArgumentTypeError(f"compute_sanitizer sends the op's recipe to a subprocess, and it cannot be: "
                            f"{exc}") from exc
    with tempfile.TemporaryDirectory(prefix="aotbench-sanitizer-") as scratch:
        path = Path(scratch) / "call.pkl"
        path.write_bytes(data)
        argv = [sanitizer, "--tool", tool, "--print-limit", "50", sys.executable, "-m", "aotbench.cli.gpu_call",
                str(path)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                                  check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else exc.stdout
            raise KernelTimeoutError(op.name, timeout_s, out or "") from None
    return interpret(op.name, tool, proc.stdout + proc.stderr, proc.stderr, proc.returncode)


def interpret(name: str, tool: str, output: str, stderr: str, returncode: int) -> SanitizerReport:
    """The report of one sanitized run of op ``name``; :class:`DeviceUnavailableError` when the tool could not
    run at all (it refuses some GPUs and virtualized machines) rather than finding something."""
    findings, api_errors, summary = parse_report(output)
    child_error = _child_error(stderr)
    refused = [f for f in findings if any(text in f.what for text in TOOL_FAILURES)]
    if refused or (not findings and returncode != 0 and not child_error):
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise DeviceUnavailableError(
            f"compute-sanitizer could not run {name} (exit status {returncode}); it refuses some GPUs and "
            f"virtualized machines. Its output ends:\n{tail}")
    return SanitizerReport(tool, findings, summary, output, child_error, api_errors)


def _travelling_spec(op: Op):
    """The op's recipe for the child: built with ``-lineinfo`` (findings then name source lines), its output
    rules carried as every recipe leaving the process is (a lambda by cloudpickle: ``portable_spec``)."""
    spec = op.spec
    flags = spec.flags if "-lineinfo" in spec.flags else (*spec.flags, "-lineinfo")
    return portable_spec(replace(spec, flags=flags), f"compute_sanitizer's recipe of {op.name}")


def _child_error(stderr: str) -> str:
    """The error the call raised in the child (its last line, marked by the child)."""
    marked = [line for line in stderr.splitlines() if line.startswith("aotbench-call-error: ")]
    return marked[-1].removeprefix("aotbench-call-error: ") if marked else ""


__all__ = ["TOOLS", "ApiError", "Finding", "ParsedReport", "SanitizerReport", "find_compute_sanitizer", "parse_report",
           "run_compute_sanitizer"]
