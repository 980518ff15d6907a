"""A clean copy of the checkout and a child environment without this session's Python paths: what the tests that
install the project into a fresh virtual environment (Binder's plan, README's notebook line) start from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """The environment without this session's PYTHONPATH, so a child uses only what its own Python installed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def copy_checkout(dest: Path) -> None:
    """Copy what a clone of the repository holds (tracked and new, not ignored, files) to ``dest``."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60)
        names = [n for n in out.stdout.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = None
    if names is None:  # no git: everything but the usual build and cache folders
        shutil.copytree(ROOT, dest, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"))
        return
    for name in names:
        src = ROOT / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)
