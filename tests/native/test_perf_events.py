"""``aotbench.native.perf_events``: the probe tells the truth about this machine, software counters count the
threads they are given and no others, an execute breakpoint counts every call of a function exactly, and no file
descriptor outlives a counter. Tests that need something this machine lacks skip, naming what."""

from __future__ import annotations

import ctypes
import errno
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from aotbench.errors import ArgumentTypeError, ArgumentValueError, ToolFailedError
from aotbench.native import perf_events
from aotbench.native.perf_events import Counters, ExecutionCounter

ROOT = Path(__file__).resolve().parents[2]
VM_REASON = "this machine exposes no hardware counters (a VM without a virtual PMU)"
MIB = 1 << 20

# Hardware breakpoints armed in-process ended CI's test process with a stray SIGTRAP (a VM's debug registers):
# these tests run only where asked for.
BREAKPOINT_TESTS = os.environ.get("AOTBENCH_BREAKPOINTS") == "1"
pytestmark = pytest.mark.skipif(not BREAKPOINT_TESTS, reason="AOTBENCH_BREAKPOINTS=1 runs the perf_event tests")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def need(flag: str):
    support = perf_events.probe()
    if not getattr(support, flag):
        reason = support.software_reason if flag == "software" else support.breakpoint_reason
        pytest.skip(f"perf_event_open gives no {flag} events here: {reason}")


def labs_function():
    labs = ctypes.CDLL(None).labs
    labs.restype, labs.argtypes = ctypes.c_long, [ctypes.c_long]
    return labs


def numpy_work(rng, n: int) -> float:
    """Single-threaded CPU work (numpy's sort and ufuncs use the calling thread only)."""
    x = rng.random(n)
    x.sort()
    return float(np.sqrt(x).sum())


class Worker:
    """A thread that runs the jobs it is handed, one at a time, so a test can count it from outside."""

    def __init__(self):
        self.tid = None
        self._jobs: list = []
        self._ready = threading.Event()
        self._wake = threading.Condition()
        self.results: list = []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        self._ready.wait(10)

    def _loop(self):
        self.tid = threading.get_native_id()
        self._ready.set()
        while True:
            with self._wake:
                while not self._jobs:
                    self._wake.wait()
                job = self._jobs.pop(0)
            if job is None:
                return
            self.results.append(job())

    def run(self, job):
        """Run ``job`` on the worker and wait for its result."""
        count = len(self.results)
        with self._wake:
            self._jobs.append(job)
            self._wake.notify()
        deadline = time.monotonic() + 60
        while len(self.results) == count:
            assert time.monotonic() < deadline, "the worker thread did not finish its job"
            time.sleep(0.001)
        return self.results[-1]

    def stop(self):
        with self._wake:
            self._jobs.append(None)
            self._wake.notify()
        self.thread.join(10)


@pytest.fixture
def worker():
    thread = Worker()
    yield thread
    thread.stop()


def test_the_attribute_struct_has_the_kernels_layout():
    attr = perf_events._Attr
    assert ctypes.sizeof(attr) == 112  # PERF_ATTR_SIZE_VER5
    offsets = {name: getattr(attr, name).offset for name in ("config", "read_format", "flags", "bp_type", "bp_addr",
                                                              "bp_len", "clockid", "sample_max_stack")}
    assert offsets == {"config": 8, "read_format": 32, "flags": 40, "bp_type": 52, "bp_addr": 56, "bp_len": 64,
                       "clockid": 92, "sample_max_stack": 108}


def test_multiplexed_counts_are_scaled(rng):
    count, running = (int(k) for k in rng.integers(1, 10**6, 2))
    assert perf_events._scaled(count, running, running) == count
    assert perf_events._scaled(count, 3 * running, running) == pytest.approx(3 * count)
    assert perf_events._scaled(0, 0, 0) == 0.0  # a thread that never ran while enabled
    assert np.isnan(perf_events._scaled(count, running, 0))  # enabled, but never on a counter


# -- the probe ---------------------------------------------------------------------------------------------------
def test_probe_is_cached_and_one_line_per_reason():
    support = perf_events.probe()
    assert perf_events.probe() is support
    for flag, reason in ((support.hardware, support.reason), (support.software, support.software_reason),
                         (support.breakpoints, support.breakpoint_reason)):
        assert (reason == "") == flag
        assert "\n" not in reason


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the PMU's sysfs name checked here is x86's")
def test_probe_names_a_missing_pmu():
    """No ``cpu`` PMU under /sys/bus/event_source (a VM without a virtual PMU, like this one): hardware counters
    are missing with the VM reason; with one, they open unless a setting refuses them."""
    support = perf_events.probe()
    devices = os.listdir("/sys/bus/event_source/devices")
    if not support.software:
        pytest.skip(f"perf_event_open is refused altogether here: {support.software_reason}")
    if any(name.startswith("cpu") for name in devices):
        assert support.hardware or "paranoid" in support.reason or "seccomp" in support.reason, support.reason
    else:
        assert not support.hardware
        assert support.reason == VM_REASON


def test_probe_agrees_with_counters_and_breakpoints():
    support = perf_events.probe()
    tid = threading.get_native_id()
    with Counters(tid, ["cycles", "task-clock"]) as counters:
        assert ("cycles" in counters.events) == support.hardware
        assert ("task-clock" in counters.events) == support.software
        if not support.hardware:
            assert counters.missing["cycles"] == support.reason
    if support.breakpoints:
        ExecutionCounter(labs_function(), tid).close()
    else:
        with pytest.raises(ToolFailedError, match="execut"):
            ExecutionCounter(labs_function(), tid)


def test_reasons_name_the_setting_and_the_fix():
    why = perf_events._why
    assert "seccomp" in why(errno.EPERM, "cycles", level=2) and "Docker" in why(errno.EPERM, "cycles", level=2)
    assert "perf_event_paranoid is 3" in why(errno.EACCES, "cycles", level=3)
    assert "perf_event_paranoid=2" in why(errno.EACCES, "task-clock", level=4)
    assert "paranoid is 2" in why(errno.EACCES, "context-switches", level=2)
    assert why(errno.ENOENT, "cycles", level=2) == VM_REASON
    assert why(errno.EOPNOTSUPP, "branch-misses", level=2) == VM_REASON
    assert "offer no cache-misses" in why(errno.ENOENT, "cache-misses", level=2, hardware_absent=False)
    assert "no perf_event_open" in why(errno.ENOSYS, "cycles", level=None)
    assert "EBADF" in why(errno.EBADF, "task-clock", level=2)


def test_an_unknown_machine_is_unavailable_with_a_reason(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    support = perf_events.probe.__wrapped__()
    assert not (support.hardware or support.software or support.breakpoints)
    assert "riscv64" in support.reason and "x86_64" in support.reason
    with Counters(threading.get_native_id(), ["task-clock"]) as counters:
        assert counters.events == [] and "riscv64" in counters.missing["task-clock"]
        assert counters.read() == {}
    with pytest.raises(ToolFailedError, match="riscv64"):
        ExecutionCounter(labs_function(), threading.get_native_id())


SECCOMP_CHILD = r"""
import ctypes, json, sys
from aotbench.native import perf_events
number = perf_events._SYSCALL_NUMBERS[__import__("platform").machine().lower()]

class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

# like Docker's default profile: perf_event_open fails with EPERM, every other call is allowed
rules = (Filter * 4)(Filter(0x20, 0, 0, 0), Filter(0x15, 0, 1, number), Filter(0x06, 0, 0, 0x00050000 | 1),
                     Filter(0x06, 0, 0, 0x7FFF0000))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0, ctypes.get_errno()  # PR_SET_NO_NEW_PRIVS
program = Program(4, rules)
assert libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, FILTER
support = perf_events.probe()
counters = perf_events.Counters(__import__("threading").get_native_id(), ["task-clock"])
print(json.dumps({"support": support.__dict__, "missing": counters.missing}))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="needs perf_event_open's number")
def test_a_seccomp_filter_is_named():
    """A child refuses itself perf_event_open the way Docker's default profile does; the probe says so."""
    out = subprocess.run([sys.executable, "-c", SECCOMP_CHILD], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    support = report["support"]
    assert not (support["hardware"] or support["software"] or support["breakpoints"])
    level = perf_events.paranoid_level()
    if level is not None and level >= 3:
        assert "paranoid" in support["reason"]
    else:
        assert "seccomp filter (Docker's default profile)" in support["reason"]
        assert support["reason"] == support["software_reason"] == report["missing"]["task-clock"]


UNPRIVILEGED_CHILD = r"""
import json, threading
from aotbench.native import perf_events
with perf_events.Counters(threading.get_native_id(), ["task-clock", "context-switches"]) as counters:
    print(json.dumps({"events": counters.events, "missing": counters.missing}))
"""


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to run a child without privileges")
def test_kernel_side_events_follow_perf_event_paranoid():
    """Context switches are counted in the kernel, so an unprivileged process gets them only where
    perf_event_paranoid allows kernel counting (1 or less); the reason says which setting refused them."""
    need("software")
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                          sys.executable, "-c", UNPRIVILEGED_CHILD], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if out.returncode != 0 and "Permission denied" in out.stderr:
        pytest.skip(f"the unprivileged child cannot run here: {out.stderr.strip()[-200:]}")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    level = perf_events.paranoid_level()
    if level is not None and level <= 1:
        assert report["events"] == ["task-clock", "context-switches"]
    elif level == 2:
        assert report["events"] == ["task-clock"]
        assert "perf_event_paranoid is 2" in report["missing"]["context-switches"]
    else:
        assert "paranoid" in report["missing"]["task-clock"]


# -- software counters -------------------------------------------------------------------------------------------
def test_task_clock_and_page_faults_of_the_calling_thread(rng):
    need("software")
    with Counters(threading.get_native_id(), perf_events.SOFTWARE_EVENTS) as counters:
        assert counters.events[:2] == ["task-clock", "page-faults"]
        nbytes = int(rng.integers(33, 49)) * MIB  # above glibc's largest mmap threshold: fresh pages
        wall = time.perf_counter_ns()
        counters.start()
        begin = time.thread_time_ns()
        numpy_work(rng, int(rng.integers(600_000, 1_200_000)))
        fresh = np.empty(nbytes // 8)
        fresh.fill(rng.random())
        cpu_ns = time.thread_time_ns() - begin
        counters.stop()
        wall = time.perf_counter_ns() - wall
        counts = counters.read()
        assert counts == counters.read()  # stopped: nothing more is counted
    # at least the thread's CPU time (task-clock also has the time a hypervisor stole), at most the time that passed
    assert 0.9 * cpu_ns <= counts["task-clock"] <= wall, (counts, cpu_ns, wall)
    assert counts["page-faults"] > 0


def test_counters_count_another_thread_and_only_it(rng, worker):
    need("software")
    nbytes = int(rng.integers(33, 49)) * MIB
    n = int(rng.integers(600_000, 1_200_000))
    seed = int(rng.integers(2**32))

    def job():
        begin = time.thread_time_ns()
        numpy_work(np.random.default_rng(seed), n)
        np.empty(nbytes // 8).fill(1.0)
        return time.thread_time_ns() - begin

    with Counters(worker.tid, ["task-clock", "page-faults"]) as theirs, \
            Counters(threading.get_native_id(), ["task-clock", "page-faults"]) as ours:
        wall = time.perf_counter_ns()
        theirs.start()
        ours.start()
        cpu_ns = worker.run(job)
        ours.stop()
        theirs.stop()
        wall = time.perf_counter_ns() - wall
        counted, mine = theirs.read(), ours.read()
        assert theirs.read_threads() == {worker.tid: counted}
    assert 0.9 * cpu_ns <= counted["task-clock"] <= wall, (counted, cpu_ns, wall)
    assert counted["page-faults"] > 0
    assert mine["task-clock"] < 0.5 * counted["task-clock"]  # the main thread waited in sleeps meanwhile
    assert mine["page-faults"] < counted["page-faults"]


def test_counts_sum_over_threads_and_restart_from_zero(rng, worker):
    need("software")
    tids = [threading.get_native_id(), worker.tid]
    with Counters(tids + [worker.tid], ["task-clock"]) as counters:
        assert counters.tids == tids  # duplicates counted once
        counters.start()
        worker.run(lambda: numpy_work(rng, 300_000))
        numpy_work(rng, 300_000)
        counters.stop()
        per_thread = counters.read_threads()
        assert set(per_thread) == set(tids)
        assert all(counts["task-clock"] > 0 for counts in per_thread.values())
        total = counters.read()["task-clock"]
        assert total == sum(counts["task-clock"] for counts in per_thread.values())
        counters.start(reset=False)  # adds to the counts so far
        numpy_work(rng, 300_000)
        counters.stop()
        more = counters.read()["task-clock"]
        assert more > total
        counters.start()  # from zero again
        counters.stop()
        assert counters.read()["task-clock"] < more


def test_context_switches_when_they_open():
    need("software")
    with Counters(threading.get_native_id(), ["context-switches"]) as counters:
        if not counters.events:
            assert "paranoid" in counters.missing["context-switches"] or \
                   "seccomp" in counters.missing["context-switches"]
            pytest.skip(counters.missing["context-switches"])
        sleeps = 20
        counters.start()
        for _ in range(sleeps):
            time.sleep(0.001)
        counters.stop()
        assert counters.read()["context-switches"] >= sleeps  # each sleep gives the CPU up once at least


# -- execution counts --------------------------------------------------------------------------------------------
def test_a_breakpoint_counts_every_call(rng):
    need("breakpoints")
    labs = labs_function()
    address = ctypes.cast(labs, ctypes.c_void_p).value
    with ExecutionCounter(address, threading.get_native_id()) as counter:
        assert counter.read() == 0  # opened stopped
        labs(1)
        assert counter.read() == 0
        for _ in range(3):
            calls = int(rng.integers(1, 300))
            counter.start()
            for value in rng.integers(-1000, 1000, calls).tolist():
                assert labs(value) == abs(value)
            counter.stop()
            labs(2)  # not counted: stopped
            assert counter.read() == calls


def test_a_breakpoint_counts_the_threads_it_is_given(rng, worker):
    need("breakpoints")
    labs = labs_function()
    ours, theirs = (int(k) for k in rng.integers(1, 200, 2))

    def call(times):
        for value in range(times):
            labs(value)

    with ExecutionCounter(labs, worker.tid) as only_theirs, \
            ExecutionCounter(labs, [threading.get_native_id(), worker.tid]) as both:
        only_theirs.start()
        both.start()
        worker.run(lambda: call(theirs))
        call(ours)
        both.stop()
        only_theirs.stop()
        assert only_theirs.read() == theirs
        assert both.read() == ours + theirs
        assert both.read_threads() == {threading.get_native_id(): ours, worker.tid: theirs}


def test_breakpoint_hit_cost_is_measured_once():
    need("breakpoints")
    hit_ns = perf_events.breakpoint_hit_ns()
    assert hit_ns > 0 and hit_ns == perf_events.breakpoint_hit_ns()
    labs, calls, slowest = labs_function(), 200, 0
    with ExecutionCounter(labs, threading.get_native_id()) as counter:
        for _ in range(3):  # noise only lengthens a run: the slowest of three is the fairest lower bound
            counter.start()
            begin = time.perf_counter_ns()
            for value in range(calls):
                labs(value)
            slowest = max(slowest, time.perf_counter_ns() - begin)
            counter.stop()
    assert slowest >= 0.3 * calls * hit_ns  # every hit costs about that much again


# -- arguments and file descriptors ------------------------------------------------------------------------------
def test_bad_arguments_are_refused_before_anything_opens():
    before = open_fds()
    tid = threading.get_native_id()
    with pytest.raises(ArgumentValueError, match="unknown event 'cycle'.*task-clock"):
        Counters(tid, ["task-clock", "cycle"])
    with pytest.raises(ArgumentValueError, match="empty"):
        Counters([], ["task-clock"])
    with pytest.raises(ArgumentTypeError, match="tids"):
        Counters("main", ["task-clock"])
    with pytest.raises(ArgumentValueError, match="thread id"):
        Counters([tid, -3], ["task-clock"])
    with pytest.raises(ArgumentTypeError, match="address"):
        ExecutionCounter("labs", tid)
    with pytest.raises(ArgumentValueError, match="address"):
        ExecutionCounter(0, tid)
    assert open_fds() == before


def test_closing_releases_every_fd(worker):
    need("software")
    tids = [threading.get_native_id(), worker.tid]
    before = open_fds()
    counters = Counters(tids)
    assert open_fds() == before + len(counters.events) * len(tids)
    counters.close()
    counters.close()  # idempotent
    assert open_fds() == before and counters.closed
    with pytest.raises(ArgumentValueError, match="closed"):
        counters.read()
    with pytest.raises(ArgumentValueError, match="closed"):
        counters.start()
    with Counters(tids, ["task-clock"]):
        assert open_fds() == before + len(tids)
    assert open_fds() == before
    Counters(tids, ["task-clock"])  # dropped without close
    gc.collect()
    assert open_fds() == before
    if perf_events.probe().breakpoints:
        with ExecutionCounter(labs_function(), tids) as counter:
            assert open_fds() == before + len(tids)
        assert open_fds() == before and counter.closed


def test_a_thread_that_is_gone_is_refused_without_leaking():
    need("software")
    gone = []
    thread = threading.Thread(target=lambda: gone.append(threading.get_native_id()))
    thread.start()
    thread.join()  # returns once Python is done with the thread, a moment before the OS thread ends
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/self/task/{gone[0]}") and time.monotonic() < deadline:
        time.sleep(0.001)
    if os.path.exists(f"/proc/self/task/{gone[0]}"):
        pytest.skip("the exited thread's id was taken again at once")
    before = open_fds()
    with pytest.raises(ArgumentValueError, match=f"no thread {gone[0]}"):
        Counters([threading.get_native_id(), gone[0]], ["task-clock", "page-faults"])
    if perf_events.probe().breakpoints:
        with pytest.raises(ArgumentValueError, match=f"no thread {gone[0]}"):
            ExecutionCounter(labs_function(), [threading.get_native_id(), gone[0]])
    assert open_fds() == before


def test_all_threads_lists_live_threads(worker):
    tids = perf_events.all_threads()
    assert threading.get_native_id() in tids and worker.tid in tids
