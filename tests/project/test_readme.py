"""README.md's Python snippets run as written, top to bottom in one namespace (as a reader pastes them), and
the GPU snippet leaves the names the later ones use alone; README's MindSpore claims are tested in
test_mindspore*.py."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import numpy as np
import pytest

import aotbench

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def python_snippets() -> list[str]:
    return [block for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
            if not block.lstrip().startswith("%")]  # IPython magics are the notebook's


def test_the_snippets_are_self_contained_and_give_the_numbers_they_claim(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)  # as in a fresh shell: it would win over the config
    snippets = python_snippets()
    assert len(snippets) == 5
    namespace: dict = {}
    for block in snippets:
        if "import cupy" in block and not aotbench.gpu_available():
            tree = ast.parse(block)  # it must at least be Python, and not rebind what later snippets use
            bound = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets
                     if isinstance(t, ast.Name)}
            assert not bound & {"op", "x", "y", "reg"}, bound
            continue
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 -- running the README is the test
    op, x, y = namespace["op"], namespace["x"], namespace["y"]
    np.testing.assert_allclose(op(x, y), (x + y).sum(axis=1), rtol=1e-5)
    assert op.infer_shape((4, None), (4, None)) == (4,)
    assert namespace["asm"].functions[0].name == "CustomKernel" and "without optimisation" in namespace["notes"].note
    assert namespace["fast"].vectorized_lines and not namespace["notes"].vectorized_lines
    cluster = namespace["on_cluster"]
    assert [p.size for p in cluster.points] == [(256, 256), (512, 512)]
    assert all(p.max_abs_error is not None and p.max_abs_error < 1e-3 for p in cluster.points)
    assert all(p.facts is not None and p.facts.pid != os.getpid() for p in cluster.points)  # timed in the workers
    assert not [n for n in cluster.notes if "MALLOC" in n], cluster.notes  # the config line did its job
    summary = namespace["panel"].set(axis=0, m=300).summary()
    assert "300" in str(summary)
