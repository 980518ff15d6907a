"""Every folder of tests is collected by a plain ``pytest`` (what CI runs): none of the layer folders' names may match
an ``norecursedirs`` pattern, as pytest's default ``build`` would match tests/build."""

from __future__ import annotations

import fnmatch
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_folder_of_tests_is_skipped_by_norecursedirs(request):
    patterns = request.config.getini("norecursedirs")
    folders = sorted({path.parent for path in TESTS.rglob("test_*.py")} - {TESTS})
    assert folders, "no test folders found"
    skipped = {str(folder.relative_to(TESTS)): pattern for folder in folders for part in folder.relative_to(TESTS).parts
               for pattern in patterns if fnmatch.fnmatch(part, pattern)}
    assert not skipped, f"pytest would not walk into these folders (folder: pattern): {skipped}"
