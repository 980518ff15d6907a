"""``op.compute_sanitizer`` for an emulated op: the emulator's own memcheck, racecheck and synccheck.

NVIDIA's compute-sanitizer needs a GPU; an op on aotbench's CUDA emulator is checked by the emulator's
equivalents, with the same report type (:class:`~aotbench.tools.compute_sanitizer.SanitizerReport`):

- ``memcheck``: the op rebuilt with AddressSanitizer and called once in a child process with ASan's runtime
  preloaded, each array in an allocation of its own. An out-of-bounds global or shared access (static and
  dynamic ``__shared__`` memory) is reported with its line, and the emulator adds which CUDA thread of which
  block made it.
- ``racecheck``: the op rebuilt with ThreadSanitizer, every CUDA thread a fiber of its own and every barrier and
  warp operation a synchronisation, so two accesses of different threads not ordered by a ``__syncthreads`` are
  a race: the classic missing barrier is reported with both lines and both threads.
- ``synccheck``: one call with the emulator noting what a GPU tolerates but CUDA leaves undefined (threads that
  exited before a ``__syncthreads`` others wait at), beside what it always refuses (threads at different
  barriers, a warp operation whose mask names lanes that are not there).

The child runs every block on one CPU thread. ``initcheck`` has no equivalent here.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentTypeError, ArgumentValueError, KernelTimeoutError
from ..run.sanitize import runtime_library
from ..spec.pickling import portable_spec
from .compute_sanitizer import Finding, SanitizerReport

if TYPE_CHECKING:
    from ..op.op import Op

TOOLS = ("memcheck", "racecheck", "synccheck")
#: How the child (:mod:`aotbench.cli.emulated_call`) marks its lines on stderr.
HAZARD = "aotbench-sync-hazard: "
CALL_ERROR = "aotbench-call-error: "
_RUNTIMES = {"memcheck": "libasan.so", "racecheck": "libtsan.so"}
_FLAGS = {"memcheck": ("-fsanitize=address", "-fno-omit-frame-pointer", "-g"),
          "racecheck": ("-fsanitize=thread", "-g")}
_ENV = {"memcheck": {"ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:symbolize=1:"
                                     "print_summary=1:allocator_may_return_null=1"},
        "racecheck": {"TSAN_OPTIONS": "halt_on_error=0:report_signal_unsafe=0:history_size=4:exitcode=66"}}
_FRAME = re.compile(r"#\d+ (?:0x[0-9a-f]+ in )?(?P<func>\S+) (?P<file>[^\s:]+(?: [^\s:]+)*):(?P<line>\d+)")
_ASAN = re.compile(r"ERROR: AddressSanitizer: (?P<what>[\w-]+)")
_ACCESS = re.compile(r"^(?P<what>READ|WRITE) of size (?P<size>\d+)", re.MULTILINE)
_BY = re.compile(r"aotbench-emulator: the access was made by thread \((?P<thread>[^)]*)\) of block "
                 r"\((?P<block>[^)]*)\) of kernel (?P<kernel>\S+)")
_TSAN_ACCESS = re.compile(r"^\s+(?P<what>(?:Previous )?(?:[Aa]tomic )?(?:[Ww]rite|[Rr]ead)) of size (?P<size>\d+) "
                          r"at 0x[0-9a-f]+ by (?:thread (?P<tid>T\d+)|main thread)", re.MULTILINE)
_TSAN_NAME = re.compile(r"Thread (?P<tid>T\d+) '(?P<name>[^']*)'")
_NAMED = re.compile(r"thread \((?P<thread>[^)]*)\) of block \((?P<block>[^)]*)\)")
_LOCATION = re.compile(r"Location is (?P<what>[^\n]*)")
_WHERE = re.compile(r"(?:at |\()(?P<file>[^\s:()]+):(?P<line>\d+)")
_BLOCK = re.compile(r"block \((?P<block>[^)]*)\)")


def run_on_emulator(op: Op, *args: Any, tool: str = "memcheck", timeout_s: float = 300.0,
                    seed: int | None = None) -> SanitizerReport:
    """Run one call of the emulated ``op`` under the emulator's ``tool`` (see the module)."""
    if tool not in TOOLS:
        extra = " (initcheck needs a GPU)" if tool == "initcheck" else ""
        raise ArgumentValueError(f"tool={tool!r}: the CUDA emulator's checks are {', '.join(TOOLS)}{extra}")
    if op.artifact is None or op.source_path is None:
        raise ArgumentValueError("the emulator's checks rebuild the op: it needs an op built from source")
    spec = replace(op.spec, flags=(*op.spec.flags, *_FLAGS.get(tool, ())), emulate=True, isolate=False,
                   sanitize=None, guard=False, timeout_s=None)
    payload = {"spec": portable_spec(spec, f"the emulator's {tool} recipe of {op.name}"), "tool": tool,
               "seed": seed, "args": [op.device.to_host(a) if op.device.owns(a) else a for a in args]}
    try:
        data = pickle.dumps(payload, protocol=5)
    except Exception as exc:  # whatever stops pickling (a local class in the recipe ...)
        raise ArgumentTypeError(f"the emulator's {tool} sends the op's recipe to a subprocess, and it cannot be: "
                                f"{exc}") from exc
    env = dict(os.environ)
    if tool in _RUNTIMES:
        env["LD_PRELOAD"] = runtime_library(_RUNTIMES[tool])
        env.update(_ENV[tool])
    with tempfile.TemporaryDirectory(prefix="aotbench-emulator-check-") as scratch:
        path = Path(scratch) / "call.pkl"
        path.write_bytes(data)
        argv = [sys.executable, "-m", "aotbench.cli.emulated_call", str(path)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                                  check=False, stdin=subprocess.DEVNULL, env=env)
        except subprocess.TimeoutExpired as exc:
            out = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise KernelTimeoutError(op.name, timeout_s, out) from None
    return interpret(tool, proc.stdout + proc.stderr, proc.stderr, proc.returncode)


def interpret(tool: str, output: str, stderr: str, returncode: int = 0) -> SanitizerReport:
    """The report of one checked run: the sanitizer's findings (or synccheck's), and what the call raised. A
    child that failed without a finding or an error of the call's is never "no errors": its end is the error."""
    marked = [line.removeprefix(CALL_ERROR) for line in stderr.splitlines() if line.startswith(CALL_ERROR)]
    child_error = marked[-1] if marked else ""
    if tool == "memcheck":
        findings = parse_asan(stderr)
    elif tool == "racecheck":
        findings = parse_tsan(stderr)
    else:
        findings = [_from_message(line.removeprefix(HAZARD), "barrier hazard")
                    for line in stderr.splitlines() if line.startswith(HAZARD)]
        if child_error and "EmulatorError" in child_error:
            findings.append(_from_message(child_error.split(": ", 1)[-1], "barrier or warp error"))
    expected = {0, 3} | ({66} if tool == "racecheck" and findings else set()) | ({1} if findings else set())
    if returncode not in expected and not child_error:
        tail = " | ".join(stderr.strip().splitlines()[-6:])
        child_error = f"the checked call did not complete (exit status {returncode}): {tail}"
    summary = f"{tool} (aotbench's CUDA emulator): {len(findings)} finding(s)"
    return SanitizerReport(tool, findings, summary, output, child_error)


def parse_asan(report: str) -> list[Finding]:
    """AddressSanitizer's report (and the emulator's line naming the CUDA thread) as findings."""
    found = _ASAN.search(report)
    if not found:
        return []
    access = _ACCESS.search(report)
    what = found["what"] + (f": {access['what'].lower()} of {access['size']} bytes" if access else "")
    finding = Finding(what)
    frame = _user_frame(report[found.end():])
    if frame:
        finding.kernel, finding.file, finding.line = frame
    by = _BY.search(report)
    if by:
        finding.thread, finding.block = by["thread"], by["block"]
        finding.kernel = finding.kernel or by["kernel"]
    location = re.search(r"is located (?P<where>[^\n]*)", report)
    if location:
        finding.details.append(f"the address is located {location['where'].strip()}")
    return [finding]


def parse_tsan(report: str) -> list[Finding]:
    """ThreadSanitizer's warnings as findings: the first access with its line and CUDA thread; the other access
    (line, thread) and the memory's location in the details."""
    names = {m["tid"]: m["name"] for m in _TSAN_NAME.finditer(report)}
    findings: list[Finding] = []
    for chunk in report.split("WARNING: ThreadSanitizer: ")[1:]:
        title = chunk.split("(", 1)[0].strip()
        accesses = []
        matches = list(_TSAN_ACCESS.finditer(chunk))
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(chunk)
            accesses.append((m, _user_frame(chunk[m.end():end])))
        if not accesses:
            continue
        (first, where), *others = accesses
        finding = Finding(f"{title}: {first['what'].lower()} of {first['size']} bytes")
        if where:
            finding.kernel, finding.file, finding.line = where
        named = _NAMED.search(names.get(first["tid"] or "", ""))
        if named:
            finding.thread, finding.block = named["thread"], named["block"]
        for m, other in others:
            who = names.get(m["tid"] or "", "the host")
            at = f" at {Path(other[1]).name}:{other[2]}" if other else ""
            finding.details.append(f"{m['what'].lower()} of {m['size']} bytes{at} by {who}")
        location = _LOCATION.search(chunk)
        if location:
            finding.details.append(f"location: {location['what'].strip()}")
        findings.append(finding)
    return findings


def _user_frame(text: str) -> tuple[str, str, int] | None:
    """(function, file, line) of the first stack frame in the user's code (not the emulator's, not the system's)."""
    for m in _FRAME.finditer(text):
        file = m["file"]
        if "cuda_emu" in file or file.startswith("/usr/") or "libsanitizer" in file or file.startswith("<null>"):
            continue
        return m["func"].split("(")[0], _short(file), int(m["line"])
    return None


def _short(path: str) -> str:
    """``/tmp/build/<cell>`` -> ``<cell>`` (the compiler prefixes the working directory to #line names)."""
    return path[path.index("<"):] if "<" in path and path.endswith(">") else path


def _from_message(message: str, what: str) -> Finding:
    finding = Finding(f"{what}: {message}")
    where = _WHERE.findall(message)
    if where:
        finding.file, finding.line = _short(where[-1][0]), int(where[-1][1])
    block = _BLOCK.search(message)
    if block:
        finding.block = block["block"]
    kernel = re.match(r"kernel (\S+)", message)
    if kernel:
        finding.kernel = kernel[1]
    return finding


__all__ = ["TOOLS", "interpret", "parse_asan", "parse_tsan", "run_on_emulator"]
