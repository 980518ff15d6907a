"""op.profile where it is easy to get wrong: Ctrl-C at the worst moment, a fork during a profile, kernels that fail,
take seconds per call or almost nothing, prebuilt and changed sources, other busy Python threads, threads started
per call, a full sample buffer, more busy threads than the sampler takes, and a profile that fails under
``%%aot_kernel --profile``."""

from __future__ import annotations

import ctypes
import os
import warnings
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.errors import AotbenchError, AotbenchWarning, KernelError
from aotbench.native.runtime import process_runtime
from aotbench.run import profiling
from aotbench.run.profiling import Location, RawProfile
from aotbench.tools import profile as profile_tool

# x[0]: seconds each call spins; x[1] > 0: the call with that number (counted per library load) returns 7.
# y[1] is the number of calls so far, so a test can count what a profile ran.
SPIN = """\
#include <cstdint>
#include <ctime>
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  static int calls = 0;
  ++calls;
  if (x[1] > 0 && calls == static_cast<int>(x[1])) return 7;
  const double until = now() + x[0];
  volatile double acc = 0;
  while (now() < until) for (int i = 0; i < 1000; ++i) acc = acc + i;
  y[0] = static_cast<float>(acc);
  y[1] = static_cast<float>(calls);
  return 0;
}
"""

HEAVY = """\
#include <cmath>
#include <cstdint>
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  const int64_t n = shapes[0][0];
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i]; for (int k = 0; k < 24; ++k) v = std::sin(v) * std::cos(v) + 0.5f;
    y[i] = v;
  }
  return 0;
}
"""
HEAVY_LINE = 9

TRIVIAL = """\
#include <cstdint>
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  float *y = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < shapes[0][0]; ++i) y[i] = static_cast<const float *>(params[0])[i];
  return 0;
}
"""

PER_CALL_THREADS = """\
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  const int64_t n = shapes[0][0];
  std::vector<std::thread> team;
  for (int t = 0; t < 2; ++t) team.emplace_back([=] {
    for (int64_t i = t; i < n; i += 2) { float v = x[i]; for (int k = 0; k < 24; ++k) v = std::sin(v); y[i] = v; }
  });
  for (auto &t : team) t.join();
  return 0;
}
"""

OPENMP = """\
#include <cstdint>
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  const int64_t n = shapes[0][0];
#pragma omp parallel for schedule(static) num_threads(4)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i]; for (int k = 0; k < 200; ++k) v = v * 0.9993f + 0.0007f * static_cast<float>(k);
    y[i] = v;
  }
  return 0;
}
"""

QUIET = {"counters": False, "hot_loop": False}


def _op(tmp_path: Path, source: str, name: str, flags=("-O2",), **kw):
    """The op of ``source``, in a library of its own (SPIN's call counter is per library)."""
    path = tmp_path / f"{name}.cc"
    path.write_text(source + f"// {name} {tmp_path.name}\n")
    return aotbench.Custom(f"{path}:CustomKernel", lambda s: s, np.float32, flags=list(flags), **kw)


def _sigprof_timers() -> int:
    """POSIX timers of this process that send SIGPROF (the sampler's)."""
    lines = Path("/proc/self/timers").read_text().splitlines()
    return sum(line.startswith(f"signal: {int(signal.SIGPROF)}/") for line in lines)


def _heavy_input(rng, n=1 << 12):
    return rng.standard_normal(n).astype(np.float32)


def _run_script(tmp_path: Path, body: str, timeout: float = 240) -> subprocess.CompletedProcess:
    script = tmp_path / "scenario.py"
    script.write_text("import faulthandler, sys; faulthandler.dump_traceback_later(%d, exit=True)\n" % (timeout - 20)
                      + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path)


def test_an_interrupt_right_after_the_timers_start_stops_them(tmp_path, rng, monkeypatch):
    """A KeyboardInterrupt arriving between the native start and the sampled loop stopped nothing before: the
    timers kept firing, and the next profile found the sampler busy."""
    op = _op(tmp_path, HEAVY, "heavy")
    x = _heavy_input(rng)
    real = process_runtime(op.kernel.runtime)

    class Lib:
        def __getattr__(self, name):
            return getattr(real.lib, name)

        def aotb_profile_start(self, *args):
            assert real.lib.aotb_profile_start(*args) == 0
            raise KeyboardInterrupt  # as if Ctrl-C came just as the call returned

    class Interrupting:
        lib = Lib()

    monkeypatch.setattr(profiling, "process_runtime", lambda runtime: Interrupting())
    with pytest.raises(KeyboardInterrupt):
        op.profile(x, seconds=0.2, **QUIET)
    monkeypatch.undo()
    taken = real.lib.aotb_profile_taken()
    threading.Event().wait(0.05)
    assert real.lib.aotb_profile_taken() == taken and _sigprof_timers() == 0
    p = op.profile(x, seconds=0.2, min_samples=100, **QUIET)  # not EBUSY
    assert max(p.by_line, key=p.by_line.get) == HEAVY_LINE


def test_sigprof_handler_blocks_sigint(tmp_path, rng):
    """The host's SIGINT handler longjmps out of an abandoned call: nested inside the sampler's handler, it would
    leave the sampler's in-flight count raised (the next stop waits for ever), so the handler blocks it."""
    op = _op(tmp_path, HEAVY, "heavy")
    op.profile(_heavy_input(rng, 256), seconds=0.05, min_samples=10, **QUIET)  # (re)installs the handler

    class SigAction(ctypes.Structure):  # glibc's struct sigaction on x86-64 and aarch64
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]

    current = SigAction()
    assert ctypes.CDLL(None).sigaction(int(signal.SIGPROF), None, ctypes.byref(current)) == 0
    mask = current.mask[0]
    assert mask >> (signal.SIGINT - 1) & 1, "SIGINT is not blocked while the sampler's handler runs"
    assert not mask >> (signal.SIGSEGV - 1) & 1  # a fault in the handler still reports


def test_ctrl_c_during_a_shell_cell_stops_sampling(tmp_path, rng):
    """SIGINT to the process while an IPython cell profiles: KeyboardInterrupt, no timer left, no sample taken
    afterwards, and the op and the profiler still work."""
    source = tmp_path / "spin.cc"
    source.write_text(SPIN)
    out = _run_script(tmp_path, f"""
        import os, signal, threading, time
        import numpy as np, aotbench
        from IPython.testing.globalipapp import start_ipython
        from aotbench.native.runtime import process_runtime
        shell = start_ipython()
        op = aotbench.Custom({str(source) + ':CustomKernel'!r}, lambda s: s, np.float32, flags=["-O2"])
        shell.user_ns.update(op=op, x=np.array([0.002, 0], np.float32))
        threading.Timer(0.8, os.kill, (os.getpid(), signal.SIGINT)).start()
        result = shell.run_cell("p = op.profile(x, seconds=20, counters=False, hot_loop=False)")
        print("ERROR", type(result.error_in_exec).__name__)
        lib = process_runtime(op.kernel.runtime).lib
        taken = lib.aotb_profile_taken(); time.sleep(0.2)
        timers = [l for l in open("/proc/self/timers").read().splitlines() if l.startswith("signal: 27/")]
        print("AFTER", taken, lib.aotb_profile_taken(), len(timers))
        print("CALL", int(op(np.array([0.0001, 0], np.float32))[1] > 0))
        print("AGAIN", op.profile(np.array([0.001, 0], np.float32), seconds=0.2, min_samples=50,
                                  counters=False, hot_loop=False).samples)
    """)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["ERROR"] == "KeyboardInterrupt"
    taken, later, timers = map(int, lines["AFTER"].split())
    assert taken > 0 and later == taken and timers == 0
    assert lines["CALL"] == "1" and int(lines["AGAIN"]) >= 50


def test_fork_during_a_profile_the_child_can_profile(tmp_path):
    """A fork (from another thread) while a profile runs: the child, which has neither the parent's timers nor its
    profiling thread, neither dies of SIGPROF nor finds the profiler's lock or the native sampler busy for ever."""
    source = tmp_path / "heavy.cc"
    source.write_text(HEAVY)
    out = _run_script(tmp_path, f"""
        import os, threading, time
        import numpy as np, aotbench
        op = aotbench.Custom({str(source) + ':CustomKernel'!r}, lambda s: s, np.float32, flags=["-O2"])
        x = np.random.default_rng().standard_normal(1 << 12).astype(np.float32)
        children = []

        def fork_later():
            time.sleep(0.5)
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    p = op.profile(x, seconds=0.2, min_samples=50, counters=False, hot_loop=False)
                    code = 0 if p.samples >= 50 else 4
                except BaseException:
                    code = 3
                os._exit(code)
            children.append(pid)

        (t := threading.Thread(target=fork_later)).start()
        op.profile(x, seconds=1.5, counters=False, hot_loop=False)
        t.join()
        pid = children[0]
        for _ in range(600):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            done, status = os.waitpid(pid, 0)
        print("CHILD", status)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0", out.stdout  # exited 0: not killed (SIGPROF, or 9 for hanging)


def test_kernel_error_while_sampled_propagates_and_stops(tmp_path):
    op = _op(tmp_path, SPIN, "spin_fails")
    runtime = process_runtime(op.kernel.runtime)
    with pytest.raises(KernelError, match="returned 7"):
        op.profile(np.array([0.001, 150], np.float32), seconds=2, **QUIET)  # call 150: past the unsampled ones
    assert (taken := runtime.lib.aotb_profile_taken()) > 0  # it failed while sampled
    threading.Event().wait(0.05)
    assert runtime.lib.aotb_profile_taken() == taken and _sigprof_timers() == 0
    p = op.profile(np.array([0.001, 0], np.float32), seconds=0.1, min_samples=30, **QUIET)
    assert p.samples >= 30


def test_calls_longer_than_seconds_end_after_few_calls(tmp_path):
    """Each call lasts longer than the profile was asked to: one call is warm-up, one the baseline before, one
    sampled and one the baseline after (three of each baseline before, eight calls in all)."""
    op = _op(tmp_path, SPIN, "spin_long")
    x = np.array([0.3, 0], np.float32)
    p = op.profile(x, seconds=0.05, min_samples=50, **QUIET)
    ran = int(op(np.array([0.0, 0], np.float32))[1]) - 1  # the calls' counter, less this call
    assert p.calls == 1 and ran == 4
    assert p.samples > 0 and p.by_line and p.inside > 0.9


def test_a_trivial_kernel_is_said_to_be_mostly_outside(tmp_path):
    op = _op(tmp_path, TRIVIAL, "trivial")
    p = op.profile(np.ones(4, np.float32), seconds=0.2, min_samples=100, **QUIET)
    assert p.inside < 0.5 and sum(p.outside.values()) > 0.5
    assert any("most of the time is outside the kernel" in n for n in p.notes), p.text


def test_prebuilt_library_is_profiled_per_function(tmp_path, rng):
    built = _op(tmp_path, HEAVY, "heavy")
    copy = tmp_path / "prebuilt.so"
    copy.write_bytes(Path(built.library.path).read_bytes())
    op = aotbench.Custom(f"{copy}:CustomKernel", lambda s: s, np.float32)
    assert op.artifact is None
    p = op.profile(_heavy_input(rng), seconds=0.2, min_samples=100, **QUIET)
    assert not p.by_line and p.inside > 0.9
    # a sample in the library's PLT (on its way to libm) counts for the function that called it, not for "?"
    assert set(p.by_function) == {"CustomKernel"}, p.by_function
    assert any("prebuilt" in n for n in p.notes)


def test_source_changed_after_the_build_profiles_per_function(tmp_path, rng):
    op = _op(tmp_path, HEAVY, "heavy_changed")
    x = _heavy_input(rng)
    op(x)
    (tmp_path / "heavy_changed.cc").write_text(HEAVY.replace("0.5f", "0.25f"))  # the op runs the old code
    p = op.profile(x, seconds=0.2, min_samples=100, **QUIET)  # SourceChangedError after sampling, before
    assert not p.by_line and p.source is None and p.inside > 0.9
    assert p.by_function.get("CustomKernel", 0) > 0.9
    assert any("changed since the op was built" in n and "heavy_changed.cc" in n for n in p.notes), p.notes


def test_another_busy_python_thread_is_not_sampled(tmp_path, rng):
    """A thread running another op meanwhile is not this kernel's: it was sampled, and its op's library came out as
    half the time 'outside the kernel'. Its CPU time is now named in a note instead."""
    op = _op(tmp_path, HEAVY, "heavy")
    other = _op(tmp_path, SPIN, "spin_other")
    stop = threading.Event()

    def busy():
        y = np.array([0.0005, 0], np.float32)
        while not stop.is_set():
            other(y)

    (thread := threading.Thread(target=busy)).start()
    try:
        p = op.profile(_heavy_input(rng), seconds=0.3, min_samples=100, **QUIET)
    finally:
        stop.set()
        thread.join()
    assert p.threads == 1 and thread.native_id not in p.raw.threads
    assert p.inside > 0.9 and not any("spin_other" in k for k in p.outside), p.text
    if len(os.sched_getaffinity(0)) >= 2:  # with a core of its own the other thread's share is clear
        assert any("of the process's CPU time" in n for n in p.notes), p.notes


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the note needs the threads to run beside the caller")
def test_threads_started_per_call_are_named_as_unsampled(tmp_path, rng):
    op = _op(tmp_path, PER_CALL_THREADS, "per_call", flags=("-O2", "-pthread"))
    p = op.profile(_heavy_input(rng, 1 << 13), seconds=0.3, min_samples=100, **QUIET)
    assert p.threads == 1
    assert any("threads the kernel starts on every call" in n for n in p.notes), p.text


def test_a_full_buffer_ends_the_run(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(profiling, "MAX_STORED_SAMPLES", 300)
    op = _op(tmp_path, HEAVY, "heavy")
    p = op.profile(_heavy_input(rng), seconds=5, **QUIET)
    assert p.raw.buffer_full and len(p.raw.cpu_ns) <= 300 and p.seconds < 5
    assert any("sample buffer filled" in n for n in p.notes)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable core: an OpenMP team of one")
def test_more_busy_threads_than_the_sampler_takes(tmp_path, rng, monkeypatch):
    """Past the native limit the busiest threads are sampled (before, aotb_profile_start refused: EINVAL)."""
    monkeypatch.setattr(profiling, "MAX_THREADS", 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    op = _op(tmp_path, OPENMP, "omp4", flags=("-O2", "-fopenmp"))
    p = op.profile(rng.standard_normal(1 << 16).astype(np.float32), seconds=0.3, min_samples=100, **QUIET)
    assert p.threads == 2 and max(p.by_line, key=p.by_line.get) == 9


def test_analyse_weighs_grouped_stacks_exactly():
    """Identical stacks are summed before attribution: the shares are those of the samples one by one."""
    lib, python = "/x/libkernel.so", "/usr/lib/libpython3.11.so.1.0"
    locations = {0x1000: Location(lib, 0x10, "K"), 0x1008: Location(lib, 0x18, "K"),
                 0x2000: Location(python, 0x20, "PyEval"), 0x3000: Location("/usr/lib/libm.so.6", 0x30, "sin")}
    rows = [[0x1000, 0x2000], [0x1008, 0x2000], [0x1000, 0x2000], [0x2000, 0], [0x3000, 0x1008], [0x1000, 0x2000]]
    weights = [100, 200, 300, 400, 500, 20]  # the last: a waiting thread, charged only the signal's delivery
    pcs = np.zeros((len(rows), 8), np.uint64)
    for i, row in enumerate(rows):
        pcs[i, : len(row)] = row
    raw = RawProfile(pcs, np.zeros(len(rows), np.int32), np.asarray(weights, np.int64), (1,), locations, calls=3,
                     wall_ns=10**6, interval_ns=300, baseline_ns_per_call=1.0)  # waiting: under 300 // 4
    p = profile_tool.analyse("K", raw, lib, profile_tool.Mapping(None, None))
    total = 1500
    assert p.samples == 5 and p.waiting_samples == 1
    assert p.inside == pytest.approx(1100 / total) and p.by_function == {"K": pytest.approx(1100 / total)}
    assert p.by_instruction == {0x10: pytest.approx(400 / total), 0x17: pytest.approx(500 / total),
                                0x18: pytest.approx(200 / total)}
    assert p.called == {"libm.so.6 (sin)": pytest.approx(500 / total)}
    assert sum(p.outside.values()) == pytest.approx(400 / total)


def test_profile_next_call_keeps_the_outputs_when_the_profile_fails(tmp_path):
    op = _op(tmp_path, SPIN, "spin_then_fails")
    x = np.array([0.0005, 3], np.float32)  # the call itself is the library's first call; the profile's fail
    op(np.array([0.0, 0], np.float32))
    op.profile_next_call = True
    with pytest.warns(AotbenchWarning, match="profile asked for .* failed"):
        y = op(x)
    assert int(y[1]) == 2 and op.last_profile is None and not op.profile_next_call


def test_a_sigprof_handler_set_after_a_profile_gets_other_sigprofs(tmp_path, rng):
    op = _op(tmp_path, HEAVY, "heavy")
    x = _heavy_input(rng, 256)
    op.profile(x, seconds=0.05, min_samples=10, **QUIET)
    got = []
    old = signal.signal(signal.SIGPROF, lambda *_: got.append(1))
    try:
        op.profile(x, seconds=0.1, min_samples=20, **QUIET)  # the sampler's handler goes back on top of it
        assert not got
        os.kill(os.getpid(), signal.SIGPROF)
        for _ in range(100):
            if not got:
                threading.Event().wait(0.01)
        assert got == [1]
    finally:
        signal.signal(signal.SIGPROF, old)


def test_sigprof_blocked_on_the_calling_thread_is_refused(tmp_path, rng):
    """With SIGPROF blocked no sample arrives: the profile used to run to ten times `seconds` and show nothing."""
    op = _op(tmp_path, HEAVY, "heavy")
    x = _heavy_input(rng, 256)
    caught = []

    def blocked():
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPROF])
        try:
            op.profile(x, seconds=0.05, min_samples=10, **QUIET)
        except AotbenchError as exc:
            caught.append(exc)

    (thread := threading.Thread(target=blocked)).start()
    thread.join()
    assert caught and "SIGPROF is blocked" in str(caught[0])


@pytest.mark.slow
def test_emulated_op_lines_are_the_source_as_built(tmp_path, examples, rng):
    """An emulated op's line table is its build's: the source shown is the text built, even after the file moved
    its lines (before, the file as it is now was shown beside the old line numbers)."""
    source = tmp_path / "add_reduce.cu"
    original = (examples / "add_reduce.cu").read_text()
    source.write_text(original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", aotbench.EmulationWarning)
        op = aotbench.Custom(f"{source}:AddReduce", None, np.float32, attrs={"axis": 1, "keep_dim": False},
                             emulate=True)
        x = rng.standard_normal((64, 256)).astype(np.float32)
        op(x, x)
        source.write_text("// a line added after the build\n" * 20 + original)
        p = op.profile(x, x, seconds=0.3, min_samples=200, **QUIET)
    assert p.source.lines == original.splitlines()
    assert all(1 <= line <= len(p.source.lines) for line in p.by_line)
