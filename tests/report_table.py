"""The staged examples' report table (``examples/stages.py``), read back as numbers for the
example tests."""

from __future__ import annotations


def row_values(report: str, label: str) -> list[float | None]:
    """The cells of the report table's row ``label`` as numbers ("-", a metric not logged: None).

    Raises:
        AssertionError: the report has no such row.
        ValueError: a cell that is neither a number nor "-".
    """
    for line in report.splitlines():
        name, *cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and name == label:
            return [None if c == "-" else float(c) for c in cells]
    raise AssertionError(f"the report has no row {label!r}:\n{report}")
