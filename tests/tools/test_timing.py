"""``aotbench.bench`` and its statistics: the method with a fake clock (exact expectations), then real calls.

No test asserts an absolute time measured on this machine (it is noisy); the fake clock makes the method's
arithmetic checkable exactly.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import aotbench
from aotbench.tools import timing
from aotbench.errors import ArgumentError, DeviceUnavailableError


class FakeClock:
    """A clock in ns that only moves when the timed function runs: each call costs ``costs_ns[i % len]``."""

    def __init__(self, *costs_ns: int):
        self.now = 0
        self.costs = costs_ns
        self.calls = 0

    def __call__(self) -> int:
        return self.now

    def fn(self, *args) -> None:
        self.now += self.costs[self.calls % len(self.costs)]
        self.calls += 1


def test_summarize_matches_numpy_percentiles(rng):
    samples = rng.exponential(1000.0, size=257)
    s = timing.summarize(samples)
    assert s.median_ns == pytest.approx(np.median(samples))
    assert s.q1_ns == pytest.approx(np.percentile(samples, 25))
    assert s.q3_ns == pytest.approx(np.percentile(samples, 75))
    assert s.iqr_ns == pytest.approx(np.percentile(samples, 75) - np.percentile(samples, 25))
    assert (s.min_ns, s.max_ns, s.count) == (samples.min(), samples.max(), 257)
    assert s.mean_ns == pytest.approx(samples.mean())


@given(st.lists(st.floats(min_value=0, max_value=1e12), min_size=1, max_size=60))
def test_summarize_orders_its_statistics(samples):
    s = timing.summarize(samples)
    assert s.min_ns <= s.q1_ns <= s.median_ns <= s.q3_ns <= s.max_ns
    assert s.iqr_ns >= 0 and s.count == len(samples)


def test_summarize_refuses_empty_or_negative_samples():
    with pytest.raises(ArgumentError, match="no samples"):
        timing.summarize([])
    with pytest.raises(ArgumentError, match="non-negative"):
        timing.summarize([1.0, -2.0])
    with pytest.raises(ArgumentError, match="finite"):
        timing.summarize([float("nan")])


def test_constant_cost_is_measured_exactly_and_fills_the_budget():
    clock = FakeClock(1_000)
    t = aotbench.bench(clock.fn, budget_ms=10, timer=clock, warmup=0)
    assert t.median_ns == t.min_ns == 1_000 and t.iqr_ns == 0
    assert t.number * 1_000 >= timing.MIN_SAMPLE_NS  # each sample is long enough to read the clock
    assert t.number == 20  # autorange: 1, 2, 5, 10, 20 calls; 20 us is the first batch >= 20 us
    timed = t.count * t.number * 1_000
    assert 0.9 * 10e6 <= timed <= 1.1 * 10e6  # the samples use the budget, no more
    assert clock.calls == 1 + (1 + 2 + 5 + 10 + 20) + t.count * t.number  # untimed first call, autorange, samples


def test_slow_calls_get_one_call_per_sample_and_at_least_min_samples():
    clock = FakeClock(40_000_000)  # 40 ms per call, budget 10 ms
    t = aotbench.bench(clock.fn, budget_ms=10, timer=clock, warmup=0, min_samples=3)
    assert t.number == 1 and t.count == 3 and t.median_ns == 40_000_000


def test_spread_shows_in_the_iqr_and_the_median_resists_outliers():
    clock = FakeClock(*([10_000] * 9 + [1_000_000]))  # one call in ten is 100x slower
    t = aotbench.bench(clock.fn, budget_ms=50, timer=clock, warmup=0, max_samples=200)
    assert t.number == 2  # 2 calls make a 20 us sample
    assert t.median_ns == 10_000
    assert t.stats.max_ns > 100_000  # the outliers are kept in the samples, not hidden
    assert len(t.samples_ns) == t.count <= 200


def test_automatic_warmup_is_about_a_tenth_of_the_budget():
    clock = FakeClock(100_000)
    t = aotbench.bench(clock.fn, budget_ms=100, timer=clock)
    # one untimed call, then autorange stops at its first batch (one 100 us call >= 20 us)
    warmup_calls = clock.calls - 1 - 1 - t.count * t.number
    assert warmup_calls == 100  # 10 ms of warm-up at 100 us per call


def test_gc_is_off_while_timing_and_restored_after():
    seen = []
    aotbench.bench(lambda: seen.append(gc.isenabled()), budget_ms=1, warmup=0)
    assert seen and not any(seen)
    assert gc.isenabled()


@pytest.mark.slow
def test_cold_samples_are_single_calls_after_a_flush():
    clock = FakeClock(1_000)
    t = aotbench.bench(clock.fn, budget_ms=1, timer=clock, warmup=0, flush_cache=True, max_samples=7)
    assert t.flushed and t.number == 1 and t.count <= 7 and t.median_ns == 1_000
    assert "cold caches" in str(t)
    assert timing.flush_buffer_bytes() >= max(64 << 20, 2 * timing._llc_bytes())


def test_real_op_bench_and_str(rng, examples):
    op = aotbench.Custom(f"{examples / 'add_reduce.cc'}:CustomKernel", None, np.float32,
                         attrs={"axis": 1, "keep_dim": False})
    x, y = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    t = op.bench(x, y, budget_ms=5)
    assert t.label == "CustomKernel" and t.count >= 5 and t.median_ns > 0
    assert t.min_ns <= t.median_ns and all(s > 0 for s in t.samples_ns)
    assert str(t).startswith("CustomKernel: ") and "median" in str(t) and "IQR" in str(t)
    assert "<code>" in t._repr_html_()


def test_format_ns_picks_a_readable_unit():
    assert timing.format_ns(850) == "850 ns"
    assert timing.format_ns(12_345) == "12.3 us"
    assert timing.format_ns(4_560_000) == "4.56 ms"
    assert timing.format_ns(1.2e9) == "1.2 s"


def test_bad_arguments_are_clear():
    with pytest.raises(ArgumentError, match="budget_ms"):
        aotbench.bench(lambda: None, budget_ms=0)
    with pytest.raises(ArgumentError, match="warmup"):
        aotbench.bench(lambda: None, warmup=1.5)
    with pytest.raises(ArgumentError, match="callable"):
        aotbench.bench(42)
    with pytest.raises(ArgumentError, match="min_samples"):
        aotbench.bench(lambda: None, min_samples=10, max_samples=5)


@pytest.mark.nvcc
@pytest.mark.slow
def test_a_gpu_op_is_refused_with_the_reason(kernels):
    op = aotbench.Custom(f"{kernels / 'nvcc_axpy.cu'}:Axpy", None, np.float32, attrs={"a": 2.0, "transpose": False},
                         emulate=False)
    with pytest.raises(DeviceUnavailableError, match="gpu op"):
        op.bench(np.ones(4, np.float32), np.ones(4, np.float32))


def test_repr_is_the_summary_not_the_samples():
    clock = FakeClock(2_000)
    t = aotbench.bench(clock.fn, budget_ms=5, timer=clock, warmup=0, label="probe")
    assert repr(t) == f"<Timing {t}>" and "probe: 2 us median" in repr(t)
    assert len(repr(t)) < 200 and t.count > 50


# --- the threads a timing records -------------------------------------------------------------------------------
# A kernel that says how many threads ran it: out = x + 1, then out[0] = omp_get_num_threads() of its region.
COUNTING = r"""
#include <cstdint>
#include <omp.h>

extern "C" int Counted(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                       void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const float *x = static_cast<const float *>(params[0]);
  float *out = static_cast<float *>(params[1]);
  int used = 0;
#pragma omp parallel
  {
#pragma omp single
    used = omp_get_num_threads();
#pragma omp for
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] + 1.0f;
  }
  out[0] = static_cast<float>(used);
  return 0;
}
"""


@pytest.fixture(scope="module")
def counting_source(tmp_path_factory):
    path = tmp_path_factory.mktemp("openmp") / "counted.cc"
    path.write_text(COUNTING)
    return path


def _threads_that_ran(op, x):
    out = op(x)
    np.testing.assert_array_equal(out[1:], x[1:] + np.float32(1))
    return int(out[0])


def test_a_timing_records_the_threads_an_openmp_kernel_ran_on(rng, counting_source):
    from aotbench.run import threads

    x = rng.standard_normal(int(rng.integers(1000, 5000))).astype(np.float32)
    op = aotbench.Custom(f"{counting_source}:Counted", x.shape, None, flags=["-O2", "-fopenmp"])
    ran = _threads_that_ran(op, x)
    t = op.bench(x, budget_ms=3)
    assert t.threads == ran == threads.kernel_threads(op) == threads.kernel_threads(op.library) >= 1
    assert t.thread_source.startswith("omp_get_max_threads()")
    assert f"{ran} thread" in str(t) and t.thread_source in t._repr_html_()


def test_an_isolated_openmp_op_is_judged_by_the_environment_its_worker_starts_with(rng, counting_source,
                                                                                  monkeypatch):
    """libgomp here read OMP_NUM_THREADS when it loaded; the worker's libgomp reads the environment it inherits."""
    x = rng.standard_normal(int(rng.integers(1000, 5000))).astype(np.float32)
    here = aotbench.Custom(f"{counting_source}:Counted", x.shape, None, flags=["-O2", "-fopenmp"])
    loaded_with = _threads_that_ran(here, x)
    wanted = loaded_with + int(rng.integers(1, 4))  # differs from what this process's libgomp uses
    monkeypatch.setenv("OMP_NUM_THREADS", f"{wanted},1")  # one number per nesting level: the first counts
    isolated = aotbench.Custom(f"{counting_source}:Counted", x.shape, None, flags=["-O2", "-fopenmp"],
                               isolate=True)
    try:
        assert _threads_that_ran(isolated, x) == wanted
        t = isolated.bench(x, budget_ms=3, min_samples=2)
        assert t.threads == wanted and t.thread_source == f"OMP_NUM_THREADS={wanted},1"
    finally:
        isolated.close()
    t = here.bench(x, budget_ms=3)
    assert t.threads == _threads_that_ran(here, x) == loaded_with
    assert t.thread_source == f"omp_get_max_threads(), OMP_NUM_THREADS={wanted},1"


def test_a_plain_kernel_runs_on_one_thread_and_a_python_callable_on_unknown_ones(rng, examples):
    from aotbench.run import threads

    op = aotbench.Custom(f"{examples / 'add_reduce.cc'}:CustomKernel", None, np.float32,
                         attrs={"axis": 1, "keep_dim": False})
    x, y = rng.standard_normal((2, 16, 8)).astype(np.float32)
    t = op.bench(x, y, budget_ms=2)
    assert (t.threads, t.thread_source) == (1, "no OpenMP") and "; 1 thread (no OpenMP)" in str(t)
    assert threads.thread_use(op) == threads.ThreadUse(1, "no OpenMP")
    plain = aotbench.bench(lambda a: a + 1, x, budget_ms=2)
    assert plain.threads is None and plain.thread_source == "" and "thread" not in str(plain)
    assert threads.callable_thread_use(lambda a: a) is None
    with pytest.raises(ArgumentError, match="thread_use"):
        threads.thread_use(lambda a: a)


def test_the_threads_text_of_a_timing(rng):
    samples = tuple(rng.uniform(900, 1100, 9))
    assert timing.Timing(samples, threads=2, thread_source="OMP_NUM_THREADS=2").threads_text() == \
        "2 threads (OMP_NUM_THREADS=2)"
    assert "; 1 thread (no OpenMP)" in str(timing.Timing(samples, threads=1, thread_source="no OpenMP"))
    assert timing.Timing(samples, threads=3).threads_text() == "3 threads"
    assert timing.Timing(samples).threads_text() == ""


def test_openmp_and_emulator_thread_rules(monkeypatch):
    """Without a loaded libgomp: OMP_NUM_THREADS' first number, else the affinity mask (libgomp's default)."""
    from aotbench.run import threads

    monkeypatch.setattr(threads, "_loaded_libgomp", lambda: None)
    monkeypatch.setattr(threads, "affinity_cores", lambda: 3)
    monkeypatch.setenv("OMP_NUM_THREADS", "5,2")
    assert threads.openmp_threads() == threads.ThreadUse(5, "OMP_NUM_THREADS=5,2")
    for unusable in ("", "0", "many"):
        monkeypatch.setenv("OMP_NUM_THREADS", unusable)
        assert threads.openmp_threads().count == 3 and "affinity mask" in threads.openmp_threads().source
    monkeypatch.setenv("AOTBENCH_EMULATOR_THREADS", "4")
    assert threads.emulator_threads() == threads.ThreadUse(
        4, "the CUDA emulator's block threads, AOTBENCH_EMULATOR_THREADS=4")
    monkeypatch.delenv("AOTBENCH_EMULATOR_THREADS")
    assert threads.emulator_threads().count == 3
