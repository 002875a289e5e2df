"""Mutation check: break the learning code on purpose, one mutation at a time, and make sure a
test notices.

The package and its tests (``agentfly/``, ``tests/``, ``conf/``, ``pyproject.toml``) are copied to
a scratch directory (one copy per job). Each mutation replaces one exact snippet of one file (the
snippet must occur exactly once, or the mutation is reported as not applied), runs its tests there
with ``python -m pytest -x -q`` (this interpreter, ``PYTHONPATH`` = the copy), and restores the
file. A mutation is *killed* when a test fails. The unmutated copy runs every listed test first
(the ``baseline`` row), and must pass. Two mutations run at once by default (``--jobs``), each
test process on one thread.

Usage::

    python scripts/mutants.py                 # all mutations
    python scripts/mutants.py --only kl       # those whose name contains "kl"
    python scripts/mutants.py --list          # the table of mutations, nothing run
    python scripts/mutants.py --jobs 1        # one at a time

Exit status: 0 when the baseline passes and every mutation is killed; 1 otherwise (a mutation
survived, did not apply, or its tests could not run).

The mutations are listed in ``scripts/mutations.py``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("agentfly", "tests", "conf", "examples", "pyproject.toml")
from mutations import LEARNING, MUTATIONS, Mutation  # noqa: E402  (scripts/, beside this file)


@dataclass
class Outcome:
    name: str
    result: str  # passed (baseline) | killed | SURVIVED | NOT APPLIED | ERROR
    detail: str
    seconds: float


def make_copy(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    dest.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)


def check_snippet(copy: Path, m: Mutation) -> str | None:
    """Why the mutation cannot be applied, or None."""
    path = copy / m.file
    if not path.exists():
        return f"{m.file} does not exist"
    count = path.read_text().count(m.old)
    if count != 1:
        return f"snippet found {count} times in {m.file} (must be exactly once): {m.old!r}"
    return None


def run_tests(
    copy: Path, tests: tuple[str, ...], timeout: float, threads: int | None
) -> tuple[int, str, float]:
    env = {
        **os.environ,
        "PYTHONPATH": str(copy),
        "PYTHONDONTWRITEBYTECODE": "1",
        "WANDB_MODE": "offline",
    }
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--basetemp={copy}.tmp",
        *tests,
    ]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f} s", time.perf_counter() - start
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start


def failed_test(output: str) -> str:
    """The first test the short summary names as failed or in error."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            node = line.split(" ", 1)[1].split(" - ", 1)[0]
            return node.replace(f"{LEARNING}::", "")
    return "(no test named)"


def tail(output: str, lines: int = 15) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def run_mutation(copy: Path, m: Mutation, timeout: float, threads: int | None) -> Outcome:
    why = check_snippet(copy, m)
    if why:
        return Outcome(m.name, "NOT APPLIED", why, 0.0)
    path = copy / m.file
    original = path.read_text()
    path.write_text(original.replace(m.old, m.new, 1))
    try:
        code, output, seconds = run_tests(copy, m.tests, timeout, threads)
    finally:
        path.write_text(original)
    if code == 0:
        return Outcome(
            m.name,
            "SURVIVED",
            "all of " + ", ".join(t.rsplit("::", 1)[-1] for t in m.tests),
            seconds,
        )
    if code == 1:
        return Outcome(m.name, "killed", failed_test(output), seconds)
    return Outcome(m.name, "ERROR", f"pytest exit {code}:\n{tail(output)}", seconds)


def run_all(
    copies: list[Path], chosen: list[Mutation], timeout: float, threads: int | None
) -> list[Outcome]:
    """The mutations, each on a free copy (one per job), in list order in the result."""
    free: queue.Queue[Path] = queue.Queue()
    for copy in copies:
        free.put(copy)

    def one(m: Mutation) -> Outcome:
        copy = free.get()
        try:
            outcome = run_mutation(copy, m, timeout, threads)
        finally:
            free.put(copy)
        print(f"{m.name}: {outcome.result} ({outcome.seconds:.1f} s)", flush=True)
        return outcome

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(copies)) as pool:
        return list(pool.map(one, chosen))


def print_table(rows: list[Outcome]) -> None:
    width = max(len(r.name) for r in rows)
    print(f"\n{'mutation':<{width}}  {'result':<11}  {'seconds':>7}  killed by / detail")
    print("-" * (width + 50))
    for r in rows:
        detail = r.detail.splitlines()[0] if r.detail else ""
        print(f"{r.name:<{width}}  {r.result:<11}  {r.seconds:7.1f}  {detail}")
    for r in rows:
        if r.result in ("ERROR", "NOT APPLIED") and "\n" in r.detail:
            print(f"\n--- {r.name}\n{r.detail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the mutations whose name contains this text")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per pytest run")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="mutations run at once, each on its own copy (default: 2, or 1 on one core)",
    )
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or args.only.lower() in m.name.lower()]
    if args.list:
        for m in chosen:
            print(
                f"{m.name}\n    {m.file}: {m.old.strip()!r} -> {m.new.strip()!r}\n    {' '.join(m.tests)}"
            )
        return 0
    if not chosen:
        print(f"no mutation matches {args.only!r}", file=sys.stderr)
        return 1
    jobs = max(1, min(args.jobs, len(chosen)))
    threads = 1 if jobs > 1 else None  # concurrent runs: one thread each
    scratch = Path(tempfile.mkdtemp(prefix="agentfly-mutants-"))
    started = time.perf_counter()
    rows: list[Outcome] = []
    try:
        copies = [scratch / f"copy{i}" for i in range(jobs)]
        for copy in copies:
            make_copy(copy)
        baseline_tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        code, output, seconds = run_tests(copies[0], baseline_tests, args.timeout, None)
        ok = code == 0
        rows.append(
            Outcome(
                "baseline (no mutation)",
                "passed" if ok else "FAILED",
                "" if ok else tail(output),
                seconds,
            )
        )
        print(f"baseline: {'passed' if ok else 'FAILED'} ({seconds:.1f} s)", flush=True)
        if ok:
            rows += run_all(copies, chosen, args.timeout, threads)
    finally:
        if args.keep:
            print(f"scratch copies kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print_table(rows)
    bad = [r for r in rows if r.result not in ("passed", "killed")]
    killed = sum(r.result == "killed" for r in rows)
    elapsed = time.perf_counter() - started
    print(
        f"\n{killed} of {len(chosen)} mutations killed in {elapsed:.0f} s"
        + (f"; {len(bad)} problem(s)" if bad else "")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
