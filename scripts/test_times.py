"""Where `make test`'s time goes: the JUnit files its two passes write (``.test-times/``), summed
by test file, slowest first, as a Markdown table (docs/development.md keeps the last one).

    python scripts/test_times.py                 # .test-times/*.xml
    python scripts/test_times.py --top 30 a.xml  # other files, more rows

A test's time is pytest's: setup, call and teardown, so a module fixture's build counts in the
first test that uses it. The parallel pass's wall time is about half its summed time (two
workers); the serial pass's is its sum.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TIMES = Path(".test-times")


def by_file(paths: list[Path]) -> dict[str, dict[str, dict[str, float]]]:
    """``{pass: {test file: {"seconds", "tests", "slowest"}}}``, one pass per JUnit file (its stem)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for path in paths:
        files: dict[str, dict[str, float]] = defaultdict(lambda: {"seconds": 0.0, "tests": 0, "slowest": 0.0})
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("file")
            if name is None:  # xunit2, pytest's default, names no file
                raise ValueError(f"{path}: a testcase without a file: write it with -o junit_family=xunit1 (as make test does)")
            row = files[name]
            seconds = float(case.get("time") or 0.0)
            row["seconds"] += seconds
            row["tests"] += 1
            row["slowest"] = max(row["slowest"], seconds)
        out[path.stem] = dict(files)
    return out


def table(times: dict[str, dict[str, dict[str, float]]], top: int) -> str:
    lines = []
    for name, files in times.items():
        total = sum(r["seconds"] for r in files.values())
        count = sum(int(r["tests"]) for r in files.values())
        lines += [f"**{name}**: {count} tests, {total / 60:.1f} minutes summed", "",
                  "| test file | tests | seconds | share | slowest test, s |", "|---|---|---|---|---|"]
        for file, r in sorted(files.items(), key=lambda kv: -kv[1]["seconds"])[:top]:
            lines.append(f"| {file} | {int(r['tests'])} | {r['seconds']:.0f} | "
                         f"{r['seconds'] / max(total, 1e-9):.0%} | {r['slowest']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--top", type=int, default=20, help="rows per pass")
    args = ap.parse_args(argv)
    paths = args.files or sorted(TIMES.glob("*.xml"))
    if not paths:
        print(f"no JUnit files in {TIMES}/: run make test first", file=sys.stderr)
        return 2
    try:
        print(table(by_file(paths), args.top))
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
