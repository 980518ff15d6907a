"""Shared fixtures: every test builds into a temporary cache, never the user's, and draws from a seeded ``rng``
whose seed a failure reports (``--seed N`` or ``AOTBENCH_TEST_SEED=N`` replays it)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import numpy as np
import pytest

KERNELS = Path(__file__).resolve().parent / "support" / "kernels"
SEED_ENV = "AOTBENCH_TEST_SEED"
SEED_PROPERTY = "rng seed"


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None, metavar="N",
                     help=f"seed every test's rng fixture with N (default: {SEED_ENV}, else a fresh seed per test)")


def fixed_seed(config) -> int | None:
    """The seed asked for on the command line, else in the environment; None for a fresh seed per test."""
    seed, source = config.getoption("seed"), "--seed"
    if seed is None:
        text, source = os.environ.get(SEED_ENV, "").strip(), SEED_ENV
        if not text:
            return None
        seed = int(text) if text.isdigit() else -1
    if seed < 0:
        raise pytest.UsageError(f"{source} must be a non-negative integer seed (such as 1234); "
                                f"leave it out for a fresh seed per test")
    return seed


def pytest_configure(config):
    fixed_seed(config)  # a malformed AOTBENCH_TEST_SEED stops the run before any test, not at the first rng


def pytest_report_header(config):
    seed = fixed_seed(config)
    return None if seed is None else f"rng seed: {seed} for every test"


def seed_of(report) -> int | None:
    return next((value for name, value in report.user_properties if name == SEED_PROPERTY), None)


def rerun_line(seed: int, nodeid: str) -> str:
    return f"rng seed: {seed} (rerun: pytest --seed {seed} {nodeid})"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that drew from ``rng`` shows its seed and the command that replays it, below its traceback."""
    report = yield
    seed = seed_of(report)
    if report.failed and seed is not None:
        report.sections.append((SEED_PROPERTY, rerun_line(seed, report.nodeid)))
    return report


def pytest_terminal_summary(terminalreporter):
    """The seeds of the failed tests again at the end, next to pytest's short summary."""
    seeds = {rep.nodeid: seed_of(rep) for key in ("failed", "error") for rep in terminalreporter.stats.get(key, [])
             if getattr(rep, "when", None) and seed_of(rep) is not None}
    if seeds:
        terminalreporter.section("rng seeds of failed tests", sep="-")
        for nodeid, seed in seeds.items():
            terminalreporter.line(rerun_line(seed, nodeid))


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory) -> Path:
    """One cache directory for the whole session (the native host is built into it once)."""
    path = tmp_path_factory.mktemp("aotbench-cache")
    old = os.environ.get("AOTBENCH_CACHE_DIR")
    os.environ["AOTBENCH_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("AOTBENCH_CACHE_DIR", None)
    else:
        os.environ["AOTBENCH_CACHE_DIR"] = old


def pytest_collection_modifyitems(config, items):
    """``nvcc`` tests need the CUDA compiler, ``gpu`` tests a CUDA device: skip them cleanly where absent."""
    from aotbench.build import nvcc
    from aotbench.run.gpu_availability import gpu_unavailable_reason
    from aotbench.errors import ToolchainNotFoundError

    try:
        nvcc.find_nvcc()
        no_nvcc = None
    except ToolchainNotFoundError as exc:
        no_nvcc = str(exc)
    no_gpu = gpu_unavailable_reason() if any("gpu" in item.keywords for item in items) else None
    for item in items:
        if "nvcc" in item.keywords and no_nvcc:
            item.add_marker(pytest.mark.skip(reason=no_nvcc))
        if "gpu" in item.keywords and no_gpu:
            item.add_marker(pytest.mark.skip(reason=f"no usable GPU: {no_gpu}"))


@pytest.fixture
def kernels() -> Path:
    """The directory of the test kernel sources."""
    return KERNELS


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator per test, seeded by ``--seed``/``AOTBENCH_TEST_SEED`` or freshly; the seed is recorded on the
    test (``user_properties``, also in a JUnit XML report) so that a failure can name it."""
    seed = fixed_seed(request.config)
    if seed is None:
        seed = secrets.randbits(32)
    request.node.user_properties.append((SEED_PROPERTY, seed))
    return np.random.default_rng(seed)


@pytest.fixture
def examples() -> Path:
    import aotbench

    return aotbench.examples_dir()
