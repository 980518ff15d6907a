"""What a non-editable install (CI's ``pip install '.[test]'``, Binder's) ships of the native tree: every header
and source the builds read, including the CUDA emulator's folder of headers, some without a suffix (``cassert``)
and some in subfolders (``cooperative_groups/reduce.h``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_native_header_and_source_is_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["aotbench.native"]
    native = ROOT / "aotbench" / "native"
    shipped = {p for pattern in patterns for p in native.glob(pattern) if p.is_file()}
    needed = {p for folder in ("include", "src") for p in (native / folder).rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    assert needed - shipped == set(), sorted(str(p.relative_to(native)) for p in needed - shipped)
    assert any(p.name == "cassert" for p in needed) and any(p.name == "cuda_emu.cc" for p in needed)
