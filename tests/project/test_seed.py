"""The ``rng`` fixture's seed: fresh per test by default, named with a rerun command when a test fails, and fixed by
``--seed N`` or ``AOTBENCH_TEST_SEED`` so that the rerun draws the same numbers (tests/conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

# Each test prints what it drew, so a rerun can be compared draw for draw.
DRAWING_TESTS = """
def test_draws_then_fails(rng):
    print("drew", rng.integers(0, 2**62, size=3).tolist())
    assert False

def test_draws_too_then_fails(rng):
    print("drew", rng.integers(0, 2**62, size=3).tolist())
    assert False

def test_draws_and_passes(rng):
    assert rng.standard_normal(4).shape == (4,)

def test_fails_without_rng():
    assert False
"""

SEED_LINE = re.compile(r"rng seed: (\d+) \(rerun: pytest --seed \1 (\S+)\)")


@pytest.fixture
def suite(pytester, monkeypatch):
    """A small suite under the project's conftest, with no seed in the environment."""
    monkeypatch.delenv("AOTBENCH_TEST_SEED", raising=False)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_drawing=DRAWING_TESTS)
    return pytester


def seeds_by_test(output: str) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for seed, nodeid in SEED_LINE.findall(output):
        found.setdefault(nodeid, set()).add(int(seed))
    return found


def draws(output: str) -> list[str]:
    return re.findall(r"^drew (\[.*\])$", output, re.MULTILINE)


def test_a_failing_test_shows_its_seed_and_the_command_that_replays_it(suite):
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    output = result.stdout.str()
    seeds = seeds_by_test(output)
    assert set(seeds) == {"test_drawing.py::test_draws_then_fails", "test_drawing.py::test_draws_too_then_fails"}
    assert all(len(found) == 1 for found in seeds.values()), seeds  # one seed per test, in both places shown
    assert len(SEED_LINE.findall(output)) == 4  # below each traceback, and again in the summary at the end
    assert output.count("rng seeds of failed tests") == 1


def test_every_test_gets_a_fresh_seed_by_default(suite):
    result = suite.runpytest("-p", "no:cacheprovider")
    (first,), (second,) = seeds_by_test(result.stdout.str()).values()
    assert first != second  # two 32-bit draws collide once in four billion runs
    assert len(set(draws(result.stdout.str()))) == 2


def test_the_printed_seed_replays_the_same_draws(suite):
    first = suite.runpytest("-p", "no:cacheprovider", "test_drawing.py::test_draws_then_fails")
    (seed,) = seeds_by_test(first.stdout.str())["test_drawing.py::test_draws_then_fails"]
    again = suite.runpytest("-p", "no:cacheprovider", "--seed", str(seed), "test_drawing.py::test_draws_then_fails")
    assert draws(again.stdout.str()) == draws(first.stdout.str()) and len(draws(first.stdout.str())) == 1
    assert f"rng seed: {seed} for every test" in again.stdout.str()  # the header says the seed is fixed
    assert seeds_by_test(again.stdout.str())["test_drawing.py::test_draws_then_fails"] == {seed}


def test_the_environment_variable_fixes_the_seed_and_the_option_wins(suite, monkeypatch, rng):
    seed = int(rng.integers(0, 2**32))
    monkeypatch.setenv("AOTBENCH_TEST_SEED", str(seed))
    from_env = suite.runpytest("-p", "no:cacheprovider")
    assert list(seeds_by_test(from_env.stdout.str()).values()) == [{seed}, {seed}]
    assert len(set(draws(from_env.stdout.str()))) == 1  # both tests drew the same numbers from the same seed
    from_option = suite.runpytest("-p", "no:cacheprovider", "--seed", str(seed + 1))
    assert list(seeds_by_test(from_option.stdout.str()).values()) == [{seed + 1}, {seed + 1}]


def test_a_malformed_seed_stops_the_run_and_says_what_to_set(suite, monkeypatch):
    monkeypatch.setenv("AOTBENCH_TEST_SEED", "twelve")
    result = suite.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "AOTBENCH_TEST_SEED must be a non-negative integer seed" in result.stderr.str()
