"""IPython's test shell with aotbench loaded, for the tests that run ``%%aot_kernel`` cells in a real shell."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np


@contextlib.contextmanager
def aotbench_shell(folder: Path) -> Iterator[object]:
    """The shell, working in ``folder``, with ``np`` defined; the ops it bound are dropped afterwards."""
    from IPython.testing.globalipapp import get_ipython, start_ipython

    from aotbench import Op

    started_here = start_ipython()  # a singleton: None when another test module started it first
    shell = started_here or get_ipython()
    old_cwd = os.getcwd()
    os.chdir(folder)
    shell.run_line_magic("load_ext", "aotbench")
    shell.user_ns["np"] = np
    try:
        yield shell
    finally:
        for key in [k for k, v in shell.user_ns.items() if isinstance(v, Op)]:
            del shell.user_ns[key]
        os.chdir(old_cwd)
        if started_here is not None:
            # tests/notebook/test_magic.py calls start_ipython() itself and expects the shell back, not None: let a later
            # call set up (and return) the same singleton shell again.
            del start_ipython.already_called
