"""The peak resident memory of a command and every process under it (engines, Ray workers,
environment processes), sampled every quarter second; optionally the whole timeline as CSV.

    python bench/peak_rss.py --csv runs/rss.csv -- agentfly fit --config examples/smollm2_calculator/rl.yaml

Prints ``peak RSS <GiB> at <s>`` and exits with the command's status. The sum counts memory two
processes share (a forked parent's pages) twice: an upper bound, the same way for the two sides
of a comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from pathlib import Path


def tree_rss(root: object) -> int:
    """Bytes resident in ``root`` (a ``psutil.Process``) and its descendants now."""
    try:
        procs = [root, *root.children(recursive=True)]  # type: ignore[attr-defined]
    except Exception:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(Exception):
            total += proc.memory_info().rss
    return total


def main(argv: list[str] | None = None) -> int:
    import psutil

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=None, help="write seconds,rss_gib every sample")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (put it after --)")
    start = time.monotonic()
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    peak, peak_at, rows = 0, 0.0, []
    while child.poll() is None:
        rss, now = tree_rss(root), time.monotonic() - start
        if rss > peak:
            peak, peak_at = rss, now
        rows.append(f"{now:.2f},{rss / 2**30:.3f}")
        time.sleep(args.every)
    if args.csv is not None:
        args.csv.write_text("seconds,rss_gib\n" + "\n".join(rows) + "\n")
    print(f"peak RSS {peak / 2**30:.2f} GiB at {peak_at:.0f} s (of {time.monotonic() - start:.0f} s)", flush=True)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
