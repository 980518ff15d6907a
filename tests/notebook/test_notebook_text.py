"""What the stored notebooks say agrees with the code: notebook 01's option table with the magic's parser, and
notebook 02's stored panel output with what the panel shows (a snapshot, not a widget's bare repr)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("IPython")

from aotbench.notebook.magic import AotMagics

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
QUICKSTART = NOTEBOOKS / "01_quickstart.ipynb"
EXPLORE = NOTEBOOKS / "02_attributes_and_shapes.ipynb"
TABLE_OPTION = re.compile(r"^\|\s*`(--[a-z][a-z0-9-]*)[^`]*`\s*\|", re.MULTILINE)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _where_next(nb) -> str:
    cells = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Where next")]
    assert len(cells) == 1, "notebook 01 has no (or several) '## Where next' sections"
    return cells[0]


def test_quickstart_lists_every_option_of_the_magic():
    """The option table under "Where next" in notebook 01 names exactly the options of ``%%aot_kernel``."""
    text = _where_next(nbformat.read(QUICKSTART, as_version=4))
    listed = TABLE_OPTION.findall(text)
    assert len(listed) == len(set(listed)), f"notebook 01 lists an option twice: {sorted(listed)}"
    parser = AotMagics.aot_kernel.parser
    options = {s for action in parser._actions for s in action.option_strings if s.startswith("--")} - {"--help"}
    assert not set(listed) - options, f"notebook 01 lists options the magic lacks: {sorted(set(listed) - options)}"
    assert not options - set(listed), f"the magic has options notebook 01 does not list: {sorted(options - set(listed))}"
    targets = next(action.choices for action in parser._actions if action.dest == "target")
    assert all(f"`{t}`" in text for t in targets), f"notebook 01 should name the targets {targets}"


def test_stored_explore_output_is_a_snapshot_not_a_widget_repr():
    """Opened without a kernel (GitHub, nbviewer), notebook 02's panel cell shows what the panel showed."""
    nb = nbformat.read(EXPLORE, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and ".explore(" in c.source]
    assert len(cells) == 1, "notebook 02 should open one panel"
    shown = [o for o in cells[0].outputs if WIDGET_VIEW in o.get("data", {})]
    assert len(shown) == 1, "the panel cell was stored without the panel's output"
    data = shown[0]["data"]
    plain, page = data["text/plain"], data.get("text/html", "")
    assert not re.match(r"\s*(ExplorePanel|VBox|HBox|<aotbench)\b", plain), f"a bare widget repr: {plain[:120]}"
    assert "op.explore panel of add_reduce (CustomKernel) [cpu]" in plain and "Run the cell for the live panel" in plain
    assert "controls for axis, keep_dim, m, n" in plain
    assert re.search(r"when shown: axis=1, keep_dim=False, m=4, n=5: output shape \(4,\), PASS", plain)
    assert "aotb-explore-snapshot" in page and "aotb-pass" in page and "output shape <code>(4,)</code>" in page
    assert "<img src='data:image/png;base64," in page, "the snapshot has no plot"
    assert "run the cell for the live controls" in page


def test_benchmarking_notebook_stores_the_profile_loop_it_teaches():
    """Notebook 03 as stored: the naive kernel's hottest line is its strided column sum, the fused kernel's is
    not, and the parallel kernel ran on more than one thread near its roofline (figures of the stored run)."""
    nb = nbformat.read(NOTEBOOKS / "03_benchmarking.ipynb", as_version=4)
    texts = ["".join(o.get("text", "") for o in c.outputs if o.get("output_type") == "stream")
             for c in nb.cells if c.cell_type == "code"]
    naive = next(t for t in texts if "ms per call" in t and "tmp[" in t)
    first = naive.splitlines()[0]
    assert "tmp[j * cols + i]" in first and float(re.search(r"([\d.]+)%", first).group(1)) >= 50
    fused = next(t for t in texts if "faster than the documented kernel" in t)
    assert "tmp[" not in fused and "Hottest loop" in fused
    roofline = next(t for t in texts if "of the numpy copy on" in t)
    every = next(line for line in roofline.splitlines() if line.startswith("every core"))
    assert "threads" in every and int(re.search(r"(\d+)% of the", every).group(1)) >= 80
