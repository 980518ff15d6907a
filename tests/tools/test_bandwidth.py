"""The memory bandwidth behind the roofline: the threaded copy, the per-thread-count figures kept on disk, the
roofline sweep and compare draw, and the usable cores (affinity, cgroup CPU quotas) that bound its threads.

The stored figures are tested with a fake copy (exact expectations); the real copies are small and only their
structure is asserted: on this shared two-core machine a two-thread copy of 1.9 GiB per array ran at 45-47 GB/s
against 24-25 GB/s on one thread when nothing else ran, but at 14-33 GB/s while other processes held a core, and
smaller copies (256 MiB per array) did not scale at all, so no test asserts that more threads copy faster.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from aotbench.errors import ArgumentError
from aotbench.run import devices, threads
from aotbench.run.emulation import EMULATED
from aotbench.tools import bandwidth


# --- threaded_copy ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.uint8])
def test_threaded_copy_copies_every_element_for_any_thread_count(rng, dtype):
    size = int(rng.integers(1, 5000))
    shape = (size,) if rng.random() < 0.5 else (size, int(rng.integers(1, 4)))
    src = rng.integers(0, 100, size=shape).astype(dtype)
    for count in (1, 2, 3, int(rng.integers(4, 12)), size + 5):  # more threads than elements too
        dst = np.zeros_like(src)
        bandwidth.threaded_copy(dst, src, count)
        np.testing.assert_array_equal(dst, src)


def test_threaded_copy_splits_the_copy_among_threads(rng, monkeypatch):
    """Each chunk is copied by its own thread, all at once (the caller copies the first), chunks meet on cache
    lines. Every copy waits at a barrier of as many threads: copies made one after another would break it."""
    seen: list[tuple[int, int, int]] = []
    real = np.copyto
    count = int(rng.integers(2, 6))
    barrier = threading.Barrier(count, timeout=30)
    lock = threading.Lock()

    def spy(dst, src, *args, **kwargs):
        with lock:
            seen.append((threading.get_ident(), dst.ctypes.data, dst.size))
        barrier.wait()
        return real(dst, src, *args, **kwargs)

    monkeypatch.setattr(bandwidth.np, "copyto", spy)
    src = rng.standard_normal(int(rng.integers(10_000, 50_000))).astype(np.float32)
    dst = np.empty_like(src)
    bandwidth.threaded_copy(dst, src, count)
    monkeypatch.undo()
    np.testing.assert_array_equal(dst, src)
    assert len(seen) == count and len({ident for ident, _, _ in seen}) == count  # alive together: distinct
    assert threading.get_ident() in {ident for ident, _, _ in seen}
    starts = sorted(address - dst.ctypes.data for _, address, _ in seen)
    assert starts[0] == 0 and all(s % bandwidth.CHUNK_ALIGN_BYTES == 0 for s in starts)
    assert sum(size for _, _, size in seen) == src.size


def test_chunk_bounds_cover_the_array_in_aligned_non_empty_chunks(rng):
    for _ in range(200):
        size, count = int(rng.integers(1, 100_000)), int(rng.integers(1, 40))
        itemsize = int(rng.choice([1, 2, 4, 8, 16, 3]))
        bounds = bandwidth._chunk_bounds(size, itemsize, count)
        assert bounds[0] == 0 and bounds[-1] == size and len(bounds) - 1 <= count
        assert all(a < b for a, b in zip(bounds, bounds[1:]))
        if bandwidth.CHUNK_ALIGN_BYTES % itemsize == 0:
            assert all(b * itemsize % bandwidth.CHUNK_ALIGN_BYTES == 0 for b in bounds[1:-1])


def test_threaded_copy_refuses_what_it_cannot_copy(rng):
    src = rng.standard_normal(64).astype(np.float32)
    for dst, source in ((np.empty(63, np.float32), src), (np.empty(64, np.float64), src),
                        (np.empty(128, np.float32)[::2], src), (src.tolist(), src)):
        with pytest.raises(ArgumentError):
            bandwidth.threaded_copy(dst, source, 2)
    frozen = np.empty_like(src)
    frozen.flags.writeable = False
    with pytest.raises(ArgumentError, match="writeable"):
        bandwidth.threaded_copy(frozen, src, 2)
    for bad in (0, -1, True, 2.0, "2"):
        with pytest.raises(ArgumentError, match="threads"):
            bandwidth.threaded_copy(np.empty_like(src), src, bad)


# --- the measured copy -----------------------------------------------------------------------------------------
def test_copy_run_measures_a_rate_and_the_share_of_time_on_a_cpu(rng):
    nbytes = int(rng.integers(1 << 18, 1 << 21)) // 4 * 4
    for count in (1, 2):
        run = bandwidth.copy_run(nbytes, repeats=2, threads=count)
        assert run.gbps > 0 and 0 < run.cpu_share <= 1
    assert bandwidth.copy_bandwidth_gbps(nbytes, repeats=2, threads=2) > 0
    with pytest.raises(ArgumentError):
        bandwidth.copy_bandwidth_gbps(2)
    with pytest.raises(ArgumentError):
        bandwidth.copy_bandwidth_gbps(1 << 20, repeats=0)
    with pytest.raises(ArgumentError, match="threads"):
        bandwidth.copy_bandwidth_gbps(1 << 20, threads=0)
    assert bandwidth.default_copy_bytes() >= 256 << 20


class FakeCopies:
    """Stands in for copy_run: hands out the given (gbps, cpu_share) pairs in order and records each call."""

    def __init__(self, *runs: tuple[float, float]):
        self.runs = list(runs)
        self.calls: list[tuple[int, int]] = []

    def __call__(self, nbytes, repeats=bandwidth.COPY_REPEATS, threads=1, attempts=1):
        assert attempts == bandwidth.COPY_ATTEMPTS
        self.calls.append((nbytes, threads))
        return bandwidth.CopyRun(*self.runs.pop(0))


def test_memory_bandwidth_is_measured_once_per_thread_count_and_kept_on_disk(tmp_path, monkeypatch):
    fake = FakeCopies((11.0, 1.0), (22.0, 0.97), (33.0, 1.0), (44.0, 0.99))
    monkeypatch.setattr(bandwidth, "copy_run", fake)
    root = tmp_path / "cache"
    assert bandwidth.memory_bandwidth_gbps(cache_dir=root, nbytes=4096) == 11.0
    stored = root / bandwidth.BANDWIDTH_FILE
    mtime = stored.stat().st_mtime_ns
    [(key, entry)] = json.loads(stored.read_text())["machines"].items()
    assert key.endswith("| 4096 bytes | 1 thread") and entry["threads"] == 1 and entry["cpu_share"] == 1.0
    assert entry["gbps"] == 11.0 and entry["nbytes"] == 4096 and entry["numpy"] == np.__version__
    assert bandwidth.memory_bandwidth_gbps(cache_dir=root, nbytes=4096) == 11.0  # this process's memo
    bandwidth._known_bandwidth.cache_clear()  # as a new process would: read from disk, do not measure
    assert bandwidth.memory_bandwidth_gbps(cache_dir=root, nbytes=4096) == 11.0
    assert fake.calls == [(4096, 1)] and stored.stat().st_mtime_ns == mtime
    # the all-core figure is kept beside the one-core figure, under its own key
    assert bandwidth.memory_bandwidth_gbps(cache_dir=root, nbytes=4096, threads=2) == 22.0
    machines = json.loads(stored.read_text())["machines"]
    assert sorted(e["threads"] for e in machines.values()) == [1, 2]
    assert any(k.endswith("| 2 threads") for k in machines)
    assert bandwidth.memory_bandwidth_gbps(refresh=True, cache_dir=root, nbytes=4096) == 33.0
    assert bandwidth.memory_bandwidth_gbps(cache_dir=root, nbytes=4096, threads=2) == 22.0  # refresh: one key
    assert bandwidth.memory_bandwidth_gbps(cache_dir=root, nbytes=8192) == 44.0  # another size: its own entry
    assert fake.calls == [(4096, 1), (4096, 2), (4096, 1), (8192, 1)]
    assert len(json.loads(stored.read_text())["machines"]) == 3
    with pytest.raises(ArgumentError, match="threads"):
        bandwidth.memory_bandwidth_gbps(cache_dir=root, nbytes=4096, threads=0)


def test_a_copy_measured_while_the_cores_were_busy_is_measured_again(monkeypatch):
    """Under BUSY_SHARE the timed copies run again on the same arrays (``attempts`` in all, stopping once a copy
    had the cores) and the fastest is kept, with its share."""
    busy = bandwidth.BUSY_SHARE / 2
    runs = [(15.0, busy), (40.0, 0.99), (9.0, busy), (12.0, busy), (10.0, busy), (50.0, 1.0)]
    arrays = []

    def timed(dst, src, repeats, threads):
        arrays.append((dst.ctypes.data, src.ctypes.data, repeats, threads))
        return bandwidth.CopyRun(*runs.pop(0))

    monkeypatch.setattr(bandwidth, "_timed_copies", timed)
    assert bandwidth.copy_run(4096, repeats=2, threads=2, attempts=3) == bandwidth.CopyRun(40.0, 0.99)
    assert len(arrays) == 2 and len(set(arrays)) == 1 and arrays[0][2:] == (2, 2)  # the same arrays again
    assert bandwidth.copy_run(4096, attempts=3) == bandwidth.CopyRun(12.0, busy)
    assert len(arrays) == 5
    assert bandwidth.copy_run(4096, attempts=3).gbps == 50.0 and len(arrays) == 6  # one attempt is enough
    with pytest.raises(ArgumentError, match="attempts"):
        bandwidth.copy_run(4096, attempts=0)


def test_a_figure_stored_while_busy_is_measured_again_by_the_next_process(tmp_path, monkeypatch):
    busy = bandwidth.BUSY_SHARE / 2
    fake = FakeCopies((20.0, busy), (18.0, busy), (30.0, 0.95), (99.0, 1.0))
    monkeypatch.setattr(bandwidth, "copy_run", fake)
    assert bandwidth.memory_bandwidth_gbps(cache_dir=tmp_path, nbytes=4096, threads=2) == 20.0
    assert bandwidth.memory_bandwidth_gbps(cache_dir=tmp_path, nbytes=4096, threads=2) == 20.0  # memo: same process
    bandwidth._known_bandwidth.cache_clear()  # a new process: measures again, keeps the faster figure
    assert bandwidth.memory_bandwidth_gbps(cache_dir=tmp_path, nbytes=4096, threads=2) == 20.0
    bandwidth._known_bandwidth.cache_clear()
    assert bandwidth.memory_bandwidth_gbps(cache_dir=tmp_path, nbytes=4096, threads=2) == 30.0
    bandwidth._known_bandwidth.cache_clear()  # measured with the cores free: kept for good
    assert bandwidth.memory_bandwidth_gbps(cache_dir=tmp_path, nbytes=4096, threads=2) == 30.0
    assert len(fake.calls) == 3
    record = bandwidth.bandwidth_record(cache_dir=tmp_path, nbytes=4096, threads=2)
    assert record["cpu_share"] == 0.95
    record["gbps"] = -1.0  # a copy: the memo is not changed through it
    assert bandwidth.memory_bandwidth_gbps(cache_dir=tmp_path, nbytes=4096, threads=2) == 30.0


# --- the roofline ----------------------------------------------------------------------------------------------
class FakeRecords:
    """Stands in for bandwidth_record: 10 GB/s per thread, a CPU share per thread count."""

    def __init__(self, shares: dict[int, float] | None = None):
        self.shares = shares or {}
        self.asked: list[int] = []

    def __call__(self, refresh=False, cache_dir=None, nbytes=None, threads=1):
        self.asked.append(threads)
        return {"gbps": 10.0 * threads, "threads": threads, "cpu_share": self.shares.get(threads, 1.0)}


@pytest.mark.parametrize("cores", [1, 2, 4])
def test_the_roofline_is_the_copy_on_the_kernels_threads_at_most_the_usable_cores(monkeypatch, cores):
    records = FakeRecords()
    monkeypatch.setattr(bandwidth, "bandwidth_record", records)
    monkeypatch.setattr(bandwidth, "usable_cores", lambda: cores)
    for asked in (None, 1, 2, 3, 8):
        line = bandwidth.roofline(devices.CPU, asked)
        used = min(asked or 1, cores)
        assert line.threads == used and line.gbps == 10.0 * used and not line.note
        assert line.source == f"numpy copy on {used} thread{'' if used == 1 else 's'}"
        assert str(line) == f"{line.source}, {line.gbps:.1f} GB/s"
    assert records.asked == [min(t or 1, cores) for t in (None, 1, 2, 3, 8)]
    assert bandwidth.roofline(threads=1) == bandwidth.roofline(devices.CPU, 1)  # the cpu by default
    with pytest.raises(ArgumentError, match="threads"):
        bandwidth.roofline(devices.CPU, 0)


def test_the_emulator_keeps_its_host_memory_words_and_a_gpu_its_own_copy(monkeypatch):
    monkeypatch.setattr(bandwidth, "bandwidth_record", FakeRecords({2: bandwidth.BUSY_SHARE / 2}))
    monkeypatch.setattr(bandwidth, "usable_cores", lambda: 2)
    emulated = bandwidth.roofline(EMULATED, 2)
    assert emulated.source == "numpy copy on 2 threads (host memory: the emulator runs on the CPU)"
    assert "other processes held the cores" in emulated.note and "threads=2" in emulated.note
    assert emulated.note in str(emulated)

    class Device(devices.Device):
        name, copy_label = "gpu", "device-to-device copy"

        def copy_bandwidth_gbps(self):
            return 1234.5

    line = bandwidth.roofline(Device(), 64)
    assert (line.gbps, line.source, line.threads, line.note) == (1234.5, "device-to-device copy", None, "")


# --- usable cores ----------------------------------------------------------------------------------------------
def _tree(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize("layout, expected", [
    # cgroup v2: the smallest quota along the path to the root
    ({"proc": "0::/a/b\n", "fs/cgroup.controllers": "cpu\n", "fs/a/cpu.max": "150000 100000\n",
      "fs/a/b/cpu.max": "max 100000\n"}, 1.5),
    ({"proc": "0::/a/b\n", "fs/cgroup.controllers": "cpu\n", "fs/a/cpu.max": "400000 100000\n",
      "fs/a/b/cpu.max": "50000 100000\n"}, 0.5),
    ({"proc": "0::/\n", "fs/cgroup.controllers": "cpu\n", "fs/cpu.max": "max 100000\n"}, None),
    # a hybrid system: v1 controllers, the unified hierarchy under unified/
    ({"proc": "4:cpu,cpuacct:/job\n0::/\n", "fs/cpu,cpuacct/job/cpu.cfs_quota_us": "300000\n",
      "fs/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n", "fs/unified/cpu.max": "max 100000\n"}, 3.0),
    ({"proc": "4:cpu,cpuacct:/job\n", "fs/cpu,cpuacct/job/cpu.cfs_quota_us": "-1\n",
      "fs/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"}, None),
    # a container: its cgroup's path is not under the mount, which is the container's own cgroup
    ({"proc": "1:cpu:/docker/abc\n", "fs/cpu/cpu.cfs_quota_us": "200000\n", "fs/cpu/cpu.cfs_period_us": "100000\n"},
     2.0),
    ({"proc": "0::/x\n"}, None),  # nothing readable
])
def test_cgroup_cpu_limits_are_read_along_the_path(tmp_path, layout, expected):
    _tree(tmp_path, layout)
    limit = threads.cgroup_cpu_limit(tmp_path / "fs", tmp_path / "proc")
    assert limit == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("affinity, quota, cores, reason", [
    (2, None, 2, "2 usable cores (affinity)"),
    (4, 1.5, 2, "2 usable cores (cgroup CPU quota 1.5 CPUs; affinity 4)"),
    (4, 0.25, 1, "1 usable core (cgroup CPU quota 0.25 CPUs; affinity 4)"),
    (2, 8.0, 2, "2 usable cores (affinity)"),
])
def test_usable_cores_is_the_affinity_mask_under_the_cgroup_quota(monkeypatch, affinity, quota, cores, reason):
    monkeypatch.setattr(threads, "affinity_cores", lambda: affinity)
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: quota)
    assert threads.usable_cores() == cores and threads.core_use().source == reason


def test_usable_cores_here_is_within_the_affinity_mask():
    import os

    assert 1 <= threads.usable_cores() <= len(os.sched_getaffinity(0)) == threads.affinity_cores()
