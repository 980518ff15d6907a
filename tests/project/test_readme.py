"""README.md is a landing page: at most 150 lines, the two commands at the top exactly as .ci/run and a newcomer
run them, the notebook install line, a picture, links to the documentation site and how to build it; and its one
Python example runs as pasted. What README used to explain lives in docs/ now (tests/project/test_docs.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICKSTART = "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/python -m aotbench demo"
TESTS = "python3 -m venv .venv && .venv/bin/pip install -q '.[test]' && .venv/bin/python -m pytest -q"
NOTEBOOK = ".venv/bin/pip install -q '.[notebook]' && .venv/bin/jupyter lab notebooks/"
SITE = ".venv/bin/pip install -q '.[docs]' && .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html"


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.DOTALL)


def test_readme_is_a_landing_page_of_at_most_150_lines():
    assert len(README.read_text().splitlines()) <= 150


def test_the_two_commands_come_first_exactly_as_ci_runs_them():
    commands = fenced("bash")
    assert commands[:2] == [QUICKSTART + "\n", TESTS + "\n"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TESTS in ci  # the README's test command, verbatim, on a line of its own


def test_the_notebook_install_line_and_the_site_build_are_given():
    commands = [c.strip() for c in fenced("bash")]
    assert NOTEBOOK in commands and SITE in commands
    toml = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^notebook = \[", toml, re.MULTILINE) and re.search(r"^docs = \[", toml, re.MULTILINE)
    assert SITE in (ROOT / "docs" / "reference" / "layout.md").read_text()  # the site says the same


def test_the_readme_shows_a_picture_and_links_every_guide():
    text = README.read_text()
    pictures = re.findall(r"!\[[^\]]+\]\((docs/[\w.-]+\.png)\)", text)
    assert pictures and all((ROOT / p).is_file() for p in pictures)
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts}
    linked = set(re.findall(r"\]\((docs/[\w/.-]+\.md)", text))
    assert pages - {"docs/index.md"} <= linked, sorted(pages - linked)


@pytest.mark.slow
def test_the_example_runs_as_pasted(tmp_path):
    (example,) = fenced("python")
    check = example + "\nassert np.allclose(op(x, y), (x + y).sum(axis=1), rtol=1e-5)\nprint('checked')\n"
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "checked"
    values = np.array(lines[0].strip("[]").split(), dtype=np.float32)  # print(op(x, y)): four sums of 5 pairs
    assert values.shape == (4,) and np.all((values >= 0) & (values <= 10))
    assert "speed-up" in done.stdout and re.search(r"^aot\s", done.stdout, re.MULTILINE)  # compare's table
