"""Ops travel (aotbench.op.travel): an op pickles with its source and its own headers, unpickles without compiling,
and builds on first use wherever it lands: another process, another cache, a real Dask cluster."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.errors import AotbenchError
from aotbench.op.travel import TravellingOp
import browser_support as support

KERNEL = """#include <cstdint>
#include "custom_aot_extra.h"
#include "scale.h"
extern "C" int K(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                 void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *o = static_cast<float *>(params[1]);
  for (int64_t i = 0; i < shapes[0][0]; i++) o[i] = x[i] * scale_by() + OFFSET;
  return 0;
}
"""


def make_op(folder: Path, factor: float = 2.5):
    """A kernel in ``folder/src`` whose factor comes from a header in ``folder/inc`` (an -I folder) and whose
    shape rule is a lambda (plain pickle cannot carry it)."""
    (folder / "inc").mkdir(parents=True, exist_ok=True)
    (folder / "src").mkdir(parents=True, exist_ok=True)
    (folder / "inc" / "scale.h").write_text(f"#pragma once\ninline float scale_by() {{ return {factor}f; }}\n")
    (folder / "src" / "k.cc").write_text(KERNEL)
    return aotbench.Custom(f"{folder / 'src' / 'k.cc'}:K", lambda s: s, np.float32,
                           flags=["-O2", f"-I{folder / 'inc'}", "-DOFFSET=0.125f"])


def expected(x, factor=2.5):
    return x * np.float32(factor) + np.float32(0.125)


def test_on_the_same_machine_the_op_comes_back_as_the_same_build(tmp_path, rng):
    op = make_op(tmp_path)
    clone = pickle.loads(pickle.dumps(op))
    assert isinstance(clone, TravellingOp) and "not built yet" in repr(clone)
    x = rng.standard_normal(100, dtype=np.float32)
    np.testing.assert_array_equal(clone(x), op(x))
    assert clone.artifact.path == op.artifact.path and clone.artifact.cache_hit


def test_with_its_files_gone_the_op_builds_from_what_it_carries(tmp_path, rng):
    op = make_op(tmp_path / "made", factor=1.75)
    data = pickle.dumps(op)
    shutil.rmtree(tmp_path / "made")
    moved = pickle.loads(data)
    x = rng.standard_normal(257, dtype=np.float32)
    np.testing.assert_array_equal(moved(x), expected(x, 1.75))
    assert "travel" in Path(moved.source_path).parts
    include = next(f for f in moved.spec.flags if f.startswith("-I"))
    assert Path(include[2:], "scale.h").read_text().count("1.75f") == 1
    assert "-DOFFSET=0.125f" in moved.spec.flags and moved.spec.flags[0] == "-O2"
    again = pickle.loads(pickle.dumps(moved))  # a travelled op travels on
    np.testing.assert_array_equal(again(x), expected(x, 1.75))


def test_unpickling_compiles_nothing_and_writes_nothing(tmp_path):
    op = make_op(tmp_path / "made")
    payload = tmp_path / "op.pickle"
    payload.write_bytes(pickle.dumps(op))
    shutil.rmtree(tmp_path / "made")
    cache = tmp_path / "receiver-cache"
    code = ("import pickle, sys; op = pickle.loads(open(sys.argv[1], 'rb').read()); print(repr(op))")
    out = subprocess.run([sys.executable, "-c", code, str(payload)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AOTBENCH_CACHE_DIR": str(cache)}, check=False)
    assert out.returncode == 0, out.stderr
    assert "not built yet" in out.stdout and not cache.exists()


@pytest.mark.slow
def test_a_prebuilt_library_travels_as_its_path_and_loads_on_first_use(tmp_path, rng):
    op = make_op(tmp_path / "made", factor=2.0)
    prebuilt = aotbench.Custom(f"{op.artifact.path}:K", lambda s: s, np.float32)
    payload = tmp_path / "prebuilt.pickle"
    payload.write_bytes(pickle.dumps(prebuilt))
    cache = tmp_path / "receiver-cache"
    code = ("import pickle, sys, numpy as np; op = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "import os; print(os.path.exists(sys.argv[2])); print(op(np.ones(3, np.float32)).tolist())")
    out = subprocess.run([sys.executable, "-c", code, str(payload), str(cache)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "AOTBENCH_CACHE_DIR": str(cache)}, check=False)
    assert out.returncode == 0, out.stderr
    loaded_before_use, values = out.stdout.splitlines()
    assert loaded_before_use == "False" and values == str(expected(np.ones(3, np.float32), 2.0).tolist())


def test_a_changed_header_refuses_to_travel(tmp_path):
    op = make_op(tmp_path)
    (tmp_path / "inc" / "scale.h").write_text("#pragma once\ninline float scale_by() { return 9.0f; }\n")
    with pytest.raises(AotbenchError, match=r"scale\.h changed since the op was built"):
        pickle.dumps(op)


def _call_in_worker(op, x):
    return os.getpid(), op(x)


def test_a_process_pool_with_plain_pickle_carries_a_lambda_rule(tmp_path, rng):
    op = make_op(tmp_path / "made", factor=3.0)
    x = rng.standard_normal(64, dtype=np.float32)
    with ProcessPoolExecutor(max_workers=1) as pool:
        pid, got = pool.submit(_call_in_worker, op, x).result(timeout=120)
    assert pid != os.getpid()
    np.testing.assert_array_equal(got, expected(x, 3.0))


@pytest.mark.slow
def test_a_cell_op_travels_to_another_cache(tmp_path, rng):
    from IPython.utils.capture import capture_output

    from ipython_shell import aotbench_shell

    (tmp_path / "scale.h").write_text("#pragma once\ninline float scale_by() { return 0.5f; }\n")
    cell = KERNEL.replace("OFFSET", "0.125f")
    with aotbench_shell(tmp_path) as shell, capture_output():
        shell.run_cell_magic("aot_kernel", "cpu --out-shape 'lambda s: s' --out-dtype np.float32", cell)
        payload = pickle.dumps(shell.user_ns["K"])
    (tmp_path / "scale.h").unlink()
    x = rng.standard_normal(50, dtype=np.float32)
    code = ("import pickle, sys, numpy as np; op = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "np.save(sys.argv[2], op(np.load(sys.argv[3])))")
    (tmp_path / "op.pickle").write_bytes(payload)
    np.save(tmp_path / "x.npy", x)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "op.pickle"), str(tmp_path / "y.npy"),
                          str(tmp_path / "x.npy")], capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "AOTBENCH_CACHE_DIR": str(tmp_path / "other-cache")})
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected(x, 0.5))


# --- a real Dask cluster: a scheduler and two workers, separate processes, each with its own empty cache -------

@pytest.fixture
def dask_cluster(tmp_path):
    pytest.importorskip("distributed")
    port = support.free_port()
    address = f"tcp://127.0.0.1:{port}"
    caches = {name: tmp_path / f"{name}-cache" for name in ("scheduler", "worker0", "worker1")}
    procs = []

    def start(args, cache):
        log = open(tmp_path / f"{cache.name}.log", "wb")  # noqa: SIM115 - closed with the process below
        env = {**os.environ, "AOTBENCH_CACHE_DIR": str(cache), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
        procs.append((subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True), log))

    start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address",
           ":0"], caches["scheduler"])
    for name in ("worker0", "worker1"):
        start(["distributed.cli.dask_worker", address, "--nthreads", "1", "--dashboard-address", ":0",
               "--name", name], caches[name])
    from distributed import Client

    client = None
    try:
        deadline = time.monotonic() + 120
        while client is None:
            try:
                client = Client(address, timeout=10)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        client.wait_for_workers(2, timeout=120)
        yield client, caches
    finally:
        if client is not None:
            client.close()
        for proc, log in procs:
            proc.terminate()
        for proc, log in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


@pytest.mark.slow
def test_a_sweep_on_a_dask_cluster_with_the_source_gone(tmp_path, dask_cluster, rng):
    client, caches = dask_cluster
    op = make_op(tmp_path / "made", factor=1.5)
    sizes = [1000, 4000, 16000]
    started = time.perf_counter()
    here = aotbench.sweep(op, sizes, reference=lambda x: x * np.float32(1.5) + np.float32(0.125), budget_ms=20,
                          seed=5)
    here_s = time.perf_counter() - started
    (tmp_path / "made" / "src" / "k.cc").unlink()  # the source is gone; its header is read when the op pickles
    started = time.perf_counter()
    there = aotbench.sweep(op, sizes, reference=lambda x: x * np.float32(1.5) + np.float32(0.125), budget_ms=20,
                           seed=5, executor=client.get_executor())
    print(f"in-process sweep {here_s:.2f} s, on the cluster {time.perf_counter() - started:.2f} s "
          f"(two workers, each building the op into its empty cache)\n{here}\n{there}")
    assert [p.size for p in there.points] == sizes
    assert all(p.max_abs_error == 0 for p in there.points) and all(p.max_abs_error == 0 for p in here.points)
    x = rng.standard_normal(3333, dtype=np.float32)
    np.testing.assert_array_equal(client.submit(op, x, pure=False).result(timeout=120), op(x))
    assert not list(caches["scheduler"].rglob("*.so")), "the scheduler compiled something"
    built = [list(caches[w].rglob("k-*.so")) for w in ("worker0", "worker1")]
    assert any(built), "no worker built the kernel"


@pytest.mark.slow
def test_carried_files_land_in_the_receivers_cache_and_prune_removes_them(tmp_path, monkeypatch, rng):
    from aotbench.build import cache_admin

    op = make_op(tmp_path / "made", factor=0.75)
    data = pickle.dumps(op)
    shutil.rmtree(tmp_path / "made")
    receiver = tmp_path / "receiver"
    monkeypatch.setenv("AOTBENCH_CACHE_DIR", str(receiver))
    moved = pickle.loads(data)
    x = rng.standard_normal(31, dtype=np.float32)
    np.testing.assert_array_equal(moved(x), expected(x, 0.75))
    assert Path(moved.source_path).is_relative_to(receiver / "travel")
    cache_admin.prune(receiver, everything=True)
    assert not any(p.is_file() for p in (receiver / "travel").rglob("*"))
    np.testing.assert_array_equal(pickle.loads(data)(x), expected(x, 0.75))  # written again on the next use


def test_relative_paths_are_made_absolute_where_the_op_was_made(tmp_path, monkeypatch, rng):
    """A relative source path and -I folder mean the sender's folder, wherever the op is built again."""
    make_op(tmp_path / "made", factor=1.25)
    monkeypatch.chdir(tmp_path / "made")
    op = aotbench.Custom("src/k.cc:K", lambda s: s, np.float32, flags=["-Iinc", "-DOFFSET=0.125f"])
    data = pickle.dumps(op)
    decoy = tmp_path / "decoy"
    (decoy / "src").mkdir(parents=True)
    (decoy / "inc").mkdir()
    (decoy / "src" / "k.cc").write_text(KERNEL)
    (decoy / "inc" / "scale.h").write_text("#pragma once\ninline float scale_by() { return 999.0f; }\n")
    monkeypatch.chdir(decoy)  # a receiver whose working directory holds other files of the same names
    x = rng.standard_normal(20, dtype=np.float32)
    np.testing.assert_array_equal(pickle.loads(data)(x), expected(x, 1.25))


@pytest.mark.slow
def test_what_cannot_be_vouched_for_refuses_to_travel(tmp_path):
    from aotbench.build import cache_admin

    op = aotbench.Custom(f"{make_op(tmp_path / 'a').source_path}:K", lambda s: s, np.float32,
                         flags=["-I" + str(tmp_path / "a" / "inc"), "-DOFFSET=0.125f"], cache_dir=tmp_path / "c")
    cache_admin.prune(tmp_path / "c", everything=True)
    with pytest.raises(AotbenchError, match="build record .* is gone"):
        pickle.dumps(op)
    (tmp_path / "pre.h").write_text("#define OFFSET 0.125f\n")
    pre = aotbench.Custom(f"{op.source_path}:K", lambda s: s, np.float32,
                          flags=["-I" + str(tmp_path / "a" / "inc"), "-include", str(tmp_path / "pre.h")])
    with pytest.raises(AotbenchError, match="pre-include a file"):
        pickle.dumps(pre)


def test_probes_do_not_build_a_travelling_op(tmp_path):
    op = pickle.loads(pickle.dumps(make_op(tmp_path / "made")))
    for probe in ("_repr_html_", "_ipython_canary_method_should_not_exist_", "_partialmethod", "__array__"):
        assert not hasattr(op, probe)
    assert "not built yet" in repr(op)
    assert op.name == "K" and "built" in repr(op) and "not built" not in repr(op)
    assert hasattr(op, "_repr_html_")  # once built, it is the op
