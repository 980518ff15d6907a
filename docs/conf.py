"""Sphinx configuration of aotbench's documentation site.

Build it (offline, warnings as errors) from the repository root:

    .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html

The notebooks under ``docs/notebooks/`` are relative symlinks to ``notebooks/*.ipynb`` (the files Binder opens);
they are rendered with the outputs stored in them, never executed here.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # autodoc imports the package from this checkout

import aotbench  # noqa: E402

project = "aotbench"
author = "the aotbench authors"
release = version = aotbench.__version__

extensions = [
    "myst_nb",  # MyST Markdown pages and the notebooks (it brings myst_parser's syntax)
    "sphinx.ext.autodoc",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/.ipynb_checkpoints"]

# -- the notebooks: their stored outputs, never executed while building -------------------------------------------
nb_execution_mode = "off"
nb_merge_streams = True

# -- MyST: every internal link must resolve, or the build fails under -W ------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
myst_all_links_external = False

# A %%aot_kernel cell is C++ after a magic line that the C++ lexer cannot read: Pygments highlights such a block
# in its relaxed mode (only that line unhighlighted) and says so; that note is not a broken page.
suppress_warnings = ["misc.highlighting_failure"]

# -- references: a broken one is a warning (an error under -W) -----------------------------------------------------
nitpicky = True
# Types of other libraries named in signatures and docstrings: no intersphinx (the build is offline), so these
# cannot resolve, and are not aotbench's to fix.
nitpick_ignore_regex = [
    (r"py:.*", r"(np|numpy|npt|cupy|cp|matplotlib|ipywidgets|IPython|dask|distributed|concurrent|collections"
               r"|typing|types|os|pathlib|pickle|_pickle|builtins|subprocess|threading|multiprocessing|ctypes"
               r"|enum)(\..*)?"),
    (r"py:.*", r"(Path|PathLike|Callable|Iterable|Iterator|Sequence|Mapping|MutableMapping|Any|Optional|Union"
               r"|Literal|Executor|Future|ndarray|ArrayLike|DTypeLike|Figure|Axes|Self|TypeAlias|NDArray)"),
]


def _names_aotbench_internals(target: str, module: str | None, cls: str | None) -> bool:
    """Whether a Python reference the site does not document names real code inside aotbench: a module, class,
    function or attribute below the public API (``aotbench.run.guard``, ``OpSpec`` in a signature of
    ``aotbench.op.op``), as the docstrings name them (tests/project/test_references.py checks they exist)."""
    target = target.lstrip("~.").removesuffix("()")
    candidates = [target]
    if module and module.startswith("aotbench"):
        parts = module.split(".")
        for cut in range(len(parts), 0, -1):
            base = ".".join(parts[:cut])
            candidates += [f"{base}.{cls}.{target}", f"{base}.{target}"] if cls else [f"{base}.{target}"]
    if "." not in target:  # a bare name from a signature or a docstring's own module: any module of aotbench
        candidates += [f"{name}.{target}" for name, mod in list(sys.modules.items())
                       if name.startswith("aotbench.") and mod is not None and hasattr(mod, target)]
    for name in candidates:
        if not name.startswith("aotbench."):
            continue
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                annotations = getattr(obj, "__annotations__", {}) if isinstance(obj, type) else {}
                if attr in annotations or attr in getattr(obj, "__dataclass_fields__", {}):
                    obj = None
                    break
                obj = getattr(obj, attr, _MISSING)
                if obj is _MISSING:
                    break
            if obj is not _MISSING:
                return True
            break
    return False


_MISSING = object()


def _internal_reference(app, env, node, contnode):
    """A reference to aotbench's internals (not on the site) is shown as code, not a link; any other reference
    that does not resolve stays a warning, so a typo in a page or a name since removed fails the build."""
    if node.get("refdomain") == "py" and _names_aotbench_internals(node["reftarget"], node.get("py:module"),
                                                                   node.get("py:class")):
        return contnode
    return None


def setup(app):
    app.connect("missing-reference", _internal_reference)

# -- the API reference ---------------------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

# -- HTML ----------------------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"aotbench {release}"
html_static_path: list[str] = []
