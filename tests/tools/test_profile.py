"""op.profile: per-line and per-instruction time from sampling, with no privileges, for in-process, cell,
isolated, OpenMP and emulated ops; the arguments it refuses; the SIGPROF handler it leaves behind."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.errors import ArgumentValueError
from aotbench.run import profiling

# Line 9 is deliberately expensive (transcendentals per element, a chain GCC cannot shorten); lines 7 and 11
# touch each element once.
HOT_KERNEL = """\
#include <cmath>
#include <cstdint>
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  const int64_t n = shapes[0][0]; float shift = 0.0f; for (int64_t i = 0; i < n; ++i) shift += x[i] * 1e-6f;
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i]; for (int k = 0; k < 24; ++k) v = std::sin(v + shift) * std::cos(v) + std::exp(-v * v);
    y[i] = v;
  }
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  return 0;
}
"""
HOT_LINE = 9

OPENMP_KERNEL = """\
#include <cstdint>
extern "C" int CustomKernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *stream, void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  const int64_t n = shapes[0][0];
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i]; for (int k = 0; k < 200; ++k) v = v * 0.9993f + 0.0007f * static_cast<float>(k);
    y[i] = v;
  }
  return 0;
}
"""


def reference(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float32).copy()
    shift = np.float32((x * np.float32(1e-6)).sum(dtype=np.float32))
    for _ in range(24):
        v = np.sin(v + shift) * np.cos(v) + np.exp(-v * v)
    return v + x


@pytest.fixture
def hot_op(tmp_path):
    source = tmp_path / "hot.cc"
    source.write_text(HOT_KERNEL)
    return aotbench.Custom(f"{source}:CustomKernel", lambda s: s, np.float32, flags=["-O2"])


def test_the_expensive_line_gets_most_of_the_samples(hot_op, rng):
    x = rng.standard_normal(1 << 14).astype(np.float32)
    np.testing.assert_allclose(hot_op(x), reference(x), rtol=2e-3, atol=2e-3)  # the kernel profiled is right
    p = hot_op.profile(x, seconds=0.5, counters=False, hot_loop=False)
    assert p.samples >= profiling.MIN_SAMPLES  # min_samples keeps it sampling past `seconds` if need be
    assert p.by_line[HOT_LINE] >= 0.7, p.text
    assert p.hottest(1)[0][0] == HOT_LINE and "std::sin" in p.hottest(1)[0][2]
    assert p.inside > 0.9 and abs(sum(p.by_line.values()) + sum(p.elsewhere.values()) - p.inside) < 1e-6
    assert abs(p.inside + sum(p.outside.values()) - 1.0) < 1e-6
    assert any(name.startswith("libm") for name in p.called)  # sin/cos/exp: libm, counted for line 9
    assert p.calls > 3 and p.ns_per_call > 0 and p.baseline_ns_per_call > 0 and np.isfinite(p.overhead)
    # per instruction: shares of instructions of the kernel's disassembly (the hottest may be a call into libm
    # that objdump files under <cmath>'s inlined std::sin, so it is looked for in the whole listing)
    listing = hot_op.disassemble().text
    hottest = max(p.by_instruction, key=p.by_instruction.get)
    assert f" {hottest:x}  " in listing
    assert abs(sum(p.by_instruction.values()) - p.inside) < 1e-6


def test_views_show_the_time_per_line_and_instruction(hot_op, rng):
    x = rng.standard_normal(1 << 13).astype(np.float32)
    p = hot_op.profile(x, seconds=0.3, min_samples=200, counters=False, hot_loop=False)
    text = p.text
    hot_row = next(line for line in text.splitlines() if line[7:].lstrip().startswith(f"{HOT_LINE} |"))
    assert hot_row.strip().startswith(f"{100 * p.by_line[HOT_LINE]:.1f}%")
    assert f"{p.samples} samples" in text and "in the kernel" in text
    page = p._repr_html_()
    assert "color:" not in page.replace("background", "")  # only translucent backgrounds: both themes
    assert "rgba(230, 90, 30" in page and "std::sin" in page
    listing = p.disassembly_text()
    assert "%" in listing and "CustomKernel" in listing
    assert repr(p).startswith("<aotbench Profile of CustomKernel")


def test_cell_kernel_lines_are_the_cells(tmp_path, rng):
    from ipython_shell import aotbench_shell

    cell = "// a comment first, so the cell's lines differ from a file's\n" + HOT_KERNEL
    with aotbench_shell(tmp_path) as shell:
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --flags '-O2'", cell)
        op = shell.user_ns["CustomKernel"]
        x = rng.standard_normal(1 << 13).astype(np.float32)
        p = op.profile(x, seconds=0.3, min_samples=300, counters=False, hot_loop=False)
    assert p.source.is_cell and p.source.path == "<cell>"
    assert max(p.by_line, key=p.by_line.get) == HOT_LINE + 1
    assert p.by_line[HOT_LINE + 1] >= 0.7


def test_profile_magic_flag_profiles_the_next_call(tmp_path, rng, capsys):
    from ipython_shell import aotbench_shell

    with aotbench_shell(tmp_path) as shell:
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --flags '-O2' --profile", HOT_KERNEL)
        op = shell.user_ns["CustomKernel"]
        assert op.profile_next_call and op.last_profile is None
        x = rng.standard_normal(1 << 12).astype(np.float32)
        np.testing.assert_allclose(op(x), reference(x), rtol=2e-3, atol=2e-3)
        assert isinstance(op.last_profile, aotbench.Profile) and not op.profile_next_call
        assert max(op.last_profile.by_line, key=op.last_profile.by_line.get) == HOT_LINE
        op(x)  # once only
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --flags '-O2' --profile", HOT_KERNEL)
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --flags '-O2'", HOT_KERNEL)
        assert not op.profile_next_call  # re-running the cell without --profile cancels it


def test_isolated_op_is_sampled_in_its_worker(tmp_path, rng):
    source = tmp_path / "hot.cc"
    source.write_text(HOT_KERNEL)
    op = aotbench.Custom(f"{source}:CustomKernel", lambda s: s, np.float32, flags=["-O2"], isolate=True)
    x = rng.standard_normal(1 << 13).astype(np.float32)
    p = op.profile(x, seconds=0.3, min_samples=300, counters=False, hot_loop=False)
    assert op.runner.worker_pid not in (None, os.getpid())
    assert not set(p.raw.threads) & {int(t) for t in os.listdir("/proc/self/task")}  # the worker's threads
    assert max(p.by_line, key=p.by_line.get) == HOT_LINE and p.by_line[HOT_LINE] >= 0.7
    np.testing.assert_allclose(op(x), reference(x), rtol=2e-3, atol=2e-3)  # the op still works after


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable core: an OpenMP team of one")
def test_openmp_kernel_every_thread_is_sampled(tmp_path, rng):
    source = tmp_path / "omp.cc"
    source.write_text(OPENMP_KERNEL)
    op = aotbench.Custom(f"{source}:CustomKernel", lambda s: s, np.float32, flags=["-O2", "-fopenmp"])
    x = rng.standard_normal(1 << 16).astype(np.float32)
    p = op.profile(x, seconds=0.5, counters=False, hot_loop=False)
    assert p.threads >= 2, p.text
    per_thread = np.bincount(p.raw.slots[p.raw.cpu_ns > 0], minlength=p.threads)
    assert (per_thread[:2] > 0.2 * per_thread.sum()).all()  # both halves of the team, not only the caller
    assert max(p.by_line, key=p.by_line.get) == 9


def test_emulated_cuda_kernel_is_labelled(rng, examples):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", aotbench.EmulationWarning)
        op = aotbench.Custom(f"{examples / 'add_reduce.cu'}:AddReduce", None, np.float32,
                             attrs={"axis": 1, "keep_dim": False}, emulate=True)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    p = op.profile(x, x, seconds=0.3, min_samples=200, counters=False, hot_loop=False)
    assert p.label == "the emulator's CPU time" and "emulator's CPU time" in p.text
    assert p.source is not None and p.source.path.endswith("add_reduce.cu")
    assert sum(p.by_line.values()) > 0.3 and all(1 <= line <= len(p.source.lines) for line in p.by_line)


def test_arguments_are_checked(hot_op, rng):
    x = rng.standard_normal(64).astype(np.float32)
    for bad in (0, -1.0, float("nan"), float("inf"), True, "1", 1e9):
        with pytest.raises(ArgumentValueError, match="seconds"):
            hot_op.profile(x, seconds=bad)
    for bad in (0, 0.01, 1000, True, "0.5"):
        with pytest.raises(ArgumentValueError, match="interval_ms"):
            hot_op.profile(x, interval_ms=bad)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ArgumentValueError, match="min_samples"):
            hot_op.profile(x, min_samples=bad)


def test_two_threads_profiling_at_once_take_turns(hot_op, rng):
    x = rng.standard_normal(1 << 12).astype(np.float32)
    results, errors = [], []

    def run():
        try:
            results.append(hot_op.profile(x, seconds=0.2, min_samples=100, counters=False, hot_loop=False))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2
    assert all(max(p.by_line, key=p.by_line.get) == HOT_LINE for p in results)


def test_a_python_sigprof_handler_still_gets_other_sigprofs(hot_op, rng):
    got = []
    old = signal.signal(signal.SIGPROF, lambda *_: got.append(1))
    try:
        x = rng.standard_normal(1 << 12).astype(np.float32)
        hot_op.profile(x, seconds=0.2, min_samples=100, counters=False, hot_loop=False)
        assert not got  # the profiler's own signals never reach it
        os.kill(os.getpid(), signal.SIGPROF)
        for _ in range(100):
            if got:
                break
            threading.Event().wait(0.01)
        assert got == [1]
    finally:
        signal.signal(signal.SIGPROF, old)


def test_raw_profile_pickles(hot_op, rng):
    x = rng.standard_normal(1 << 10).astype(np.float32)
    p = hot_op.profile(x, seconds=0.1, min_samples=50, counters=False, hot_loop=False)
    back = pickle.loads(pickle.dumps(p.raw))
    assert np.array_equal(back.pcs, p.raw.pcs) and back.locations == p.raw.locations


def _drop_every_capability() -> None:
    """In the child before exec: no capability now or after exec (root's are not granted back), as an ordinary
    user has none: no CAP_PERFMON, no CAP_SYS_ADMIN."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_securebits, pr_capbset_drop = 28, 24
    if os.geteuid() == 0:  # SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP and their locks
        assert libc.prctl(pr_set_securebits, 0x0F, 0, 0, 0) == 0
    for cap in range(64):
        libc.prctl(pr_capbset_drop, cap, 0, 0, 0)  # fails quietly past the last capability, or without CAP_SETPCAP
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    assert libc.capset(header, (ctypes.c_uint32 * 6)()) == 0


def test_no_privileges_needed(tmp_path, rng):
    """With every capability dropped (no CAP_PERFMON or CAP_SYS_ADMIN, even for root), a profile samples."""
    source = tmp_path / "hot.cc"
    source.write_text(HOT_KERNEL)
    script = textwrap.dedent(f"""
        import numpy as np, aotbench
        status = open("/proc/self/status").read()
        print(next(l.split()[1] for l in status.splitlines() if l.startswith("CapEff")))
        op = aotbench.Custom({str(source) + ':CustomKernel'!r}, lambda s: s, np.float32, flags=["-O2"])
        x = np.random.default_rng({int(rng.integers(1 << 30))}).standard_normal(1 << 12).astype(np.float32)
        p = op.profile(x, seconds=0.3, min_samples=300, counters=False, hot_loop=False)
        print(p.samples, max(p.by_line, key=p.by_line.get))
    """)
    env = {**os.environ, "AOTBENCH_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         preexec_fn=_drop_every_capability, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    caps, result = out.stdout.splitlines()
    assert int(caps, 16) == 0
    samples, line = map(int, result.split())
    assert samples >= 300 and line == HOT_LINE


def test_hardware_counter_lines_where_the_machine_has_them():
    """Where hardware events open (not on this VM): cycles, instructions, IPC and miss rates per call."""
    from aotbench.tools.profile_extras import CounterReport

    rng = np.random.default_rng()
    cycles, instructions = float(rng.integers(10**6, 10**7)), float(rng.integers(10**6, 10**7))
    report = CounterReport({"cycles": cycles, "instructions": instructions, "cache-references": 4000.0,
                            "cache-misses": 1000.0, "branch-instructions": 2000.0, "branch-misses": 20.0}, 7, True, "")
    line, = report.lines()
    assert f"IPC {instructions / cycles:.2f}" in line and "(25.0% of cache-references)" in line
    assert "(1.0% of branch-instructions)" in line and "(7 calls)" in line
    missing = CounterReport({"task-clock": 2.5e6, "page-faults": 3.0}, 4, False, "no PMU here")
    assert missing.lines() == ["hardware counters: none here: no PMU here",
                               "software counters per call (4 calls): task-clock 2.500 ms, 3.0 page faults"]


def test_counters_here_say_why_hardware_is_missing(hot_op, rng):
    from aotbench.native import perf_events

    x = rng.standard_normal(1 << 12).astype(np.float32)
    p = hot_op.profile(x, seconds=0.2, min_samples=100, hot_loop=False)
    support = perf_events.probe()
    if support.hardware:
        assert p.counters is not None and p.counters.hardware and p.counters.per_call["instructions"] > 0
    elif support.software:
        assert p.counters is not None and f"hardware counters: none here: {support.reason}" in p.text
        assert 0 < p.counters.per_call["task-clock"]
    else:
        assert p.counters is None and support.reason in p.text


@pytest.mark.nvcc
@pytest.mark.slow
def test_a_kernel_on_a_real_gpu_is_refused(tmp_path, examples, rng):
    op = aotbench.Custom(f"{examples / 'add_reduce.cu'}:AddReduce", None, np.float32,
                         attrs={"axis": 1, "keep_dim": False}, emulate=False)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    with pytest.raises(ArgumentValueError, match="runs on a GPU.*emulate=True"):
        op.profile(x, x)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable core")
def test_a_waiting_thread_is_told_apart_from_a_running_one(tmp_path, rng):
    """An OpenMP worker that sleeps between short parallel regions (OMP_WAIT_POLICY=passive) is sampled while
    it waits: those samples carry only the signal's own cost and count as waiting, not as time."""
    source = tmp_path / "mostly_serial.cc"
    source.write_text(OPENMP_KERNEL.replace("#pragma omp parallel for schedule(static)",
                                            "float serial = 0; for (int64_t i = 0; i < 800 * n; ++i) serial += "
                                            "static_cast<float>(i % 7) * 1e-9f; y[0] = serial;\n"
                                            "#pragma omp parallel for schedule(static)"))
    script = textwrap.dedent(f"""
        import numpy as np, aotbench
        op = aotbench.Custom({str(source) + ':CustomKernel'!r}, lambda s: s, np.float32, flags=["-O1", "-fopenmp"])
        x = np.random.default_rng({int(rng.integers(1 << 30))}).standard_normal(1 << 12).astype(np.float32)
        p = op.profile(x, seconds=0.5, min_samples=200, counters=False, hot_loop=False)
        print(p.threads, p.samples, p.waiting_samples)
    """)
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    threads, samples, waiting = map(int, out.stdout.split())
    if threads < 2:
        pytest.skip("the worker used too little CPU to be sampled")
    assert waiting > 0.2 * samples
