"""Python side of the native host (``native/src/runtime.cc``): bind its C interface with ctypes (the build layer builds
it: :mod:`aotbench.build.native_runtime`).

The host implements ``AotExtra`` and calls the kernel's entry points inside try/catch. This module turns its
outcome codes into aotbench errors and never lets a C++ exception reach ctypes.
"""

from __future__ import annotations

import ctypes
import enum
import threading
import warnings
from pathlib import Path

import numpy as np

from .._userframe import user_stacklevel
from ..errors import AttrError, AttrMemoryError, FloatingPointEnvWarning, KernelError, LoadError, SignalStateWarning
from . import attr_hints, fpenv, interrupts
from .attrs import AttrKind, TypedAttr


class Outcome(enum.IntEnum):
    """What the host's entry points return: ``AOTB_OUTCOMES`` in native/src/runtime.cc, compared with this enum
    by name when the host is loaded (:func:`check_names`)."""

    OK = 0
    STATUS = 1  # the kernel's entry point returned a non-zero status
    EXCEPTION = 2  # it threw (or the host could not store an attribute for another reason)
    ATTR_ERROR = 3  # it read a missing or mistyped attribute
    TOO_SMALL = 4  # aotb_call_infer needs a larger output buffer
    BAD_BUFFER = 5  # an argument is not a C-contiguous buffer of the expected size: convert it and call again
    BUSY = 6  # another call holds the plan's workspaces: call on a set of one's own
    INTERRUPTED = 7  # the stop button abandoned the kernel
    NO_MEMORY = 8  # the host could not allocate an attribute's copy (std::bad_alloc)
    # Bits OR-ed into an outcome: the kernel changed the floating-point environment / the signal state, and the
    # host restored it (the fast path returns on 0 only, so they cost it nothing; note_changes strips them).
    FP_CHANGED = 0x100
    SIGNALS_CHANGED = 0x200


OK, STATUS, EXCEPTION, ATTR_ERROR = Outcome.OK, Outcome.STATUS, Outcome.EXCEPTION, Outcome.ATTR_ERROR
TOO_SMALL, BAD_BUFFER, BUSY, INTERRUPTED = Outcome.TOO_SMALL, Outcome.BAD_BUFFER, Outcome.BUSY, Outcome.INTERRUPTED
NO_MEMORY, FP_CHANGED, SIGNALS_CHANGED = Outcome.NO_MEMORY, Outcome.FP_CHANGED, Outcome.SIGNALS_CHANGED
STATE_CHANGED = FP_CHANGED | SIGNALS_CHANGED
HOST_VERSION = 5
MAX_PARAMS = 64

_c_void_p, _c_int, _c_int64, _c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_size_t
_p_int64 = ctypes.POINTER(ctypes.c_int64)


class CallRecord(ctypes.Structure):
    """Mirror of ``struct AotbCall``: one prepared kernel call."""

    _fields_ = [
        ("fn", _c_void_p), ("nparam", ctypes.c_int32), ("n_in", ctypes.c_int32), ("n_out", ctypes.c_int32),
        ("busy", ctypes.c_int32), ("params", ctypes.POINTER(_c_void_p)), ("ndims", ctypes.POINTER(_c_int)),
        ("shapes", ctypes.POINTER(_p_int64)), ("dtypes", ctypes.POINTER(ctypes.c_char_p)),
        ("stream", _c_void_p), ("extra", _c_void_p), ("nbytes", _p_int64),
        ("fp_set", ctypes.c_uint32), ("fp_clear", ctypes.c_uint32), ("flags", ctypes.c_uint32),
        ("label", ctypes.c_char_p),
    ]


_SIGNATURES = {
    "aotb_host_version": ([], _c_int),
    "aotb_host_call_size": ([], _c_int),
    "aotb_host_extra_size": ([], _c_int),
    "aotb_host_max_params": ([], _c_int),
    "aotb_outcomes": ([ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int32), _c_int], _c_int),
    "aotb_attr_kinds": ([ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int32), _c_int], _c_int),
    "aotb_call_layout": ([ctypes.POINTER(ctypes.c_char_p), _p_int64, _p_int64, _c_int], _c_int),
    "aotb_install_crash_report": ([_c_int], _c_int),
    "aotb_extra_new": ([], _c_void_p),
    "aotb_extra_free": ([_c_void_p], _c_int),
    "aotb_extra_workspace_count": ([_c_void_p], _c_int64),
    "aotb_extra_workspace_sizes": ([_c_void_p, ctypes.POINTER(ctypes.c_uint64)], None),
    "aotb_extra_set_bool": ([_c_void_p, ctypes.c_char_p, _c_int], _c_int),
    "aotb_extra_set_int": ([_c_void_p, ctypes.c_char_p, _c_int64], _c_int),
    "aotb_extra_set_float": ([_c_void_p, ctypes.c_char_p, ctypes.c_float], _c_int),
    "aotb_extra_set_str": ([_c_void_p, ctypes.c_char_p, ctypes.c_char_p, _c_size_t], _c_int),
    "aotb_extra_set_int_vec": ([_c_void_p, ctypes.c_char_p, _c_void_p, _c_size_t], _c_int),
    "aotb_extra_set_float_vec": ([_c_void_p, ctypes.c_char_p, _c_void_p, _c_size_t], _c_int),
    "aotb_extra_set_int_2d": ([_c_void_p, ctypes.c_char_p, _c_void_p, _c_void_p, _c_size_t], _c_int),
    "aotb_extra_set_float_2d": ([_c_void_p, ctypes.c_char_p, _c_void_p, _c_void_p, _c_size_t], _c_int),
    "aotb_extra_set_empty_list": ([_c_void_p, ctypes.c_char_p], _c_int),
    "aotb_extra_set_empty_rows": ([_c_void_p, ctypes.c_char_p, _c_size_t], _c_int),
    "aotb_call_params": ([_c_void_p, _c_void_p, _c_void_p], _c_int),
    "aotb_call_init": ([_c_void_p, _c_void_p, _c_void_p, _c_void_p, _c_void_p, ctypes.POINTER(ctypes.c_int32)],
                       _c_int),
    "aotb_call_infer": ([_c_void_p, _c_int, _c_void_p, _c_void_p, _c_void_p, _c_void_p, _c_int64,
                         ctypes.POINTER(_c_int64)], _c_int),
    "aotb_error_message": ([], ctypes.c_char_p),
    "aotb_error_attr_name": ([], ctypes.c_char_p),
    "aotb_error_attr_requested": ([], _c_int),
    "aotb_error_attr_registered": ([], _c_int),
    "aotb_error_status": ([], _c_int),
    "aotb_set_python_api": ([_c_void_p] * 7, None),
    "aotb_install_signal_handlers": ([ctypes.c_ulong, _c_int], _c_int),
    "aotb_take_abandoned": ([], _c_void_p),
    "aotb_set_abort_fd": ([_c_int], None),
    "aotb_set_abort_report": ([_c_int], None),
    "aotb_interrupt_state": ([], _c_void_p),
    "aotb_handler_of": ([_c_int], _c_void_p),
    "aotb_set_python_handler": ([_c_void_p], None),
    "aotb_use_interrupt_state": ([_c_void_p], None),
    "aotb_state_report": ([ctypes.POINTER(ctypes.c_uint64)], None),
    "aotb_profile_start": ([_c_void_p, _c_int, _c_int64, _c_void_p, _c_void_p, _c_void_p, _c_int64], _c_int),
    "aotb_profile_stop": ([], _c_int64),
    "aotb_profile_taken": ([], _c_int64),
    "aotb_profile_depth": ([], _c_int),
}

# CPython stable-ABI functions the host's hot path uses to read buffers and release the GIL.
_PYTHON_API = ("PyObject_GetBuffer", "PyBuffer_Release", "PyTuple_Size", "PyTuple_GetItem", "PyErr_Clear",
               "PyEval_SaveThread", "PyEval_RestoreThread")

# The first host loaded in this process: its SIGINT and SIGABRT handlers, watchdog and interrupt state serve every
# host (each cache folder has a host of its own; two handlers chaining to each other would recurse for ever).
_SIGNAL_RUNTIME: Runtime | None = None
_SIGNAL_HOST_LOCK = threading.Lock()


# -- the ABI, compared by name when a host is loaded ----------------------------------------------------------
def _fix(path: object) -> str:
    return ("native/src/runtime.cc and its Python mirror aotbench/native/runtime.py must agree: change the one that "
            f"is wrong. A host is rebuilt when runtime.cc changes; delete {path} to force a rebuild.")


def native_names(table) -> dict[str, int]:
    """A name table the host exports (``aotb_outcomes``, ``aotb_attr_kinds``), as ``{name: value}``."""
    n = table(None, None, 0)
    names, values = (ctypes.c_char_p * n)(), (ctypes.c_int32 * n)()
    table(names, values, n)
    return {names[k].decode(): values[k] for k in range(n)}


def native_call_layout(lib) -> list[tuple[str, int, int]]:
    """``struct AotbCall`` as the host was compiled: (field name, offset, size) per field, in order."""
    n = lib.aotb_call_layout(None, None, None, 0)
    names, offsets, sizes = (ctypes.c_char_p * n)(), (ctypes.c_int64 * n)(), (ctypes.c_int64 * n)()
    lib.aotb_call_layout(names, offsets, sizes, n)
    return [(names[k].decode(), offsets[k], sizes[k]) for k in range(n)]


def check_names(mirror: type[enum.IntEnum], native: dict[str, int], path: object) -> None:
    """Refuse (:class:`LoadError`) a host whose name table differs from ``mirror``: the same names, and for each
    name the same value."""
    ours = {m.name: int(m) for m in mirror}
    for name in list(native) + [n for n in ours if n not in native]:
        if name not in ours:
            problem = f"the host has {name} = {native[name]}, which {mirror.__name__} lacks"
        elif name not in native:
            problem = f"{mirror.__name__}.{name} = {ours[name]} is not in the host"
        elif native[name] != ours[name]:
            problem = f"{name} is {native[name]} in the host but {ours[name]} in {mirror.__name__}"
        else:
            continue
        raise LoadError(str(path), f"the host and aotbench disagree on {mirror.__name__}: {problem}", _fix(path))


def check_layout(struct: type[ctypes.Structure], native: list[tuple[str, int, int]], size: int, path: object,
                 c_name: str = "struct AotbCall") -> None:
    """Refuse (:class:`LoadError`) a host whose ``c_name`` (``native``: field, offset, size; ``size`` in all)
    differs from the ctypes ``struct`` field by field, by name: a field missing on either side, or at another
    offset or of another size, is named."""
    ours = {name: (getattr(struct, name).offset, getattr(struct, name).size) for name, *_ in struct._fields_}
    theirs = {name: (offset, nbytes) for name, offset, nbytes in native}
    for name in list(theirs) + [n for n in ours if n not in theirs]:
        if name not in ours:
            problem = f"field {name!r} of {c_name} is not in {struct.__name__}"
        elif name not in theirs:
            problem = f"{struct.__name__} has a field {name!r} that {c_name} lacks"
        elif ours[name] != theirs[name]:
            problem = (f"field {name!r} is at offset {theirs[name][0]} ({theirs[name][1]} bytes) in {c_name} but at "
                       f"offset {ours[name][0]} ({ours[name][1]} bytes) in {struct.__name__}")
        else:
            continue
        raise LoadError(str(path), f"the host's {c_name} differs from aotbench's: {problem}", _fix(path))
    if ctypes.sizeof(struct) != size:
        raise LoadError(str(path), f"{c_name} is {size} bytes in the host but {struct.__name__} is "
                        f"{ctypes.sizeof(struct)}", _fix(path))


def bind(lib: ctypes.CDLL, path: object) -> None:
    """Give the host's functions their signatures and compare its ABI with this module's, by name."""
    for name, (argtypes, restype) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LoadError(str(path), f"it has no function {name}: it was built from another version of "
                            "native/src/runtime.cc", _fix(path)) from None
        fn.argtypes, fn.restype = argtypes, restype
    for what, theirs, ours in (("version", lib.aotb_host_version(), HOST_VERSION),
                               ("MAX_PARAMS", lib.aotb_host_max_params(), MAX_PARAMS)):
        if theirs != ours:
            raise LoadError(str(path), f"its {what} is {theirs}, this aotbench's is {ours}", _fix(path))
    check_names(Outcome, native_names(lib.aotb_outcomes), path)
    check_names(AttrKind, native_names(lib.aotb_attr_kinds), path)
    check_layout(CallRecord, native_call_layout(lib), lib.aotb_host_call_size(), path)


def process_runtime(fallback: Runtime) -> Runtime:
    """The runtime whose signal handlers serve the process (the first loaded): one SIGINT handler, and one
    sampling profiler's SIGPROF handler, whichever cache folder an op was built in."""
    return _SIGNAL_RUNTIME if _SIGNAL_RUNTIME is not None else fallback


def source_path() -> Path:
    """The native host's C++ source (built by :func:`aotbench.build.native_runtime.get_runtime`)."""
    return Path(__file__).resolve().parent / "src" / "runtime.cc"


class Runtime:
    """The loaded host library. Methods take and return plain handles (ints) for extras."""

    def __init__(self, path: Path):
        self.path = path
        lib = ctypes.CDLL(str(path))
        bind(lib, path)
        lib.aotb_set_python_api(*[ctypes.cast(getattr(ctypes.pythonapi, f), _c_void_p) for f in _PYTHON_API])
        self.lib = lib
        #: ``call_params(address_of_CallRecord, params, stream) -> outcome``: F on a complete params array of the
        #: caller's (inputs, outputs, workspaces), on ``stream`` (None on the cpu).
        self.call_params = lib.aotb_call_params
        pylib = ctypes.PyDLL(str(path))
        #: The hot path, ``call_buffers(address_of_CallRecord, inputs, outputs) -> outcome``: keeps the GIL
        #: while it reads the arrays' buffers, releases it around F; ``BUSY`` when another call holds the plan's
        #: workspaces.
        self.call_buffers = pylib.aotb_call_buffers
        self.call_buffers.argtypes = [_c_void_p, ctypes.py_object, ctypes.py_object]
        self.call_buffers.restype = _c_int
        #: ``call_buffers_with(address, inputs, outputs, workspace_pointers)``: the same on workspaces of one's own.
        self.call_buffers_with = pylib.aotb_call_buffers_with
        self.call_buffers_with.argtypes = [_c_void_p, ctypes.py_object, ctypes.py_object, _c_void_p]
        self.call_buffers_with.restype = _c_int
        self._warned: set = set()  # (function, kind) pairs already warned about (note_changes)
        global _SIGNAL_RUNTIME
        with _SIGNAL_HOST_LOCK:
            if _SIGNAL_RUNTIME is None:
                _SIGNAL_RUNTIME = self  # the first host's handlers serve every host (one SIGINT handler per process)
                lib.aotb_set_python_handler(interrupts.python_signal_handler(lib.aotb_handler_of))
            else:
                lib.aotb_use_interrupt_state(_SIGNAL_RUNTIME.lib.aotb_interrupt_state())
        self.install_signal_handlers()
        interrupts.watch(self)

    # -- signals --------------------------------------------------------------------------------------
    def install_signal_handlers(self) -> int:
        """(Re)install the host's SIGINT handler (the stop button abandons an endless kernel, see
        :mod:`aotbench.native.interrupts`) and its abort report; a syscall or two, so never per call. 1 when the SIGINT
        handler is in place, 0 when SIGINT is ignored or has its default action (left so)."""
        owner = _SIGNAL_RUNTIME if _SIGNAL_RUNTIME is not None else self
        owner.lib.aotb_set_abort_fd(interrupts.real_stderr_fd())
        grace_ms = -1 if interrupts.program_handles_sigint() else int(interrupts.GRACE_S * 1000)  # -1: abort only
        return owner.lib.aotb_install_signal_handlers(threading.main_thread().ident or 0, grace_ms)

    def set_abort_report(self, on: bool) -> None:
        """Whether an in-process abort() prints its one line (an isolated op's worker turns it off: its parent
        reports the crash)."""
        (_SIGNAL_RUNTIME if _SIGNAL_RUNTIME is not None else self).lib.aotb_set_abort_report(int(on))

    def take_abandoned(self) -> int:
        """The address of the call record the last interrupt abandoned (0 if none), forgotten once read."""
        return self.lib.aotb_take_abandoned() or 0

    def note_changes(self, code: int, function: str, owner: object = None) -> int:
        """``code`` without the state-changed bits, after warning (once per ``owner`` — the kernel's library —,
        else per function name) about what they say the kernel changed and the host restored."""
        owner = function if owner is None else owner
        if not code & STATE_CHANGED:
            return code
        report = (ctypes.c_uint64 * 7)()
        self.lib.aotb_state_report(report)
        if code & FP_CHANGED and (owner, "fp") not in self._warned:
            self._warned.add((owner, "fp"))
            warnings.warn(FloatingPointEnvWarning(
                f"{function} {fpenv.describe_call_change(*report[:4])}; aotbench restored the caller's "
                "environment after the call, so numpy and Python compute as before. Set it inside the kernel only "
                "for the code that needs it and put it back before returning (fegetenv/fesetenv). (Said once per "
                "kernel library.)"), stacklevel=user_stacklevel())
        if code & SIGNALS_CHANGED and (owner, "signals") not in self._warned:
            self._warned.add((owner, "signals"))
            warnings.warn(SignalStateWarning(
                f"{function} {fpenv.describe_signal_change(*report[4:7])}; aotbench restored the signal mask and "
                "handler after the call, so Ctrl-C and the notebook's stop button still work. Restore them inside "
                "the kernel before returning (pthread_sigmask with the saved set). (Said once per kernel library.)"),
                stacklevel=user_stacklevel())
        return code & ~STATE_CHANGED

    # -- extras ---------------------------------------------------------------------------------------
    def new_extra(self, attrs: list[TypedAttr]) -> int:
        """A new extra holding ``attrs``; an attribute the host cannot store (out of memory) raises, and the
        extra is freed."""
        extra = self.lib.aotb_extra_new()
        if not extra:
            raise MemoryError("the native host could not allocate an AotExtra")
        try:
            for a in attrs:
                code, nbytes = self._set(extra, a)
                if code != OK:
                    raise self._store_error(code, a, nbytes)
        except BaseException:
            self.lib.aotb_extra_free(extra)
            raise
        return extra

    def free_extra(self, extra: int) -> None:
        """Delete the kernel data (kernel code: its library must still be loaded) and the extra."""
        self.lib.aotb_extra_free(extra)

    def workspace_sizes(self, extra: int) -> list[int]:
        n = self.lib.aotb_extra_workspace_count(extra)
        out = (ctypes.c_uint64 * max(n, 1))()
        self.lib.aotb_extra_workspace_sizes(extra, out)
        return list(out[:n])

    def _set(self, extra: int, a: TypedAttr) -> tuple[int, int]:
        """Store one attribute: the host's outcome code and the size of the data handed over, in bytes."""
        lib, name, v = self.lib, a.name.encode(), a.value
        if a.kind is AttrKind.BOOL:
            return lib.aotb_extra_set_bool(extra, name, int(v)), 1
        if a.kind is AttrKind.INT:
            return lib.aotb_extra_set_int(extra, name, v), 8
        if a.kind is AttrKind.FLOAT:
            return lib.aotb_extra_set_float(extra, name, v), 4
        if a.kind is AttrKind.STR:
            data = v.encode()
            return lib.aotb_extra_set_str(extra, name, data, len(data)), len(data)
        if a.kind in (AttrKind.INT_VEC, AttrKind.FLOAT_VEC):
            arr = np.ascontiguousarray(v, dtype=np.int64 if a.kind is AttrKind.INT_VEC else np.float32)
            setter = lib.aotb_extra_set_int_vec if a.kind is AttrKind.INT_VEC else lib.aotb_extra_set_float_vec
            return setter(extra, name, arr.ctypes.data, arr.size), arr.nbytes
        if a.kind in (AttrKind.INT_2D, AttrKind.FLOAT_2D):
            flat = np.array([x for row in v for x in row],
                            dtype=np.int64 if a.kind is AttrKind.INT_2D else np.float32)
            lengths = np.array([len(row) for row in v], dtype=np.int64)
            setter = lib.aotb_extra_set_int_2d if a.kind is AttrKind.INT_2D else lib.aotb_extra_set_float_2d
            return setter(extra, name, flat.ctypes.data, lengths.ctypes.data, len(v)), flat.nbytes
        if a.kind is AttrKind.EMPTY_LIST:
            return lib.aotb_extra_set_empty_list(extra, name), 0
        if a.kind is AttrKind.EMPTY_ROWS:
            return lib.aotb_extra_set_empty_rows(extra, name, len(v)), 0
        raise AttrError(f"unknown attribute kind {a.kind}", name=a.name)  # pragma: no cover - TypedAttr holds these

    def _store_error(self, code: int, a: TypedAttr, nbytes: int) -> AttrError:
        """The error for an attribute the host could not store (``code``: NO_MEMORY or EXCEPTION)."""
        reason = (self.lib.aotb_error_message() or b"").decode("utf-8", "replace") or "no message: out of memory"
        if code == NO_MEMORY:
            error = AttrMemoryError(
                f"attribute {a.name!r} ({nbytes:,} bytes of {a.kind.cpp}) does not fit in memory: the native host "
                f"could not allocate its copy ({reason}). Pass data this large as an input array instead of an "
                "attribute, or free memory.", name=a.name, registered=a.kind.cpp)
            error.__cause__ = MemoryError(reason)
            return error
        return AttrError(f"the native host could not store attribute {a.name!r} ({nbytes:,} bytes of "
                         f"{a.kind.cpp}): {reason}", name=a.name, registered=a.kind.cpp)

    # -- calls ----------------------------------------------------------------------------------------
    def call_init(self, fn: int, ndims, shapes, dtypes, extra: int, *, function: str,
                  attrs: list[TypedAttr]) -> None:
        status = ctypes.c_int32(0)
        code = self.lib.aotb_call_init(fn, ndims, shapes, dtypes, extra, ctypes.byref(status))
        self.raise_for(code, function, status.value, attrs)

    def call_infer(self, fn: int, multi: bool, ndims, shapes, extra: int, *, function: str,
                   attrs: list[TypedAttr]) -> list[list[int]]:
        """The shapes ``FInferShape`` returns (one list per output)."""
        capacity = 256
        while True:
            out = np.empty(capacity, dtype=np.int64)
            needed = _c_int64(0)
            code = self.lib.aotb_call_infer(fn, int(multi), ndims, shapes, extra, out.ctypes.data, capacity,
                                            ctypes.byref(needed))
            code = self.note_changes(code, function)
            if code != TOO_SMALL:
                break
            capacity = needed.value
        self.raise_for(code, function, 0, attrs)
        result, at = [], 1
        for _ in range(int(out[0])):
            rank = int(out[at])
            result.append([int(d) for d in out[at + 1:at + 1 + rank]])
            at += 1 + rank
        return result

    def raise_for(self, code: int, function: str, status: int, attrs: list[TypedAttr], owner: object = None) -> None:
        """Raise the aotbench error for a host outcome code (nothing for ``OK``; a state-changed bit warns, once
        per ``owner``: see :meth:`note_changes`)."""
        code = self.note_changes(code, function, owner)
        if code == OK:
            return
        if code == INTERRUPTED:  # reached without a pending KeyboardInterrupt (e.g. a path without Op's handling)
            interrupts.retire_abandoned(self)
            raise interrupts.abandoned(function)
        if code == STATUS:
            raise KernelError(function, status=status if status else self.lib.aotb_error_status())
        if code == ATTR_ERROR:
            raise self._attr_error(function, attrs)
        message = (self.lib.aotb_error_message() or b"").decode("utf-8", "replace")
        raise KernelError(function, exception=message)

    def _attr_error(self, function: str, attrs: list[TypedAttr]) -> AttrError:
        name = (self.lib.aotb_error_attr_name() or b"").decode("utf-8", "replace")
        requested = AttrKind(self.lib.aotb_error_attr_requested())
        registered = AttrKind(self.lib.aotb_error_attr_registered())
        names = sorted(a.name for a in attrs)
        listing = ", ".join(names) if names else "none"
        if registered is AttrKind.MISSING:
            msg = (f"{function} read attribute {name!r} as Attr<{requested.cpp}>, but the op has no attribute "
                   f"called {name!r}. Registered attributes: {listing}. Pass it with attrs={{{name!r}: ...}} or "
                   "CustomRegOp(...).attr(...).")
        else:
            attr = next((a for a in attrs if a.name == name), None) or TypedAttr(name, registered, None)
            given = "was given with the call as" if attr.call else "is registered as"
            shown = attr_hints.as_given(attr.value)
            msg = (f"{function} read attribute {name!r} as Attr<{requested.cpp}>, but it {given} "
                   f"{registered.cpp} (value {shown!r}); there is no implicit conversion (nor in MindSpore). "
                   f"{attr_hints.advice(attr, requested)} Registered attributes: {listing}.")
        return AttrError(msg, name=name, requested=requested.cpp, registered=registered.cpp, names=names)
