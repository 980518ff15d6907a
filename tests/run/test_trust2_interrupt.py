"""Issue 23, item 12: Ctrl-C / the notebook's stop button on an in-process kernel in an endless loop gives control
back within about a second: a ``KernelInterrupted`` (a ``KeyboardInterrupt``) with an honest account, the
variables kept, the op usable again. A kernel that returns soon after the interrupt is not abandoned.

Checked in a plain subprocess, through a real Jupyter kernel (``jupyter_client``'s ``interrupt_kernel``), and once
through JupyterLab's stop button in Chromium.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import browser_support as support

pytestmark = pytest.mark.slow

ROOT = str(Path(__file__).resolve().parents[2])  # this checkout's aotbench, also in the child processes

LOOP_KERNEL = r"""
#include <cstdint>
#include <unistd.h>
// Loops for ever when x[0] < 0; sleeps x[0] microseconds when x[0] > 1000; then y = 2x + 1. loop_state says
// where it is (1: looping, 2: sleeping), so that a test interrupts it there and not before.
extern "C" volatile int loop_state = 0;
extern "C" int Loop(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  const float *x = static_cast<const float *>(params[0]);
  float *y = static_cast<float *>(params[1]);
  volatile int forever = x[0] < 0;
  if (forever) loop_state = 1;
  while (forever) {}
  if (x[0] > 1000) {
    loop_state = 2;
    usleep(static_cast<useconds_t>(x[0]));
  }
  for (int64_t i = 0; i < shapes[0][0]; ++i) y[i] = x[i] * 2.0f + 1.0f;
  return 0;
}
"""

SCRIPT = r"""
import ctypes, os, signal, sys, threading, time
import numpy as np
import aotbench
import aotbench.errors

KernelInterrupted = getattr(aotbench.errors, "KernelInterrupted", type("Missing", (Exception,), {}))
op = aotbench.Custom(sys.argv[1] + ":Loop", lambda s: s, lambda d: d)
rng = np.random.default_rng()
x = (rng.random(16) + 1).astype(np.float32)
assert np.array_equal(op(x), x * 2 + 1)
kept = rng.random(5)
kept_copy = kept.copy()
state = ctypes.c_int.in_dll(op.library.handle, "loop_state")

def interrupt(after, when):
    state.value = 0
    def run():
        while state.value != when:  # the kernel got there
            time.sleep(0.001)
        time.sleep(after)
        print("SIGINT", time.monotonic(), flush=True)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=run, daemon=True).start()

# the fast path (a planned signature), then a first (guarded) call of a new one
for label, n in (("fast", 16), ("guarded", 24)):
    bad = (rng.random(n) + 1).astype(np.float32)
    bad[0] = -1.0
    interrupt(0.3, 1)
    try:
        op(bad)
        print(label, "RETURNED", flush=True)
    except KernelInterrupted as exc:
        print(label, "INTERRUPTED", time.monotonic(), repr(str(exc)), flush=True)
    y = (rng.random(n) + 1).astype(np.float32)
    print(label, "AGAIN", np.array_equal(op(y), y * 2 + 1), np.array_equal(kept, kept_copy), flush=True)

# a kernel that returns 0.3 s after a SIGINT sent 0.05 s into its sleep: a KeyboardInterrupt, nothing abandoned
slow = (rng.random(16) + 1).astype(np.float32)
slow[0] = 350000.0
interrupt(0.05, 2)
try:
    op(slow)
    time.sleep(2)
    print("slow NO-INTERRUPT", flush=True)
except KernelInterrupted:
    print("slow ABANDONED", flush=True)
except KeyboardInterrupt:
    print("slow PLAIN", flush=True)
y = (rng.random(16) + 1).astype(np.float32)
print("slow AGAIN", np.array_equal(op(y), y * 2 + 1), flush=True)
"""


@pytest.fixture
def loop_source(tmp_path) -> Path:
    path = tmp_path / "loop.cc"
    path.write_text(LOOP_KERNEL)
    return path


def test_ctrl_c_abandons_an_endless_kernel_in_a_script(loop_source, tmp_path, session_cache):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "AOTBENCH_CACHE_DIR": str(session_cache), "PYTHONPATH": ROOT}
    try:
        proc = subprocess.run([sys.executable, str(script), str(loop_source)], capture_output=True, text=True,
                              timeout=60, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the interrupted kernel never gave control back: {exc.stdout!r} {exc.stderr!r}")
    out = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = [float(line.split()[1]) for line in out if line.startswith("SIGINT")]
    for k, label in enumerate(("fast", "guarded")):
        done = [line for line in out if line.startswith(f"{label} INTERRUPTED")]
        assert done, proc.stdout + proc.stderr
        waited = float(done[0].split()[2]) - sent[k]
        print(f"{label}: SIGINT -> KernelInterrupted in {waited:.2f} s")
        # about 0.5-1 s here (the grace period and a little); the bound only proves it returns (before: never),
        # loose enough for a loaded CI machine
        assert 0 < waited < 10, waited
        message = done[0]
        for words in ("abandoned", "outputs were not returned", "leaked", "variables are kept", "hang",
                      "OpenMP", "isolate=True"):
            assert words in message, message
        assert f"{label} AGAIN True True" in out, proc.stdout
    assert "slow PLAIN" in out, proc.stdout + proc.stderr
    assert "slow AGAIN True" in out


def _kernel_manager(work_dir: Path, cache: Path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = work_dir / "kernels" / "aotbench-interrupt"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "aotbench interrupt test", "language": "python",
        "env": {"IPYTHONDIR": str(work_dir / "ipython"), "AOTBENCH_CACHE_DIR": str(cache), "PYTHONPATH": ROOT},
    }))
    ksm = KernelSpecManager(kernel_dirs=[str(work_dir / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name="aotbench-interrupt", kernel_spec_manager=ksm,
                         connection_file=str(work_dir / "kernel.json"))


def _reply(client, msg_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no execute reply within {timeout} s")
        try:
            msg = client.get_shell_msg(timeout=left)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg["content"]


def _wait_for_text(client, msg_id: str, text: str, timeout: float) -> None:
    """Wait until the cell ``msg_id`` has printed ``text`` (its stream output on iopub)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = client.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream"
                and text in msg["content"]["text"]):
            return
    raise TimeoutError(f"the cell did not print {text!r} within {timeout} s")


def _stream(client, msg_id: str) -> str:
    text = []
    while True:
        try:
            msg = client.get_iopub_msg(timeout=1)
        except queue.Empty:
            return "".join(text)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            text.append(msg["content"]["text"])


def test_interrupt_kernel_stops_an_endless_kernel_in_jupyter(loop_source, tmp_path, session_cache):
    km = _kernel_manager(tmp_path, session_cache)
    km.start_kernel(cwd=str(tmp_path))
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        setup = client.execute(textwrap.dedent(f"""
            import numpy as np, aotbench
            rng = np.random.default_rng()
            op = aotbench.Custom({str(loop_source)!r} + ":Loop", lambda s: s, lambda d: d)
            x = (rng.random(32) + 1).astype(np.float32)
            assert np.array_equal(op(x), x * 2 + 1)
            kept = rng.random(7); kept_sum = float(kept.sum())
            bad = x.copy(); bad[0] = -1.0
        """))
        assert _reply(client, setup, 120)["status"] == "ok"
        for cell in ("y = op(bad)", "y = op(np.concatenate([bad, bad]))"):  # the fast path, then a guarded call
            looping = client.execute(f"print('LOOPING', flush=True); {cell}")
            _wait_for_text(client, looping, "LOOPING", 60)
            time.sleep(1.0)  # inside the loop
            sent = time.monotonic()
            km.interrupt_kernel()
            reply = _reply(client, looping, 30)
            waited = time.monotonic() - sent
            print(f"{cell}: interrupt_kernel() -> execute reply in {waited:.2f} s")
            assert reply["status"] == "error", reply
            assert reply["ename"] in ("KernelInterrupted", "KeyboardInterrupt"), reply
            assert "abandoned" in reply["evalue"] and "isolate=True" in reply["evalue"], reply
            assert waited < 15, waited  # 0.5-0.7 s measured; before: no reply until a restart
            after = client.execute("print(float(kept.sum()) == kept_sum, np.array_equal(op(x + 1), 2 * (x + 1) + 1))")
            assert _reply(client, after, 60)["status"] == "ok"
            assert _stream(client, after).split() == ["True", "True"]
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


# --- JupyterLab's stop button in Chromium -----------------------------------------------------------------------

marker = support.process_marker("jupyterlab", "playwright", "ipykernel")
PAGE_TIMEOUT_MS = 120_000  # JupyterLab's first load, the kernel's start, building the host and the kernel

LAB_CELLS = [
    "import numpy as np, aotbench\n"
    "rng = np.random.default_rng()\n"
    "op = aotbench.Custom({source!r} + ':Loop', lambda s: s, lambda d: d)\n"
    "x = (rng.random(32) + 1).astype(np.float32)\n"
    "assert np.array_equal(op(x), x * 2 + 1)\n"
    "kept = rng.random(7); kept_sum = float(kept.sum())\n"
    "bad = x.copy(); bad[0] = -1.0\n"
    "print('READY')",
    "print('LOOPING', flush=True); y = op(bad)",
    "print('AFTER', float(kept.sum()) == kept_sum, np.array_equal(op(x + 1), 2 * (x + 1) + 1))",
]


def _lab_env(root: Path) -> dict[str, str]:
    dirs = {name: root / name for name in ("config", "data", "runtime", "ipython", "settings", "workspaces")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    spec_dir = dirs["data"] / "kernels" / "python3"  # first on Jupyter's path: a kernel of this interpreter
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    news = dirs["settings"] / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))
    return {"JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "IPYTHONDIR": str(dirs["ipython"]),
            "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]), "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"])}


@pytest.mark.browser
@pytest.mark.slow
def test_jupyterlab_stop_button_stops_an_endless_kernel(loop_source, tmp_path, marker, session_cache):
    import uuid

    from playwright.sync_api import sync_playwright

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    cells = [{"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None, "outputs": [],
              "source": text.format(source=str(loop_source)) if i == 0 else text} for i, text in enumerate(LAB_CELLS)]
    (notebooks / "stop.ipynb").write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JUPYTER", "JPY_"))}
    env.update(_lab_env(tmp_path / "jupyter"), **{support.MARKER_VAR: marker, "PYTHONPATH": ROOT,
                                                   "AOTBENCH_CACHE_DIR": str(session_cache)})
    token = uuid.uuid4().hex
    log = tmp_path / "jupyter-lab.log"
    proc, port = support.start_server(
        lambda port: support.jupyter_lab_argv(sys.executable, port, token, notebooks),
        lambda port: f"http://127.0.0.1:{port}/api", notebooks, env, log, marker, "jupyter lab")
    origin = f"http://127.0.0.1:{port}"
    console: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = support.launch(pw, marker)
            try:
                page = support.local_page(browser, {"width": 1400, "height": 900}, origin, console)
                page.goto(f"{origin}/lab/tree/stop.ipynb?token={token}", wait_until="domcontentloaded",
                          timeout=PAGE_TIMEOUT_MS)
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=PAGE_TIMEOUT_MS)
                code = page.locator(".jp-Notebook .jp-CodeCell")
                output = lambda i: code.nth(i).locator(".jp-OutputArea")  # noqa: E731

                def run(i: int) -> None:
                    """Select the cell and run it (again, while the kernel's first "idle" was not yet the
                    connected kernel's: a request sent then is lost) until its prompt shows it queued or run."""
                    prompt = code.nth(i).locator(".jp-InputPrompt")
                    for _ in range(10):
                        prompt.click()
                        page.keyboard.press("Shift+Enter")
                        with contextlib.suppress(Exception):
                            page.wait_for_function("(el) => !/\\[\\s*\\]/.test(el.textContent)",
                                                   arg=prompt.element_handle(), timeout=5_000)
                            return
                    raise AssertionError(f"cell {i} never started: {prompt.inner_text()!r}")

                run(0)
                output(0).get_by_text("READY").wait_for(timeout=PAGE_TIMEOUT_MS)
                run(1)
                output(1).get_by_text("LOOPING").wait_for(timeout=60_000)
                time.sleep(1.0)  # inside the endless loop
                stop = page.locator("[data-command='notebook:interrupt-kernel']").first  # the toolbar's square
                clicked = time.monotonic()
                stop.click()
                output(1).get_by_text("KernelInterrupted").first.wait_for(timeout=10_000)
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=10_000)
                waited = time.monotonic() - clicked
                shown = output(1).inner_text()
                run(2)
                output(2).get_by_text("AFTER").wait_for(timeout=60_000)
                after = output(2).inner_text()
                page.screenshot(path=str(support.screenshot_dir(tmp_path) / "stop_button.png"))
            except Exception as exc:
                with contextlib.suppress(Exception):
                    page.screenshot(path=str(support.screenshot_dir(tmp_path) / "stop_button_failed.png"))
                raise AssertionError(f"{exc}\n{support.tail(log)}\n--- console ---\n" + "\n".join(console[-30:])) \
                    from exc
            finally:
                browser.close()
    finally:
        support.stop(proc, marker)
    print(f"stop button clicked -> KernelInterrupted shown, kernel idle: {waited:.2f} s")
    assert waited < 15, waited  # about 0.9 s measured; before: busy until Kernel > Restart
    assert "abandoned" in shown and "isolate=True" in shown, shown
    assert "AFTER True True" in after, after
