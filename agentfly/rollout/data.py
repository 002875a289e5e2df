"""Task files: JSON (a list of rows), JSONL (one row per line) or parquet.

Each row is a dict; the question is read from ``question`` (or ``prompt``/``problem``/
``instruction``, or a configured key) and every field is handed to the reward. A malformed file
raises :class:`DataError` naming the file and the line or row (an image that cannot be read:
:class:`~agentfly.rollout.vision.ImageError`, naming the image too); bytes that are not UTF-8 are
named by file, line and column (a UTF-8 byte-order mark is accepted).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentfly.core.errors import InputError
from agentfly.rollout.vision import resolve_row_images

PROMPT_KEYS = ("question", "prompt", "problem", "instruction")


class DataError(InputError):
    """A task file that cannot be used, with the file and row named."""


def load_rows(path: str | Path, prompt_key: str | None = None) -> list[dict[str, Any]]:
    """Read every row of a task file and check each has a question.

    Args:
        path: a ``.json``, ``.jsonl`` or ``.parquet`` file.
        prompt_key: the field holding the question (default: the usual ones).

    Raises:
        DataError: the file is missing, unreadable, empty, or a row is not usable.
    """
    p = Path(path)
    rows = read_rows(p)
    if not rows:
        raise DataError(f"data file {str(p)!r} holds no rows")
    for i, row in enumerate(rows, 1):  # rows count from 1, as lines do
        if not isinstance(row, dict):
            raise DataError(f"{p}: row {i} is a {type(row).__name__}, not an object")
        try:
            question_of(row, prompt_key, i)
        except ValueError as e:
            raise DataError(f"{p}: {e}") from None
        resolve_row_images(row, p.parent, f"{p}: row {i}")  # paths made absolute, each image read
    return rows


def read_rows(path: str | Path) -> list[Any]:
    """Every row of a ``.json``, ``.jsonl`` or ``.parquet`` file, as it is (nothing checked).

    Raises:
        DataError: the file is missing or unreadable, or a JSONL line is not JSON.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {str(path)!r} does not exist{relative_note(p)}")
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        return _parquet(p)
    if suffix == ".jsonl":
        return _jsonl(p)
    return _json(p)


def relative_note(p: Path) -> str:
    """For a relative path: where it was looked for (a config's paths are read from the current
    folder, as verl's and Hydra's are, not from the config file's folder)."""
    if p.is_absolute():
        return ""
    return f" (a relative path is read from the current folder, {Path.cwd()}, not from the config file's)"


def jsonl_lines(p: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of every line of a JSONL file that is not blank (from 1)."""
    return [(n, line) for n, line in enumerate(_text(p).split("\n"), 1) if line.strip()]


def question_of(
    row: dict[str, Any], prompt_key: str | None = None, row_index: int | None = None
) -> str:
    """The user message of a data row: ``prompt_key``, else the first of :data:`PROMPT_KEYS`
    (``row_index``: the row's number in what is read, from 1, named by the error)."""
    keys = (prompt_key,) if prompt_key else PROMPT_KEYS
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    where = f"row {row_index}" if row_index is not None else "a data row"
    raise ValueError(
        f"{where} has no question field: expected one of {', '.join(keys)} holding text; "
        f"the row has fields {sorted(row)}"
    )


def _text(p: Path) -> str:
    """The file decoded as UTF-8; a byte that is not UTF-8 is named by line and column."""
    data = p.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        bad = data[e.start : e.end].hex(" ")
        raise DataError(
            f"{p}: line {line}, column {column} (byte {e.start}) is not UTF-8 (bytes {bad}: "
            f"{e.reason}); save the file as UTF-8"
        ) from None


def _json(p: Path) -> list[Any]:
    text = _text(p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if "\n{" in text.strip() and not text.lstrip().startswith("["):  # JSONL named .json
            return _jsonl(p)
        raise DataError(
            f"{p}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    if isinstance(data, dict):
        for key in ("data", "rows", "examples"):
            if isinstance(data.get(key), list):
                return data[key]
        raise DataError(f"{p}: expected a list of rows (or an object with a 'data' list)")
    if not isinstance(data, list):
        raise DataError(f"{p}: expected a list of rows, found {type(data).__name__}")
    return data


def _jsonl(p: Path) -> list[Any]:
    rows = []
    for lineno, line in jsonl_lines(p):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DataError(
                f"{p}: line {lineno} is not valid JSON (column {e.colno}: {e.msg})"
            ) from None
    return rows


def _parquet(p: Path) -> list[Any]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(p).to_pylist()
    except Exception as e:
        raise DataError(f"{p}: cannot read parquet ({e})") from None
