"""``op.profile``: where a kernel's time goes, per source line and per instruction, from sampling.

The op runs again and again on the caller's inputs while :mod:`aotbench.run.profiling` samples every thread that
runs it (no privileges: a SIGPROF timer per thread). Each sample is a short stack; it counts for the kernel when
a frame is in the op's library: the innermost such frame decides the line (a sample inside a function the kernel
calls, ``expf`` in libm, counts for the line that called it, and the libraries called are listed apart). Lines
come from a build with line tables: the op's inspection build (``op.disassemble()``'s, the same code: checked by
comparing the two ``.text`` sections), or the emulator's build, which has ``-g`` already. Samples weigh the CPU
time their thread used since its previous one, so a thread that waited counts for (almost) nothing.

What the samples cannot show is said in ``notes``: a source changed since the build (time per function only,
not per line), calls so short that the call's own cost outweighs the kernel, work on threads that were not
sampled (threads started anew on every call), a run ended by a full sample buffer.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..errors import AotbenchError, AotbenchWarning, ArgumentValueError, SourceChangedError
from ..native import elf
from ..run import profiling
from ..run.profiling import RawProfile, waiting_threshold_ns
from .codeview import binaries, inspection
from .codeview.listing import Function, SourceText

#: Modules whose samples are the call's own cost, not the kernel's, by what their file name starts with.
_PYTHON_MODULES = ("libpython", "python", "_ctypes", "libffi", "_multiarray", "libopenblas", "libscipy")
_OPENMP_MODULES = ("libgomp", "libomp", "libiomp")


@dataclass(frozen=True)
class Mapping:
    """How the op's loaded library maps to source lines: the file whose line table is read (``None``: no line
    table, functions only), the kernel's source as the user wrote it, and the disassembly's functions."""

    library: Path | None
    source: SourceText | None
    functions: tuple[Function, ...] = ()
    note: str = ""


@dataclass(frozen=True, repr=False)
class Profile:
    """Where the time of ``calls`` calls of an op went, from ``samples`` samples of its running threads.

    Fractions are of all the CPU time sampled (every thread): ``by_line`` (the kernel's source line -> fraction;
    a cell's lines for a cell), ``by_instruction`` (address in the library -> fraction), ``by_function``;
    ``inside`` is the kernel's share (its code and what it calls), ``outside`` the rest by where it was
    (aotbench's call, Python and numpy making the outputs, the OpenMP runtime waiting ...), ``called`` the
    libraries the kernel called, part of ``inside``. ``overhead`` is how much slower a call was while sampled."""

    name: str
    samples: int
    waiting_samples: int
    threads: int
    calls: int
    seconds: float
    ns_per_call: float
    baseline_ns_per_call: float
    interval_ns: int
    inside: float
    by_line: dict[int, float]
    by_instruction: dict[int, float]
    by_function: dict[str, float]
    outside: dict[str, float]
    called: dict[str, float]
    elsewhere: dict[str, float]  # in the library but in no line of the source (other files, no line table)
    mapping: Mapping
    library: str = ""  # the op's library as loaded (real path)
    label: str = ""  # what the time is: "" for a CPU kernel, "the emulator's CPU time" for emulated CUDA
    notes: tuple[str, ...] = ()
    counters: object = None  # aotbench.tools.profile_extras.CounterReport, or None
    hot_loop: object = None  # aotbench.tools.hotloop.HotLoopReport, or None (hot_loop_note says why)
    hot_loop_note: str = ""
    raw: RawProfile | None = field(default=None, compare=False)

    @property
    def overhead(self) -> float:
        """How much slower a call ran while sampled than just before, as a fraction (noisy; may be negative)."""
        return self.ns_per_call / self.baseline_ns_per_call - 1.0 if self.baseline_ns_per_call > 0 else 0.0

    @property
    def source(self) -> SourceText | None:
        return self.mapping.source

    def hottest(self, n: int = 5) -> list[tuple[int, float, str]]:
        """The ``n`` lines with the most time: (line, fraction, the line's text)."""
        ranked = sorted(self.by_line.items(), key=lambda kv: -kv[1])[:n]
        return [(line, share, self.source.line(line).strip() if self.source else "") for line, share in ranked]

    @property
    def text(self) -> str:
        from .profile_views import profile_text
        return profile_text(self)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        top = self.hottest(1)
        hot = f", hottest line {top[0][0]} ({100 * top[0][1]:.0f}%)" if top else ""
        return (f"<aotbench Profile of {self.name}: {self.samples} samples, {self.calls} calls, "
                f"{100 * self.inside:.0f}% in the kernel{hot}>")

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.text)

    def _repr_html_(self) -> str:
        from .profile_views import profile_html
        return profile_html(self)

    def source_html(self) -> str:
        from .profile_views import source_html
        return source_html(self)

    def disassembly_text(self, function: str | None = None) -> str:
        from .profile_views import disassembly_text
        return disassembly_text(self, function)


def profile(op, *arrays, seconds: float = 1.0, min_samples: int = profiling.MIN_SAMPLES,
            interval_ms: float = profiling.DEFAULT_INTERVAL_NS / 1e6, counters: bool = True,
            hot_loop: bool | str = True) -> Profile:
    """Run ``op(*arrays)`` again and again for ``seconds`` (longer until ``min_samples`` samples are in) while
    every thread running it is sampled every ``interval_ms``; see :class:`Profile`. No privileges are needed.
    ``counters``: hardware counters per call where the machine allows them (else a one-line reason);
    ``hot_loop``: the hottest loop's predicted speed (llvm-mca) beside the measured time in it; ``"count"``
    also counts its iterations with a hardware execute breakpoint, when that is cheap enough (opt-in: see
    :func:`aotbench.tools.hotloop.measure_iterations`)."""
    _check_profilable(op)
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise ArgumentValueError(f"min_samples={min_samples!r}: give a positive int (the default is "
                                 f"{profiling.MIN_SAMPLES})")
    if isinstance(interval_ms, bool) or not isinstance(interval_ms, (int, float)) or not 0.05 <= interval_ms <= 100:
        raise ArgumentValueError(f"interval_ms={interval_ms!r}: give the sampling interval in milliseconds, "
                                 "0.05 to 100 (the default, 1, is 1000 samples a second per thread)")
    if not _isolated(op) and any(not isinstance(a, np.ndarray) and hasattr(a, "__dlpack__") for a in arrays):
        # Another library's arrays, read once: the sampled loop then runs the kernel, not that library's code
        # (JAX's from_dlpack throws and catches a C++ exception each call, whose unwinder lock a sample would
        # wait on in the signal handler).
        converted, extras = op.kernel.host_arrays(arrays)
        arrays = (*converted, *extras)
    raw = op.runner.profile(op.kernel, arrays, seconds=seconds, interval_ns=int(interval_ms * 1e6),
                            min_samples=min_samples) if _isolated(op) else profiling.sample(
        op.kernel.runtime, lambda: op(*arrays), seconds=seconds, interval_ns=int(interval_ms * 1e6),
        min_samples=min_samples)
    mapping = mapping_for(op)
    result = analyse(op.name, raw, str(op.library.path), mapping, runtime_path=str(op.kernel.runtime.path),
                     label="the emulator's CPU time" if getattr(op, "emulated", False) else "")
    extras = {}
    if hot_loop not in (True, False, "count"):
        raise ArgumentValueError(f"hot_loop={hot_loop!r}: True (find and predict the hottest loop), False, or "
                                 "\"count\" (also count its iterations with a hardware breakpoint)")
    if counters or hot_loop:
        from .profile_extras import add_extras
        extras = add_extras(op, arrays, result, counters=counters, hot_loop=hot_loop)
    return replace(result, **extras) if extras else result


def profiled_call(op, call, args: tuple):
    """The call ``op.profile_next_call`` (``%%aot_kernel --profile``) asked for: the call as usual, then a
    profile on its inputs, shown (IPython's display, else printed) and kept as ``op.last_profile``."""
    outputs = call(args)
    try:
        found = profile(op, *args)
    except AotbenchError as exc:  # the call itself succeeded: its outputs are not lost to the profile's failure
        import warnings

        warnings.warn(f"{op.name}: the profile asked for (%%aot_kernel --profile) failed, the call's outputs are "
                      f"returned: {type(exc).__name__}: {exc}", AotbenchWarning, stacklevel=3)
        return outputs
    op.last_profile = found
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # no IPython: the text
        print(found.text)
    else:
        if get_ipython() is not None:
            display(found)
        else:
            print(found.text)
    return outputs


def _isolated(op) -> bool:
    return not getattr(op.runner, "fast", True) and hasattr(op.runner, "profile")


def _check_profilable(op) -> None:
    if getattr(op.spec, "sanitize", None):
        raise ArgumentValueError(f"{op.name} runs under a sanitizer (sanitize={op.spec.sanitize!r}), whose "
                                 "checks would be most of the time measured: profile the op built without it")
    device = op.device
    if device.runs_elsewhere and not getattr(op, "emulated", False):
        raise ArgumentValueError(
            f"{op.name} runs on a GPU: op.profile samples CPU threads, and a GPU kernel's time is on the device. "
            "Profile it on the CUDA emulator (Custom(..., emulate=True), %%aot_kernel gpu --emulate: the "
            "emulator's CPU time, per line), or use Nsight Compute on the GPU")


def mapping_for(op) -> Mapping:
    """The line table that describes the op's loaded library (see the module's docstring)."""
    library = Path(op.library.path)
    if getattr(op, "emulated", False):  # built with -g: its own line table, lines where the user wrote them
        return Mapping(library, _user_source(op), (), "")
    if op.artifact is None:
        return Mapping(None, None, (), "a prebuilt library: no line table, so time is given per function only")
    try:
        built = inspection._inspection_build(op)
    except SourceChangedError as exc:  # the library runs the old code: per function is still true, lines are not
        return Mapping(None, None, (), f"{exc.path or 'its source'} changed since the op was built, and the "
                       "library still runs the code built then: lines are not shown, time is given per function "
                       "only (re-run the cell, or build the op again, for lines)")
    same = elf.section_bytes(library.read_bytes(), ".text") == elf.section_bytes(built.path.read_bytes(), ".text")
    if not same:
        return Mapping(None, _user_source(op), (), "the inspection build's code differs from the op's library "
                       "(a compiler that does not keep -g out of code generation), so lines are not shown")
    disassembly = op.disassemble()
    return Mapping(built.path, SourceText(str(op.source_path), built.source), disassembly.functions, "")


def _user_source(op) -> SourceText | None:
    """The source as it was built (the file may have changed since: the line table is the build's)."""
    if op.source_path is None:
        return None
    built = getattr(op.artifact, "source", None) if op.artifact is not None else None
    if built is not None:
        return SourceText(str(op.source_path), built)
    return SourceText(str(op.source_path), Path(op.source_path).read_text(errors="replace"))


# -- from samples to lines -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Frame:
    function: str
    file: str | None
    line: int | None


def addr2line(library: Path, addresses: list[int]) -> dict[int, list[_Frame]]:
    """Each address's inline chain (innermost first): function, file and line, from the library's line table."""
    if not addresses:
        return {}
    argv = [binaries.find("addr2line"), "-e", str(library), "-a", "-f", "-i", "-C"]
    out = subprocess.run(argv, input="\n".join(f"{a:#x}" for a in addresses), capture_output=True, text=True,
                         check=False).stdout.splitlines()
    chains: dict[int, list[_Frame]] = {}
    current: list[_Frame] | None = None
    i = 0
    while i < len(out):
        line = out[i]
        if line.startswith("0x") and (i + 1 >= len(out) or not out[i + 1].startswith("0x")) and _is_address(line):
            current = chains.setdefault(int(line, 16), [])
            i += 1
            continue
        if current is not None and i + 1 < len(out):
            where = out[i + 1]
            file, _, num = where.rpartition(":")
            num = num.split(" ", 1)[0]
            current.append(_Frame(line, file if file and file != "??" else None,
                                  int(num) if num.isdigit() and num != "0" else None))
            i += 2
        else:
            i += 1
    return chains


def _is_address(text: str) -> bool:
    try:
        int(text, 16)
        return True
    except ValueError:
        return False


def _category(module: str, runtime_path: str | None) -> str:
    base = os.path.basename(module)
    if not module:
        return "unknown (no module maps the address)"
    if runtime_path and os.path.realpath(module) == os.path.realpath(runtime_path):
        return "aotbench's native call (runtime)"
    if base.startswith(_OPENMP_MODULES):
        return "OpenMP runtime (threads waiting for work or for each other)"
    extension = sysconfig.get_config_var("EXT_SUFFIX") or ".so"  # numpy's and ctypes' modules
    if base.startswith(_PYTHON_MODULES) or base.endswith((extension, ".abi3.so")):
        return "Python, numpy and ctypes (the call's wrapper, the outputs' allocation)"
    return base


def analyse(name: str, raw: RawProfile, library: str, mapping: Mapping, *, label: str = "",
            runtime_path: str | None = None) -> Profile:
    """Attribute every sample (see the module's docstring) and sum the weights into fractions."""
    library = os.path.realpath(library)
    rows, weights, samples, waiting = _stacks(raw)
    # Every library address any sample needs: frame 0 as is, callers' return addresses less one (the call).
    wanted: set[int] = set()
    for row in rows:
        for depth, pc in enumerate(row):
            loc = raw.locations.get(pc)
            if pc and loc is not None and loc.module == library:
                wanted.add(loc.address - (depth > 0))
    chains = addr2line(mapping.library, sorted(wanted)) if mapping.library is not None else {}
    source = mapping.source
    by_line: dict[int, float] = defaultdict(float)
    by_instruction: dict[int, float] = defaultdict(float)
    by_function: dict[str, float] = defaultdict(float)
    outside: dict[str, float] = defaultdict(float)
    called: dict[str, float] = defaultdict(float)
    elsewhere: dict[str, float] = defaultdict(float)
    starts = _instruction_starts(mapping.functions)
    total = 0
    for row, weight in zip(rows, weights):
        total += weight
        frames = [(d, raw.locations.get(pc)) for d, pc in enumerate(row) if pc]
        first = next(((d, loc) for d, loc in frames if loc is not None and loc.module == library), None)
        head = frames[0][1] if frames else None
        head_module = head.module if head is not None else ""
        category = _category(head_module, runtime_path)
        # Outside: no frame in the library, or the thread is in Python, aotbench or OpenMP's runtime on its way
        # to or back from the kernel (a library the kernel calls, libm, is the kernel's time).
        if first is None or (first[0] > 0 and category != os.path.basename(head_module)):
            outside[category] += weight
            continue
        if first[0] > 0:
            called[f"{os.path.basename(head_module)}" + (f" ({head.symbol})" if head.symbol else "")] += weight
        # The first frame in the library with a line of the source decides (a PLT stub, a header's function
        # that was not inlined or the emulator's scheduler hands the time to the line that called it).
        line = function = where = address = None
        for depth, loc in frames:
            if loc is None or loc.module != library:
                continue
            at = loc.address - (depth > 0)
            found, named, place = _attribute(chains.get(at, []), source, loc.symbol)
            if address is None or (function == "?" and named != "?"):  # a nameless PLT stub: its caller
                address, function, where = at, named, place
            if found is not None:
                line, function, address = found, named, at
                break
        instruction = _instruction_at(starts, address)
        by_instruction[instruction if instruction is not None else address] += weight
        by_function[function] += weight
        if line is not None:
            by_line[line] += weight
        else:
            elsewhere[where] += weight
    total = total or 1

    def share(d: dict) -> dict:
        return {k: v / total for k, v in sorted(d.items(), key=lambda kv: -kv[1])}

    inside = sum(by_function.values()) / total
    notes = [mapping.note] if mapping.note else []
    notes += _caveats(raw, samples, inside, share(outside))
    return Profile(name=name, samples=samples, waiting_samples=waiting, threads=len(raw.threads), calls=raw.calls,
                   seconds=raw.wall_ns / 1e9, ns_per_call=raw.ns_per_call,
                   baseline_ns_per_call=raw.baseline_ns_per_call, interval_ns=raw.interval_ns, inside=inside,
                   by_line=dict(sorted(share(by_line).items())), by_instruction=dict(sorted(
                       share(by_instruction).items())), by_function=share(by_function), outside=share(outside),
                   called=share(called), elsewhere=share(elsewhere), mapping=mapping, library=library, label=label,
                   notes=tuple(notes), raw=raw)


def _stacks(raw: RawProfile) -> tuple[list, list, int, int]:
    """The distinct stacks that weigh something and their summed weights (a long profile repeats a few hundred
    stacks: its million samples are not looped over in Python), the samples of running threads, of waiting ones."""
    running = raw.cpu_ns > waiting_threshold_ns(raw.interval_ns)
    pcs = np.ascontiguousarray(raw.pcs[running])
    if not len(pcs):
        return [], [], 0, int(len(running))
    rows, inverse = np.unique(pcs.view(np.dtype((np.void, pcs.dtype.itemsize * pcs.shape[1]))).ravel(),
                              return_inverse=True)
    weights = np.bincount(inverse.ravel(), weights=raw.cpu_ns[running], minlength=len(rows))
    stacks = rows.view(pcs.dtype).reshape(len(rows), pcs.shape[1]).tolist()
    return stacks, [int(w) for w in weights], int(len(pcs)), int(len(running) - len(pcs))


def _caveats(raw: RawProfile, samples: int, inside: float, outside: dict[str, float]) -> list[str]:
    """What the shares cannot tell on their own (see the module's docstring)."""
    notes = []
    if raw.dropped:
        notes.append(f"{raw.dropped} samples past the buffer were counted but not stored")
    if raw.buffer_full:
        notes.append(f"the sample buffer filled after {raw.wall_ns / 1e9:.1f} s, which ended the run")
    if not samples:
        notes.append("no sample found a thread running (they all waited): the kernel's time was on threads "
                     "that were not sampled, or it sleeps rather than computes")
    elif inside < 0.5 and next(iter(outside), "").startswith(("Python", "aotbench")):  # the call's own cost leads
        notes.append(f"most of the time is outside the kernel: a call takes {raw.ns_per_call / 1e3:.2f} us in "
                     "all, and the call's own cost (Python, the outputs' allocation, aotbench's call) outweighs "
                     "what the kernel does; larger inputs, or more work per call, show the kernel's own lines")
    sampled = sum(raw.thread_cpu_ns)
    unsampled = raw.process_cpu_ns - sampled
    if raw.process_cpu_ns > 0 and unsampled > 0.2 * raw.process_cpu_ns and unsampled > 10_000_000:
        notes.append(f"the sampled threads used {100 * sampled / raw.process_cpu_ns:.0f}% of the process's CPU "
                     "time during the run: the rest ran on threads that were not sampled (the process's other "
                     "Python threads, or threads the kernel starts on every call, which do not exist yet when "
                     "the threads to sample are chosen; a pool that lives across calls, as OpenMP's, is sampled)")
    return notes


def _attribute(chain: list[_Frame], source: SourceText | None, symbol: str) -> tuple[int | None, str, str]:
    """(the source line, the function, where it was when not in the source) for one address's inline chain:
    the innermost location in the kernel's source wins (a helper inlined from a header counts for the line
    that called it)."""
    function = chain[-1].function if chain else (symbol or "?")  # the outermost: the real function
    for frame in chain:
        if source is not None and frame.line is not None and source.owns(frame.file):
            return frame.line, function, ""
    if chain and chain[0].file is not None:
        return None, function, f"{os.path.basename(chain[0].file)}:{chain[0].line or '?'}"
    return None, function, f"{function} (no line table)"


def _instruction_starts(functions: tuple[Function, ...]) -> list[int]:
    starts = []
    for f in functions:
        for block in f.blocks:
            for text in block.instructions:
                head = text.split(" ", 1)[0]
                try:
                    starts.append(int(head, 16))
                except ValueError:
                    pass
    return sorted(starts)


def _instruction_at(starts: list[int], address: int) -> int | None:
    """The start of the instruction that holds ``address`` (a return address less one is inside the call); None
    when no listed instruction can (x86's longest is 15 bytes): a function the listing leaves out."""
    import bisect
    i = bisect.bisect_right(starts, address) - 1
    return starts[i] if i >= 0 and address - starts[i] < 15 else None
