"""What the browser tests share: Debian's Chromium and its flags, and the servers they start (Voila, JupyterLab),
each process carrying a marker in its environment so that whatever outlives a test is found and killed."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MARKER_VAR = "AOTBENCH_BROWSER_TEST_MARKER"
SERVER_START_TIMEOUT_S = 60


def missing(*modules: str) -> str | None:
    """Why the browser test cannot run here (no Chromium, or a Python package missing), or None."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is not installed (apt-get install chromium)"
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return f"the Python package {module!r} is not installed (pip install '.[test]')"
    return None


def process_marker(*modules: str):
    """A fixture ``marker``: a value for every process the test starts (``MARKER_VAR``); whatever still carries
    it at the end is killed. It skips the test where Chromium or one of ``modules`` is missing."""
    @pytest.fixture
    def marker():
        reason = missing(*modules)
        if reason:
            pytest.skip(reason)
        value = uuid.uuid4().hex
        yield value
        killed = kill_marked(value)
        if killed:
            print(f"killed leftover processes {killed}")

    return marker


def marked_pids(marker: str) -> list[int]:
    """Ids of the live processes whose environment carries ``MARKER_VAR=marker`` (ours only: others are unreadable
    or lack it)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_marked(marker: str) -> list[int]:
    """SIGKILL every process still carrying the marker; returns the ids that had to be killed."""
    killed = []
    for _ in range(5):
        pids = marked_pids(marker)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.2)
    return killed


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def wait_until_up(proc: subprocess.Popen, probe: str, timeout_s: float, server: str) -> bool:
    """True once the server answers ``probe`` (any HTTP status: polling "/" could start a kernel every time);
    False if the process exited (its port was taken, say)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(probe, timeout=2).close()
            return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise AssertionError(f"{server} did not answer on {probe} within {timeout_s} s")


def stop(proc: subprocess.Popen, marker: str) -> None:
    """SIGTERM lets the server shut its kernels down; then whatever carries the marker is killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    kill_marked(marker)


def screenshot_dir(tmp_path: Path) -> Path:
    """Where a test saves its screenshots: ``AOTBENCH_SCREENSHOT_DIR`` if set, else a folder of ``tmp_path``."""
    chosen = os.environ.get("AOTBENCH_SCREENSHOT_DIR")
    path = Path(chosen) if chosen else tmp_path / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch(pw, marker: str | None = None):
    """Debian's Chromium, headless, with the project's flags (``playwright install`` is never run)."""
    env = {"env": {**os.environ, MARKER_VAR: marker}} if marker else {}
    return pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, **env)


def local_page(browser, viewport: dict, origin: str, console: list[str]):
    """A page that may fetch only from ``origin`` (the test's own server) and records console messages and
    page errors into ``console``."""
    page = browser.new_page(viewport=viewport)
    page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
    page.on("pageerror", lambda exc: console.append(f"pageerror: {exc}"))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(origin) else route.abort())
    return page


def jupyter_lab_argv(python: str, port: int, token: str, root: Path) -> list[str]:
    """JupyterLab on 127.0.0.1:``port`` serving ``root``, with ``token``, and nothing fetched from the network."""
    return [python, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
            "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]


def start_server(argv_for, probe_for, cwd: Path, env: dict, log: Path, marker: str,
                 server: str) -> tuple[subprocess.Popen, int]:
    """Start ``argv_for(port)`` on a free port and wait until ``probe_for(port)`` answers; three tries, since the
    port may be taken between choosing and binding it. Returns the process and its port."""
    for _attempt in range(3):
        port = free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv_for(port), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            up = wait_until_up(proc, probe_for(port), SERVER_START_TIMEOUT_S, server)
        except BaseException:
            stop(proc, marker)
            raise
        if up:
            return proc, port
        stop(proc, marker)
    pytest.fail(f"{server} did not start\n{tail(log)}")
