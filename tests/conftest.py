"""Shared fixtures: every test builds into a temporary cache, never the user's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

KERNELS = Path(__file__).resolve().parent / "support" / "kernels"


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
def rng() -> np.random.Generator:
    """A freshly seeded generator per test (the seed is printed on failure by pytest's -ra summary via repr)."""
    return np.random.default_rng()


@pytest.fixture
def examples() -> Path:
    import aotbench

    return aotbench.examples_dir()
