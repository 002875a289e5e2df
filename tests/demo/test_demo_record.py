"""What the README and docs/demo.md say `make demo` prints is what the recorded run
(docs/demo_run/, written by `make demo-record`) wrote in its report: every figure of their demo
table and the training time. That the record is what today's code trains is checked by
tests/demo/test_demo_fit.py (the shortened demo against the record's first iterations)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "demo_run"

#: a row label of the README's table -> (the report's metric, sampled or greedy)
LABELS = {
    "accuracy, sampled at temperature 1": ("accuracy", "sampled"),
    "accuracy, greedy": ("accuracy", "greedy"),
    "reward, sampled": ("reward", "sampled"),
    "tool-call rate, sampled": ("tool_call_rate", "sampled"),
}


def report_figures() -> tuple[dict[tuple[str, str], tuple[str, str]], int]:
    """``{(metric, sampled|greedy): (before, after)}`` as two-decimal text, and the training
    seconds, from the recorded report."""
    text = (RECORD / "report.md").read_text()
    table = {}
    for metric, sampled, greedy in re.findall(r"^\| val \| (\w+) \| ([\d.]+ → [\d.]+) \| ([\d.]+ → [\d.]+) \|$", text, re.M):
        for kind, cell in (("sampled", sampled), ("greedy", greedy)):
            before, after = cell.split(" → ")
            table[(metric, kind)] = (f"{float(before):.2f}", f"{float(after):.2f}")
    assert "100 iterations" in text.splitlines()[2], "the record is not a full demo run"
    return table, int(re.search(r"100 iterations, training (\d+) s", text)[1])


def quoted_table(doc: Path, heading: str) -> dict[tuple[str, str], tuple[str, str]]:
    """The demo table under ``heading`` in ``doc``: each labelled row's before and after."""
    section = doc.read_text().split(heading, 1)[1]
    rows = {}
    for label, before, after in re.findall(r"^\| ([^|]+?) \| ([\d.*]+) \| ([\d.*]+) \|$", section, re.M):
        if label in LABELS:
            rows.setdefault(LABELS[label], (before.strip("*"), after.strip("*")))
    return rows


def test_the_readme_quotes_the_recorded_demo_run():
    table, seconds = report_figures()
    quoted = quoted_table(ROOT / "README.md", "## The demo")
    assert set(quoted) == {k for k in LABELS.values() if k[0] != "reward"}
    for key, figures in quoted.items():
        assert figures == table[key], (key, figures, table[key], "README vs docs/demo_run/report.md")
    assert f"Training took {seconds} s" in (ROOT / "README.md").read_text()


def test_the_demo_page_quotes_the_recorded_demo_run():
    table, seconds = report_figures()
    quoted = quoted_table(ROOT / "docs" / "demo.md", "# The demo in detail")
    assert set(quoted) == set(LABELS.values())
    for key, figures in quoted.items():
        assert figures == table[key], (key, figures, table[key], "docs/demo.md vs docs/demo_run/report.md")
    assert f"({seconds} s of training" in (ROOT / "docs" / "demo.md").read_text()
