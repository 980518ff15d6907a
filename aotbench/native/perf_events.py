"""Linux's performance counters (``perf_event_open``), bound with ctypes: what this machine lets a process count
about its own threads, counting events on chosen threads, and counting how often one instruction executes.

Nothing here needs privileges beyond what ``perf_event_paranoid`` 2 (the common default) grants: every counter is
opened for one thread (``pid`` = its thread id, ``cpu`` = -1, ``inherit`` = 0) and counts that thread's user space
alone (``exclude_kernel``, ``exclude_hv``) — except context switches and CPU migrations, which the scheduler raises
in kernel code and which therefore need the kernel side (level 1 or privileges). Whether even that is allowed
differs from machine to machine: a VM without a virtual PMU has no hardware counters (``ENOENT``), Docker's
default seccomp profile refuses the system call (``EPERM``), level 3 and above refuse unprivileged use where the
kernel carries the patch some distributions add (``EACCES``). :func:`probe` finds out once per process and says
why hardware counters are missing in one line a person can act on; :class:`Counters` leaves out the events that
do not open and says why in ``missing``, so callers carry on with what the machine has. :class:`ExecutionCounter` counts the executions of one instruction with a hardware execute breakpoint
(``PERF_TYPE_BREAKPOINT``, ``HW_BREAKPOINT_X``). Every hit traps into the kernel, a fixed cost per hit that
:func:`breakpoint_hit_ns` measures (about 17 us on the VM aotbench is developed on): a caller counting a hot loop's
iterations must budget for it. The system call's number is known for x86_64 and aarch64; elsewhere, and on
systems other than Linux, everything is unavailable with that reason. Layer 0: imports only the standard library
(ctypes included) and :mod:`aotbench.errors`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import fcntl
import functools
import os
import platform
import struct
import sys
import threading
import time
import weakref
from collections.abc import Iterable

from ..errors import ArgumentTypeError, ArgumentValueError, ToolFailedError

__all__ = ["HARDWARE_EVENTS", "SOFTWARE_EVENTS", "Counters", "ExecutionCounter", "Support", "all_threads",
           "breakpoint_hit_ns", "paranoid_level", "probe"]

# -- the kernel's interface (include/uapi/linux/perf_event.h) ----------------------------------------------------
_SYSCALL_NUMBERS = {"x86_64": 298, "amd64": 298, "aarch64": 241, "arm64": 241}

_TYPE_HARDWARE, _TYPE_SOFTWARE, _TYPE_BREAKPOINT, _HW_BREAKPOINT_X = 0, 1, 5, 4  # the last: bp_type "execute"
_FORMAT_TOTAL_TIME_ENABLED, _FORMAT_TOTAL_TIME_RUNNING = 1, 2
_FLAG_FD_CLOEXEC = 8
# _IO('$', n): the same numbers on x86_64 and aarch64 (no direction or size bits)
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403
# bits of the attribute's flags word
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6

#: The hardware events :class:`Counters` knows, by perf's names (counts of the thread's user-space work).
HARDWARE_EVENTS = ("cycles", "instructions", "cache-references", "cache-misses", "branch-instructions",
                   "branch-misses")
#: The software events :class:`Counters` knows: ``task-clock`` is the thread's time on a CPU in nanoseconds (in a
#: VM it can exceed ``time.thread_time_ns()``: the kernel leaves time stolen by the hypervisor out of the thread's
#: CPU time, not out of task-clock), the others are counts.
SOFTWARE_EVENTS = ("task-clock", "page-faults", "context-switches", "cpu-migrations")

_EVENTS = {**{name: (_TYPE_HARDWARE, config) for config, name in enumerate(HARDWARE_EVENTS)},
           "task-clock": (_TYPE_SOFTWARE, 1), "page-faults": (_TYPE_SOFTWARE, 2),
           "context-switches": (_TYPE_SOFTWARE, 3), "cpu-migrations": (_TYPE_SOFTWARE, 4)}

# raised in kernel code: a user-space-only counter of them reads 0 for ever, so they count the kernel side too
_KERNEL_SIDE_EVENTS = frozenset({"context-switches", "cpu-migrations"})


class _Attr(ctypes.Structure):
    """``struct perf_event_attr`` up to ``PERF_ATTR_SIZE_VER5`` (112 bytes), the fields' C types by their size."""

    _fields_ = [(name, {"u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "s32": ctypes.c_int32,
                        "u64": ctypes.c_uint64}[kind]) for name, kind in (item.split(":") for item in (
        "type:u32 size:u32 config:u64 sample_period:u64 sample_type:u64 read_format:u64 flags:u64 "
        "wakeup_events:u32 bp_type:u32 bp_addr:u64 bp_len:u64 branch_sample_type:u64 sample_regs_user:u64 "
        "sample_stack_user:u32 clockid:s32 sample_regs_intr:u64 aux_watermark:u32 sample_max_stack:u16 "
        "reserved_2:u16").split())]


def _unsupported_platform() -> str:
    """Why perf_event_open cannot be called from here at all; "" when it can be tried."""
    if not sys.platform.startswith("linux"):
        return f"perf_event_open is a Linux system call, and this is {sys.platform}"
    machine = platform.machine().lower()
    if machine not in _SYSCALL_NUMBERS or ctypes.sizeof(ctypes.c_void_p) != 8:
        return (f"aotbench knows perf_event_open's system call number for 64-bit x86_64 and aarch64 only, "
                f"not for {platform.machine() or 'this machine'} ({8 * ctypes.sizeof(ctypes.c_void_p)}-bit Python)")
    return ""


@functools.lru_cache(maxsize=None)
def _syscall():
    function = ctypes.CDLL(None, use_errno=True).syscall
    function.restype = ctypes.c_long  # (number, attr, pid, cpu, group_fd, flags); longs, as syscall() reads them
    function.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_ulong]
    return function, _SYSCALL_NUMBERS[platform.machine().lower()]


def _open(kind: int, config: int, tid: int, *, kernel: bool = False, bp_addr: int = 0) -> int:
    """One disabled counter of the thread ``tid`` (0: the calling thread); its fd, or ``-errno`` when refused."""
    attr = _Attr()
    attr.type, attr.size, attr.config = kind, ctypes.sizeof(_Attr), config
    attr.read_format = _FORMAT_TOTAL_TIME_ENABLED | _FORMAT_TOTAL_TIME_RUNNING
    attr.flags = _DISABLED | _EXCLUDE_HV | (0 if kernel else _EXCLUDE_KERNEL)
    if kind == _TYPE_BREAKPOINT:
        attr.bp_type, attr.bp_addr, attr.bp_len = _HW_BREAKPOINT_X, bp_addr, ctypes.sizeof(ctypes.c_long)
    function, number = _syscall()
    fd = function(number, ctypes.byref(attr), tid, -1, -1, _FLAG_FD_CLOEXEC)
    return fd if fd >= 0 else -(ctypes.get_errno() or errno.EIO)


def _read(fd: int) -> tuple[int, int, int]:
    """(count, time enabled, time running) of one counter."""
    return struct.unpack("=QQQ", os.read(fd, 24))


def _scaled(count: int, enabled: int, running: int) -> float:
    """The count extrapolated over the time the counter was enabled (the kernel multiplexes counters when there
    are more than the PMU has); NaN when it was enabled but never got a counter."""
    return float(count) if running >= enabled else float("nan") if running == 0 else count * (enabled / running)


def _close_all(fds: list[int]) -> None:
    while fds:
        try:
            os.close(fds.pop())
        except OSError:
            pass


# -- what the machine allows -------------------------------------------------------------------------------------
def paranoid_level() -> int | None:
    """``/proc/sys/kernel/perf_event_paranoid``, or None where it cannot be read (no perf events in the kernel,
    or not Linux)."""
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None


def _paranoid_meaning(level: int | None) -> str:
    if level is None:
        return "perf_event_paranoid cannot be read"
    allows = ("refuses perf_event_open to unprivileged processes (sysctl kernel.perf_event_paranoid=2 allows "
              "counting a process's own user space)" if level >= 3 else
              "allows counting a process's own user space only" if level == 2 else
              "allows counting a process's own user space and kernel" if level == 1 else
              "allows CPU-wide counting too")
    return f"perf_event_paranoid is {level}, which {allows}"


def _why(code: int, event: str, *, level: int | None, hardware_absent: bool = True) -> str:
    """One line: why ``event`` did not open, from the errno the kernel gave."""
    name = errno.errorcode.get(code, str(code))
    if code in (errno.ENOENT, errno.EOPNOTSUPP) and _EVENTS.get(event, (None,))[0] == _TYPE_HARDWARE:
        if hardware_absent:
            return "this machine exposes no hardware counters (a VM without a virtual PMU)"
        return f"this CPU's performance counters offer no {event} event ({name})"
    if code in (errno.EACCES, errno.EPERM):
        if level is not None and level >= 3:
            return _paranoid_meaning(level)
        if code == errno.EPERM:  # the kernel refuses a user-space counter of its own threads with EACCES
            return ("a seccomp filter (Docker's default profile) refuses perf_event_open "
                    "(docker run --security-opt seccomp=unconfined lets it through)")
        if event in _KERNEL_SIDE_EVENTS:
            return (f"{event} are counted in the kernel's scheduler, and {_paranoid_meaning(level)} "
                    f"(sysctl kernel.perf_event_paranoid=1 allows it)")
        return f"the kernel's security policy refuses perf_event_open for {event} ({name}; {_paranoid_meaning(level)})"
    if code == errno.ENOSYS:
        return "this kernel has no perf_event_open (built without perf events, or a sandbox that lacks it)"
    if code == errno.ENOSPC:
        return f"no free slot for {event}: every hardware breakpoint or counter of this thread is in use (ENOSPC)"
    if code == errno.ENODEV:
        return f"this machine has no performance-monitoring unit for {event} (ENODEV)"
    return f"perf_event_open refused {event}: {os.strerror(code)} ({name})"


@dataclasses.dataclass(frozen=True)
class Support:
    """What ``perf_event_open`` opens on this machine, for the calling thread's user space (:func:`probe`)."""

    #: Hardware counters (cycles, instructions, cache and branch events).
    hardware: bool
    #: Software events (task-clock, page faults).
    software: bool
    #: Execute breakpoints (:class:`ExecutionCounter`).
    breakpoints: bool
    #: Why hardware counters are missing, in one line (which setting or environment, and the fix where there is
    #: one); "" when they open. The next two say the same of software events and execute breakpoints.
    reason: str
    software_reason: str = ""
    breakpoint_reason: str = ""
    #: ``/proc/sys/kernel/perf_event_paranoid`` when probed (None: unreadable).
    paranoid: int | None = None


@functools.lru_cache(maxsize=None)
def probe() -> Support:
    """What this process may count, found once per process by opening (disabled) and closing, for the calling
    thread's user space: ``cycles`` (hardware), ``task-clock`` (software) and an execute breakpoint on libc's
    ``getpid``."""
    level = paranoid_level()
    unsupported = _unsupported_platform()
    if unsupported:
        return Support(False, False, False, unsupported, unsupported, unsupported, level)
    getpid = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value
    reasons = []
    for kind, config, event in ((_TYPE_HARDWARE, 0, "cycles"), (_TYPE_SOFTWARE, 1, "task-clock"),
                                (_TYPE_BREAKPOINT, 0, "an execute breakpoint")):
        fd = _open(kind, config, 0, bp_addr=getpid)
        if fd >= 0:
            os.close(fd)
        reasons.append("" if fd >= 0 else _why(-fd, event, level=level))
    hardware, software, breakpoints = reasons
    return Support(not hardware, not software, not breakpoints, hardware, software, breakpoints, level)


def all_threads() -> list[int]:
    """The ids of this process's threads now (``/proc/self/task``), as :class:`Counters` takes them. A counter
    opened for them misses threads started later (an OpenMP pool's start at its first parallel region)."""
    return sorted(int(name) for name in os.listdir("/proc/self/task"))


def _thread_ids(tids) -> list[int]:
    if isinstance(tids, int) and not isinstance(tids, bool):
        tids = [tids]
    if not isinstance(tids, Iterable) or isinstance(tids, (str, bytes)):
        raise ArgumentTypeError(f"tids must be a thread id or an iterable of them (threading.get_native_id(), "
                                f"perf_events.all_threads()), not {type(tids).__name__}")
    out = []
    for tid in tids:
        if isinstance(tid, bool) or not isinstance(tid, int) or tid <= 0:
            raise ArgumentValueError(f"a thread id is a positive int (threading.get_native_id()), not {tid!r}")
        if tid not in out:
            out.append(tid)
    if not out:
        raise ArgumentValueError("tids is empty: name at least one thread (threading.get_native_id())")
    return out


def _no_thread(tid: int) -> ArgumentValueError:
    return ArgumentValueError(f"there is no thread {tid} (it has exited, or was never a thread id): pass live "
                              f"threads' ids (threading.get_native_id(), perf_events.all_threads())")


class _Group:
    """The fds of one or more counters, enabled and disabled together and always closed (also when the owner is
    collected without :meth:`close`)."""

    def __init__(self):
        self._fds: list[int] = []
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    def _ioctl_all(self, request: int) -> None:
        self._check_open()
        for fd in self._fds:
            fcntl.ioctl(fd, request, 0)

    def _check_open(self) -> None:
        if self.closed:
            raise ArgumentValueError(f"this {type(self).__name__} is closed: open a new one")

    def start(self, reset: bool = True) -> None:
        """Start counting (from zero unless ``reset=False``, which adds to the counts so far)."""
        if reset:
            self._ioctl_all(_IOC_RESET)
        self._ioctl_all(_IOC_ENABLE)

    def stop(self) -> None:
        """Stop counting; :meth:`read` keeps giving the counts so far."""
        self._ioctl_all(_IOC_DISABLE)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Close every fd (idempotent)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Counters(_Group):
    """Counts ``events`` (names from :data:`HARDWARE_EVENTS` and :data:`SOFTWARE_EVENTS`; default all of them) on
    each thread of ``tids`` (not threads started later), one counter per event per thread, user space only but for
    the two scheduler events (see the module). An event that does not open on every thread is left out and named in
    ``missing`` with why. Opened stopped: :meth:`start`, :meth:`stop`, :meth:`read`, :meth:`close` (or a ``with``)."""

    def __init__(self, tids, events: Iterable[str] | None = None):
        super().__init__()
        self.tids = _thread_ids(tids)
        names = list(HARDWARE_EVENTS + SOFTWARE_EVENTS) if events is None else \
            [events] if isinstance(events, str) else list(events)
        unknown = [name for name in names if name not in _EVENTS]
        if unknown:
            raise ArgumentValueError(f"unknown event {unknown[0]!r}: the events are "
                                     f"{', '.join(HARDWARE_EVENTS + SOFTWARE_EVENTS)}")
        #: The events that did not open, with why (one line each).
        self.missing: dict[str, str] = {}
        self._by_event: dict[str, list[tuple[int, int]]] = {}  # event -> [(tid, fd)]
        unsupported = _unsupported_platform()
        level = paranoid_level()
        try:
            for event in dict.fromkeys(names):
                if unsupported:
                    self.missing[event] = unsupported
                    continue
                kind, config = _EVENTS[event]
                opened: list[tuple[int, int]] = []
                for tid in self.tids:
                    fd = _open(kind, config, tid, kernel=event in _KERNEL_SIDE_EVENTS)
                    if fd == -errno.ESRCH:
                        raise _no_thread(tid)
                    if fd < 0:
                        self.missing[event] = _why(-fd, event, level=level,
                                                   hardware_absent=kind != _TYPE_HARDWARE or not probe().hardware)
                        closed = [fd for _, fd in opened]  # here, and never again by close(): another file's by then
                        self._fds[:] = [fd for fd in self._fds if fd not in closed]
                        _close_all(closed)
                        break
                    opened.append((tid, fd))
                    self._fds.append(fd)
                else:
                    self._by_event[event] = opened
        except BaseException:
            self.close()
            raise

    @property
    def events(self) -> list[str]:
        """The events being counted (those that opened), in the order asked."""
        return list(self._by_event)

    def read_threads(self) -> dict[int, dict[str, float]]:
        """The counts of each thread: tid -> event -> count (scaled as :meth:`read` says)."""
        self._check_open()
        out: dict[int, dict[str, float]] = {tid: {} for tid in self.tids}
        for event, opened in self._by_event.items():
            for tid, fd in opened:
                out[tid][event] = _scaled(*_read(fd))
        return out

    def read(self) -> dict[str, float]:
        """Each counted event's total over the threads (``task-clock`` in nanoseconds, the others counts). When
        the kernel shared the hardware counters out among more events than it has, each thread's count is scaled
        by time enabled / time running (an estimate); NaN for a thread's event that never got a counter."""
        per_thread = self.read_threads().values()
        return {event: sum(counts[event] for counts in per_thread) for event in self._by_event}

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{', '.join(self.events) or 'no events'}"
        return f"<Counters of {len(self.tids)} thread(s): {state}; missing {sorted(self.missing) or 'none'}>"


def _address_of(address) -> int:
    if isinstance(address, ctypes._CFuncPtr):
        address = ctypes.cast(address, ctypes.c_void_p).value
    if isinstance(address, bool) or not isinstance(address, int):
        raise ArgumentTypeError(f"address must be an int (an instruction's address in this process) or a ctypes "
                                f"function, not {type(address).__name__}")
    if address <= 0:
        raise ArgumentValueError(f"address must be a positive instruction address, not {address:#x}")
    return address


class ExecutionCounter(_Group):
    """Counts how many times the instruction at ``address`` (an int, or a ctypes function: its first instruction)
    executes in the threads ``tids``, with one execute breakpoint per thread. Every hit costs a trap
    (:func:`breakpoint_hit_ns`), so count only what the budget allows. Opened stopped: :meth:`start`,
    :meth:`stop`, :meth:`read`, :meth:`close` (or use it as a context manager). Raises
    :class:`~aotbench.errors.ToolFailedError` where breakpoints do not open (``probe().breakpoint_reason``)."""

    def __init__(self, address, tids):
        super().__init__()
        self.address = _address_of(address)
        self.tids = _thread_ids(tids)
        self._opened: list[tuple[int, int]] = []
        unsupported = _unsupported_platform()
        if unsupported:
            raise ToolFailedError(f"cannot count executions: {unsupported}", tool="perf_event_open")
        level = paranoid_level()
        try:
            for tid in self.tids:
                fd = _open(_TYPE_BREAKPOINT, 0, tid, bp_addr=self.address)
                if fd == -errno.ESRCH:
                    raise _no_thread(tid)
                if fd == -errno.EINVAL:
                    raise ArgumentValueError(f"the kernel refuses an execute breakpoint at {self.address:#x} "
                                             f"(EINVAL): it must be the address of an instruction in user space")
                if fd < 0:
                    raise ToolFailedError(f"cannot count executions at {self.address:#x} in thread {tid}: "
                                          f"{_why(-fd, 'an execute breakpoint', level=level)}",
                                          tool="perf_event_open")
                self._fds.append(fd)
                self._opened.append((tid, fd))
        except BaseException:
            self.close()
            raise

    def read_threads(self) -> dict[int, int]:
        """The executions in each thread: tid -> count."""
        self._check_open()
        return {tid: _read(fd)[0] for tid, fd in self._opened}

    def read(self) -> int:
        """The executions counted so far, over all the threads (exact: the kernel reserves a debug register for each
        breakpoint when it opens, ENOSPC when none is free, so breakpoints are not multiplexed)."""
        return sum(self.read_threads().values())

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.tids)} thread(s)"
        return f"<ExecutionCounter at {self.address:#x}: {state}>"


@functools.lru_cache(maxsize=None)
def breakpoint_hit_ns() -> float:
    """What one execute-breakpoint hit adds to the code it counts, in nanoseconds: measured once per process by
    calling libc's ``labs`` through ctypes with and without a breakpoint on it (the best of a few rounds of a few
    hundred calls each). Raises :class:`~aotbench.errors.ToolFailedError` where breakpoints do not open."""
    support = probe()
    if not support.breakpoints:
        raise ToolFailedError(f"cannot measure a breakpoint's cost: {support.breakpoint_reason}",
                              tool="perf_event_open")
    labs = ctypes.CDLL(None).labs
    labs.restype, labs.argtypes = ctypes.c_long, [ctypes.c_long]
    calls, rounds = 256, 5

    def timed() -> int:
        begin = time.perf_counter_ns()
        for value in range(calls):
            labs(value)
        return time.perf_counter_ns() - begin

    plain, trapped = [], []
    with ExecutionCounter(labs, threading.get_native_id()) as counter:
        for _ in range(rounds):
            plain.append(timed())
            counter.start()
            trapped.append(timed())
            counter.stop()
            hits = counter.read()
            if hits != calls:
                raise ToolFailedError(f"an execute breakpoint on labs counted {hits} of {calls} calls: this "
                                      f"kernel's breakpoints do not count reliably", tool="perf_event_open")
    return max(min(trapped) - min(plain), 0) / calls
