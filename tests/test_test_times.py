"""scripts/test_times.py: `make test`'s JUnit files summed by test file (docs/development.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test_times.py"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_fit" file="tests/test_fit.py" line="3" name="test_a" time="12.5"/>
<testcase classname="tests.test_fit" file="tests/test_fit.py" line="9" name="test_b" time="30.0"/>
<testcase classname="tests.rollout.test_data.TestRows" file="tests/rollout/test_data.py" line="4" name="test_c" time="2.0"/>
<testcase classname="tests.rollout.test_data" file="tests/rollout/test_data.py" line="8" name="test_d" time="0.5"><skipped/></testcase>
</testsuite></testsuites>
"""


def load():
    spec = importlib.util.spec_from_file_location("test_times", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_times_are_summed_by_file_slowest_first(tmp_path, capsys):
    times = load()
    path = tmp_path / "parallel.xml"
    path.write_text(JUNIT)
    found = times.by_file([path])["parallel"]
    assert found == {"tests/test_fit.py": {"seconds": 42.5, "tests": 2, "slowest": 30.0},
                     "tests/rollout/test_data.py": {"seconds": 2.5, "tests": 2, "slowest": 2.0}}
    assert times.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "**parallel**: 4 tests, 0.8 minutes summed" in out
    rows = [line for line in out.splitlines() if line.startswith("| tests/")]
    assert rows == ["| tests/test_fit.py | 2 | 42 | 94% | 30 |", "| tests/rollout/test_data.py | 2 | 2 | 6% | 2 |"]


def test_no_files_says_what_to_run(tmp_path, monkeypatch, capsys):
    times = load()
    monkeypatch.chdir(tmp_path)
    assert times.main([]) == 2
    assert "run make test first" in capsys.readouterr().err


def test_a_file_written_without_file_names_says_how_to_write_it(tmp_path, capsys):
    times = load()
    path = tmp_path / "xunit2.xml"
    path.write_text(JUNIT.replace(' file="tests/test_fit.py"', "", 1))
    assert times.main([str(path)]) == 2
    assert "junit_family=xunit1" in capsys.readouterr().err
