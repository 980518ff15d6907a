"""Every exception and warning class of aotbench, and nothing else: data, importing no other aotbench module.

Errors derive from :class:`AotbenchError` and also from the builtin a caller would naturally catch (``TypeError``
for a mistyped attribute, ``FileNotFoundError`` for a missing compiler ...); each carries structured fields and
says what went wrong and how to fix it. Warnings derive from :class:`AotbenchWarning`. The notebook layer gives
the errors their IPython rendering (:mod:`aotbench.notebook.tracebacks`).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence


# -- the bases ----------------------------------------------------------------------------------------------------
class AotbenchError(Exception):
    """Base class of every error raised by aotbench."""


class AotbenchWarning(UserWarning):
    """Base class of every warning aotbench gives (``warnings.filterwarnings("ignore", category=...)`` silences
    them all)."""


# -- arguments ----------------------------------------------------------------------------------------------------
class ArgumentError(AotbenchError):
    """An aotbench function or op was given a bad argument: the base of :class:`ArgumentTypeError` and
    :class:`ArgumentValueError`, so ``except ArgumentError`` catches both."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (an unsupported dtype included), or the wrong number of arguments."""


class ArgumentValueError(ArgumentError, ValueError):
    """An argument of the right type whose value is out of range or not allowed (``target='tpu'``,
    ``timeout_s=-1``, an unknown tool name), or that does not fit the op it is given to."""


class AttrError(AotbenchError, TypeError):
    """An attribute was missing, mistyped, or could not be represented as one of the eight attribute types."""

    def __init__(self, message: str, *, name: str | None = None, requested: str | None = None,
                 registered: str | None = None, names: Sequence[str] = ()):
        self.name = name
        self.requested = requested
        self.registered = registered
        self.names = list(names)
        super().__init__(message)


class AttrMemoryError(AttrError, MemoryError):
    """An attribute too large for the native runtime to copy (``std::bad_alloc``): pass such data as an input
    array instead."""


class ShapeError(AotbenchError, ValueError):
    """An output shape could not be determined, or a shape rule returned something that is not a shape."""


# -- building -----------------------------------------------------------------------------------------------------
class ToolchainNotFoundError(AotbenchError, FileNotFoundError):
    """The compiler needed for a build (g++ or nvcc) is not installed or not on PATH."""

    def __init__(self, tool: str, hint: str):
        self.tool = tool
        self.hint = hint
        super().__init__(f"{tool} was not found on PATH; {hint}")

    def __str__(self) -> str:  # FileNotFoundError would otherwise format errno-style
        return self.args[0]


class SourceReadError(AotbenchError, OSError):
    """A kernel's source file cannot be read (missing, unreadable): nothing was built. ``path`` is the file."""

    def __init__(self, message: str, *, path: str = ""):
        super().__init__(message)
        self.path = path


class CompileError(AotbenchError):
    """The compiler exited with a non-zero status: ``argv`` is the command that ran, ``log`` the compiler's
    complete output, ``diagnostics`` the parsed :class:`~aotbench.build.diagnostics.Diagnostic` list."""

    def __init__(self, argv: Sequence[str], returncode: int, log: str, diagnostics: Sequence):
        self.argv = list(argv)
        self.returncode = returncode
        self.log = log
        self.diagnostics = list(diagnostics)
        #: Source texts by the file name diagnostics use (the magic adds the cell), for showing the lines.
        self.sources: dict[str, str] = {}
        #: Set when the error was already shown as HTML, so the traceback stays one line.
        self.html_shown = False
        super().__init__(self._summary())

    @property
    def errors(self) -> list:
        return [d for d in self.diagnostics if d.severity in ("error", "fatal error")]

    def _summary(self) -> str:
        errors = self.errors
        head = f"compilation failed ({self.argv[0]} exited with status {self.returncode})"
        if errors:
            shown = "\n".join(f"  {d}" for d in errors[:5])
            more = f"\n  ... and {len(errors) - 5} more errors" if len(errors) > 5 else ""
            return f"{head}:\n{shown}{more}\n(the complete compiler output is in .log)"
        tail = "\n".join(self.log.strip().splitlines()[-10:])
        return f"{head}; last lines of the compiler output:\n{tail}"


class NoLibraryError(AotbenchError):
    """The compiler exited with status 0 but wrote no shared library (a flag such as ``-fsyntax-only``, ``-E``
    or ``-c`` stopped it early, or made it write something else). ``argv`` is the command, ``log`` its output."""

    def __init__(self, argv: Sequence[str], log: str, stoppers: Sequence[str]):
        self.argv = list(argv)
        self.log = log
        named = (f"the flag {' '.join(stoppers)} stops" if stoppers else
                 "a flag (such as -fsyntax-only, -E, -S, -c or -M) stops")
        super().__init__(f"{self.argv[0]} exited with status 0 but wrote no library: {named} it before it links "
                         "a shared library. Remove it: aotbench needs the library to call the kernel.")


class CacheError(AotbenchError, OSError):
    """The cache directory cannot be created or written (the message names the directory and the fix)."""

    def __str__(self) -> str:
        return self.args[0]


class DamagedPchError(AotbenchError):
    """The .gch a compile read differs from its recorded sha256 (``build`` sets it aside and compiles again)."""


class SourceChangedError(AotbenchError, RuntimeError):
    """A file an op was built from (its source or an included header) changed or is gone since the build, so
    what was asked (a view of the code, travelling, an export) would describe other code than the op runs."""

    def __init__(self, message: str, *, name: str = "", path: str = ""):
        super().__init__(message)
        self.name = name
        self.path = path


class TravelError(AotbenchError, pickle.PicklingError):
    """An op, or a value it needs, cannot be pickled to travel to another process (a worker, a process pool):
    the message says what cannot be carried and why. A ``pickle.PicklingError``, as ``pickle.dumps`` raises."""


class ToolFailedError(AotbenchError, RuntimeError):
    """A program aotbench runs for a view of the code (``objdump``, ``cuobjdump``, ``nvdisasm``) could not be run
    or exited with an error; ``tool`` is its name, and the message has what it said."""

    def __init__(self, message: str, *, tool: str = ""):
        super().__init__(message)
        self.tool = tool


# -- loading ------------------------------------------------------------------------------------------------------
class LoadError(AotbenchError, OSError):
    """A shared library could not be loaded (the dynamic loader's message is kept in ``reason``)."""

    def __init__(self, path: str, reason: str, hint: str = ""):
        self.path = path
        self.reason = reason
        msg = f"cannot load {path}: {reason}"
        super().__init__(f"{msg}\n{hint}" if hint else msg)

    def __str__(self) -> str:
        return self.args[0]


class AbiMismatchError(AotbenchError):
    """A library was built with the other libstdc++ string ABI (``_GLIBCXX_USE_CXX11_ABI=1``): calling it would
    garble every attribute name the kernel passes to the host, so it is refused before any call."""

    def __init__(self, path: str, symbols: Sequence[str]):
        self.path = path
        self.symbols = list(symbols)
        shown = ", ".join(self.symbols[:3])
        super().__init__(
            f"{path} was built with -D_GLIBCXX_USE_CXX11_ABI=1 (it references {shown}), but aot kernels must use "
            "the old string ABI. Rebuild it with -D_GLIBCXX_USE_CXX11_ABI=0, as the documented command does "
            "(remove any -D_GLIBCXX_USE_CXX11_ABI=1 from your flags).")


class SymbolNotFoundError(AotbenchError, AttributeError):
    """The kernel function named after the colon in ``"path:name"`` is not exported by the library."""

    def __init__(self, path: str, name: str, candidates: Sequence[str], mangled: Sequence[str] = ()):
        msg = f"{path} exports no function named {name!r}."
        if mangled:
            msg += f" It has the C++-mangled symbol {mangled[0]}: declare the function extern \"C\" so it keeps its "
            msg += "plain name."
        if candidates:
            msg += " Exported C functions: " + ", ".join(candidates) + "."
        super().__init__(msg, name=name)  # AttributeError.__init__ sets .name, so pass it through
        self.path = path
        self.candidates = list(candidates)
        self.mangled = list(mangled)


# -- calling ------------------------------------------------------------------------------------------------------
class KernelError(AotbenchError, RuntimeError):
    """An entry point of the kernel reported failure: ``function`` is the C function that failed (``F``, ``FInit``
    or ``FInferShape``); ``status`` its non-zero return code, or ``None`` when it threw a C++ exception, whose
    text is then in ``exception``."""

    def __init__(self, function: str, status: int | None = None, exception: str | None = None):
        self.function = function
        self.status = status
        self.exception = exception
        if exception is not None:
            msg = f"{function} threw a C++ exception: {exception}"
        else:
            msg = (f"{function} returned {status}; a non-zero return value is the kernel's own error code "
                   "(0 means success)")
        super().__init__(msg)


class CudaError(KernelError):
    """A gpu kernel's call left a CUDA error: a launch the device refused (``when="at launch"``: a grid or block
    out of range, too much shared memory) or a fault while it ran (``when="while it ran"``: an illegal address,
    a device-side assert). ``error`` is the CUDA name (``cudaErrorIllegalAddress``); ``sticky`` errors leave the
    process's CUDA context unusable, so every later CUDA call fails until the Python process restarts."""

    def __init__(self, function: str, error: str, description: str, when: str, kernels: tuple[str, ...] = (),
                 sticky: bool = False, hint: str = ""):
        self.function, self.status, self.exception = function, None, None
        self.error, self.description, self.when = error, description, when
        self.kernels = tuple(kernels)
        self.sticky, self.hint = sticky, hint
        launched = f" (kernels in this library: {', '.join(self.kernels)})" if self.kernels else ""
        msg = f"{function}: CUDA error {error} ({description}) {when}{launched}."
        if hint:
            msg += f" {hint}"
        if sticky:
            msg += (" This error is sticky: the CUDA context of this process is now unusable, so restart the "
                    "Python kernel before running GPU code again.")
        RuntimeError.__init__(self, msg)


class EmulatorError(CudaError):
    """A kernel on aotbench's CUDA emulator failed or a launch was refused: ``error`` is the CUDA error a GPU
    would give (cudaErrorInvalidConfiguration, cudaErrorAssert, cudaErrorLaunchFailure for a ``__syncthreads`` not
    reached by every thread), ``description`` names kernel, block, thread and line. Nothing is sticky."""

    def __init__(self, function: str, error: str, description: str):
        self.function, self.status, self.exception = function, None, None
        self.error, self.description, self.when = error, description, "in the emulator"
        self.kernels, self.sticky, self.hint = (), False, ""
        RuntimeError.__init__(self, f"{function}: {error} (emulated on the CPU): {description}")


class WorkspaceError(AotbenchError, MemoryError):
    """``FInit`` requested a workspace that cannot be allocated (usually a size computed from -1 dims, or an
    element count multiplied twice)."""

    def __init__(self, function: str, index: int, requested: int, why: str = ""):
        self.function = function
        self.index = index
        self.requested = requested
        super().__init__(
            f"{function} requested {requested} bytes for workspace {index}, which cannot be allocated"
            f"{f' ({why})' if why else ''}. Workspace "
            "sizes are in bytes: check how Init computes them (a size derived from a -1 dim wraps around to "
            "about 1.8e19).")


class ContractViolation(AotbenchError, RuntimeError):
    """The kernel broke its contract. Raised by check mode (``--check``: writing out of bounds, leaving outputs
    unwritten, overrunning a workspace, producing poison or wrong values) and by the guarded first call of a
    new input signature (``guarded``: only writes outside the kernel's buffers; no output is returned).
    ``report`` has the details."""

    def __init__(self, function: str, report, guarded: bool = False):
        self.function = function
        self.report = report
        self.guarded = guarded
        head = (f"{function} wrote outside its buffers on its first call with these input shapes (a guarded call, "
                "so this process's memory is intact; the outputs are discarded):" if guarded
                else f"{function} broke its contract:")
        lines = [f"  - {p}" for p in report.problems] + [f"  - {w}" for w in getattr(report, "warnings", ())
                                                         if guarded]
        super().__init__("\n".join([head, *lines]))


class DeviceUnavailableError(AotbenchError, RuntimeError):
    """A GPU op was called where no usable CUDA device is present (the reason says which part is missing)."""


class ForkedOpenMPError(AotbenchError, RuntimeError):
    """An OpenMP (libgomp) op was called in a child made by ``os.fork()`` after the parent had run OpenMP code:
    libgomp's thread pool does not survive a fork, and the call would hang for ever (:mod:`aotbench.run.forking`)."""


# -- isolated calls -----------------------------------------------------------------------------------------------
class KernelCrashedError(AotbenchError, RuntimeError):
    """An isolated op's worker process died during a call (a signal such as SIGSEGV, or an exit): ``signal`` is
    the signal's name (``"SIGSEGV"``) or ``None`` when the worker exited with ``exitcode``; ``function`` the
    kernel; ``stderr`` everything the worker wrote to stderr; ``frames`` where the kernel was when it died,
    innermost first (function, and file:line with ``-g``); ``output`` what the kernel itself printed. The parent
    process is unharmed and the next call starts a fresh worker."""

    def __init__(self, function: str, signal: str | None, exitcode: int | None, stderr: str = "",
                 frames: Sequence[str] = (), output: str | None = None, hint: str = ""):
        self.function, self.signal, self.exitcode, self.stderr = function, signal, exitcode, stderr
        self.frames = list(frames)
        self.output = stderr if output is None else output
        how = f"was killed by {signal}" if signal else f"exited with status {exitcode}"
        parts = [(f"{function} crashed: its isolated worker process {how}. Your Python process is unharmed; the "
                 "next call starts a fresh worker.")]
        if self.frames:
            parts += ["where it was (innermost call first):", *self.frames]
        if hint:
            parts.append(hint)
        tail = "\n".join(self.output.rstrip().splitlines()[-40:])
        if tail:
            parts += ["what the worker printed:" if output is None else "what the kernel printed before it died:",
                      tail]
        super().__init__("\n".join(parts))


class SanitizerError(KernelCrashedError):
    """A sanitizer stopped an isolated, sanitized op: ``kind`` (address/undefined), ``what`` (e.g.
    ``heap-buffer-overflow``), ``location`` (file, line) of the first frame in the kernel's source, ``line_text``
    that source line, and ``report``, the sanitizer's complete output (read by :mod:`aotbench.run.sanitize`)."""

    def __init__(self, crash: KernelCrashedError, kind: str, what: str, location: tuple[str, int] | None = None,
                 line_text: str = "", summary: str = ""):
        self.kind, self.report = kind, crash.stderr
        self.what, self.location, self.line_text = what, location, line_text
        super().__init__(crash.function, crash.signal, crash.exitcode, crash.stderr)
        where = f" at {location[0]}:{location[1]}" if location else ""
        shown = f"\n    {location[1]} | {line_text.strip()}" if location and line_text else ""
        tool = "AddressSanitizer" if kind == "address" else "UBSan"
        self.args = (f"{crash.function}: {tool} found {what}{where}{shown}\n{summary or what}\n"
                     "(the complete report is in .report; your Python process is unharmed)",)


class IsolationMemoryError(AotbenchError, MemoryError):
    """An isolated call needs more shared memory (/dev/shm) than is free: refused before anything is written."""


class ArenaTooSmall(Exception):
    """Inside an isolated worker: the call's outputs do not fit in the shared arena, so the worker asks the parent
    to grow it to ``size`` bytes and call again (never reaches the user)."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class KernelTimeoutError(AotbenchError, TimeoutError):
    """An isolated op's call ran longer than ``timeout_s``; its worker was killed (the next call starts a fresh
    one)."""

    def __init__(self, function: str, timeout_s: float, stderr: str = ""):
        self.function, self.timeout_s, self.stderr = function, timeout_s, stderr
        super().__init__(f"{function} did not return within timeout_s={timeout_s:g} s; its isolated worker was "
                         "killed (an infinite loop or a deadlock in the kernel?). The next call starts a fresh "
                         "worker.")

    def __str__(self) -> str:  # TimeoutError (an OSError) would otherwise format errno-style
        return self.args[0]


# -- MindSpore's stand-in -----------------------------------------------------------------------------------------
class MindSporeApiError(AotbenchError, ImportError):
    """A script run with aotbench's MindSpore stand-in (``python -m aotbench run``, ``aotbench.mindspore``)
    imported a MindSpore module or name the stand-in does not have (``import mindspore.dataset``, ``from
    mindspore import Model``): it runs aot ``Custom`` ops only. An ``ImportError``, so ``try: ... except
    ImportError`` fallbacks keep working."""


class MindSporeAttributeError(AotbenchError, AttributeError):
    """The same, for an attribute of a stand-in module (``mindspore.ops.Add``): an ``AttributeError``, so
    ``hasattr(mindspore, "jit")`` and ``getattr(ops, "Add", None)`` keep working."""


# -- warnings -----------------------------------------------------------------------------------------------------
class FastMathWarning(AotbenchWarning):
    """A library's load changed the process's floating-point mode (crtfastmath.o, linked by ``-ffast-math`` or
    ``-Ofast``): aotbench undid it and runs only the kernel's calls in that mode (said once per library)."""


class HostCopyWarning(AotbenchWarning):
    """A gpu op was given a host (numpy) array: it was copied to the device for this call (said once per op)."""


class FloatingPointEnvWarning(AotbenchWarning):
    """A kernel left the thread's rounding mode, exception traps or FTZ/DAZ changed; aotbench restored the
    caller's environment after the call (said once per op)."""


class SignalStateWarning(AotbenchWarning):
    """A kernel left signals blocked or SIGINT's handler replaced; aotbench restored them (said once per op)."""


class ContractWarning(AotbenchWarning):
    """The guarded first call of a new input signature found the kernel leaving output elements unwritten,
    letting poison reach its outputs, or writing past its workspace inside aotbench's padding: the call
    returned, and its numbers are probably wrong."""


class AttrTypeWarning(AotbenchWarning):
    """An optimised kernel built with a header other than aotbench's seems (from its source text) to read an
    attribute as a type no attribute has (``Attr<double>``): such a header returns 0 for it. At ``-O0`` the
    library shows it for certain, and aotbench refuses the library with :class:`AttrError` instead."""


class DynamicShapeWarning(AotbenchWarning):
    """With dynamic inputs (``Cell.set_inputs``) MindSpore runs the kernel's ``Init`` only once, with -1 dims in
    graph mode or the first call's shapes in PyNative mode; aotbench runs it per concrete shape, so its numbers
    are right, and this says where the same kernel would misbehave in MindSpore."""


class NarrowingWarning(AotbenchWarning):
    """An output's dtype would be narrowed by the caller's library (JAX without ``jax_enable_x64`` turns int64,
    uint64, float64 and complex128 into their 32-bit kinds): that output is returned as it is, a numpy array (a
    cupy array from a gpu op), with every value kept."""


class EmulationWarning(AotbenchWarning):
    """A gpu op runs on aotbench's CUDA emulator because no usable GPU is here (``emulate=None``); said once per
    op. ``emulate=True`` asks for the emulator (no warning), ``emulate=False`` requires a GPU."""


class ExportWarning(AotbenchWarning):
    """The export to MindSpore asked for after an op's next call (``op.export_after_next_call``) failed: the
    call's result was returned, and the warning says why the export failed and how to try again."""


# -- interruptions (a KeyboardInterrupt, so that except Exception does not swallow them) --------------------------
class KernelInterrupted(KeyboardInterrupt):
    """Ctrl-C or the notebook's stop button abandoned an in-process kernel call that did not return in time; the
    message says what is and is not safe afterwards."""


class IsolatedCallInterrupted(KeyboardInterrupt):
    """Ctrl-C (or the notebook's stop button) interrupted an isolated call: its worker process was killed and
    reaped, the call's outputs are lost, and the next call starts a fresh worker. A ``KeyboardInterrupt``, so
    code that catches one keeps working; IPython shows the user's frames and this one message."""

    def __init__(self, function: str):
        self.function = function
        super().__init__(f"{function}'s isolated call was interrupted: its worker process was killed and reaped "
                         "(the call's outputs are lost; this Python process and its variables are unharmed). The "
                         "next call starts a fresh worker.")
