"""A pytest plugin for ``bench/gpu_check.py``: a per-test time limit that holds even in a hung CUDA call, and one
JSON line per test outcome, written as it happens (so a run that is killed still says what it did).

    pytest -p gpu_check_pytest --test-limit 120 --outcomes outcomes.jsonl ...

The limit is a watchdog thread (``faulthandler.dump_traceback_later``): past it, the stacks are dumped to stderr
and the process exits (status 1), as pytest-timeout's thread method does, but with no package to install. The
line ``{"nodeid": ..., "started": true}`` written before each test names the one that hung: it has no outcome.
"""

from __future__ import annotations

import faulthandler
import json
import os

import pytest

_CONFIG: list = []  # the session's config (test reports do not carry it)
# The real stderr, taken when ``-p`` imports this module, before pytest captures fd 2: the stacks of a hung test
# must reach the log, not a capture buffer that dies with the process.
_STDERR = os.fdopen(os.dup(2), "w")


def pytest_configure(config) -> None:
    _CONFIG[:] = [config]


def pytest_addoption(parser) -> None:
    group = parser.getgroup("gpu_check")
    group.addoption("--test-limit", type=float, default=0.0, help="seconds one test may take (0: no limit)")
    group.addoption("--outcomes", default="", help="append one JSON line per test outcome to this file")


def _write(config, record: dict) -> None:
    path = config.getoption("--outcomes")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    limit = item.config.getoption("--test-limit")
    _write(item.config, {"nodeid": item.nodeid, "started": True, "limit_s": limit})
    if limit > 0:
        faulthandler.dump_traceback_later(limit, exit=True, file=_STDERR)
    try:
        yield
    finally:
        if limit > 0:
            faulthandler.cancel_dump_traceback_later()


def pytest_runtest_logreport(report) -> None:
    if report.when != "call" and not (report.failed or report.skipped):
        return
    reason = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif report.failed:
        reason = str(report.longreprtext).strip().splitlines()[-1][:300] if report.longreprtext else ""
    outcome = "error" if report.failed and report.when != "call" else report.outcome
    _write(_CONFIG[0], {"nodeid": report.nodeid, "outcome": outcome, "when": report.when,
                        "seconds": round(report.duration, 3), "reason": reason})
