"""``agentfly sft``'s training and validation examples, read from their files row by row.

Each row becomes a :class:`~agentfly.core.trajectory.Trajectory` (prompt ids, then every turn's
ids with loss mask 1 on the assistant's tokens), from a conversation
(:mod:`agentfly.sft.conversations`) or from a rollout record
(:mod:`agentfly.sft.rollout_records`, the reward filter applied). A row that cannot be trained on
is named by its file and line (JSONL) or row (JSON, parquet) with the reason, and per
``data.bad_rows`` stops the run before anything starts (``error``, every bad row listed) or is
left out and counted (``skip``). All of it is done once, before the run is built: the number of
examples sets the run's length (``trainer.total_epochs``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfly.core.errors import InputError
from agentfly.core.trajectory import Trajectory
from agentfly.rollout.data import DataError, jsonl_lines, read_rows, relative_note
from agentfly.sft.conversations import BadRow, ConversationRenderer
from agentfly.sft.rollout_records import check_turns, passes, record_trajectory

SHOWN_BAD_ROWS = 20  # bad rows named in an error or a warning (all of them go to bad_rows.txt)


def located_rows(path: str | Path) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for every row of a file: ``file:line`` in JSONL (a line that is not JSON
    comes as a :class:`BadRow`), ``file row i`` (from 1, as lines are) in JSON and parquet.

    Raises:
        DataError: the file is missing or unreadable.
    """
    p = Path(path)
    if p.suffix.lower() != ".jsonl":
        for i, row in enumerate(read_rows(p), 1):
            yield f"{p} row {i}", row
        return
    if not p.is_file():
        raise DataError(f"data file {str(path)!r} does not exist{relative_note(p)}")
    for lineno, line in jsonl_lines(p):
        try:
            yield f"{p}:{lineno}", json.loads(line)
        except json.JSONDecodeError as e:
            yield f"{p}:{lineno}", BadRow(f"not valid JSON (column {e.colno}: {e.msg})")


@dataclass
class ExampleMaker:
    """One row to one example, as ``data.*`` says.

    Attributes:
        renderer: the run's agent type, template and tokenizer.
        format: ``messages`` or ``rollouts``.
        messages_key: the row field holding a conversation.
        min_reward: the reward filter of rollout records (None: none).
        max_length: longest example in tokens.
    """

    renderer: ConversationRenderer
    format: str = "messages"
    messages_key: str = "messages"
    min_reward: float | None = None
    max_length: int = 2048

    def __call__(self, row: Any, base_dir: Path | None = None) -> Trajectory | None:
        """The row's example; None when the reward filter leaves it out. ``base_dir``: where
        the row's relative image paths start (its file's folder).

        Raises:
            BadRow: why the row cannot be trained on.
            InputError: what no row of this run can be trained on (images for a text model).
        """
        if isinstance(row, BadRow):
            raise row
        if self.format == "rollouts":
            r = self.renderer
            traj = record_trajectory(row, len(r.tokenizer))
            if not passes(traj.reward, self.min_reward):
                return None
            check_turns(traj, r.agent, r.template, r.tokenizer)
            if r.vision is not None and r.vision.count_tokens(traj.prompt_ids + traj.response_ids):
                raise BadRow("the record holds image tokens, and a rollout record keeps no pixels")
        else:
            if not isinstance(row, dict) or self.messages_key not in row:
                fields = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise BadRow(f"no {self.messages_key!r} field (data.messages_key); the row has {fields}")
            traj = self.renderer.render(row[self.messages_key], row.get("images"), base_dir)
        length = len(traj.prompt_ids) + len(traj.response_ids)
        if length > self.max_length:
            raise BadRow(f"{length} tokens, longer than data.max_length={self.max_length}")
        return traj


@dataclass
class Examples:
    """One split's examples and what was left out.

    Attributes:
        kept: the examples, in file and row order.
        bad: ``"where: why"`` of each bad row.
        filtered: rollout records left out by the reward filter.
    """

    kept: list[Trajectory] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    filtered: int = 0


def read_examples(files: list[str], make: ExampleMaker) -> Examples:
    """Every row of ``files`` through ``make``; bad rows collected, not raised."""
    out = Examples()
    for f in files:
        for where, row in located_rows(f):
            try:
                traj = make(row, Path(f).parent)
            except BadRow as e:
                out.bad.append(f"{where}: {e}")
                continue
            except InputError as e:  # not the row's fault: the run's (a text model given images)
                raise DataError(f"{where}: {e}") from None
            if traj is None:
                out.filtered += 1
            else:
                out.kept.append(traj)
    return out


def listing(bad: list[str]) -> str:
    """The first :data:`SHOWN_BAD_ROWS` bad rows, one per line, and how many more."""
    shown = "\n".join(f"  {b}" for b in bad[:SHOWN_BAD_ROWS])
    more = len(bad) - SHOWN_BAD_ROWS
    return shown + (f"\n  ... and {more} more" if more > 0 else "")


@dataclass
class SFTData:
    """Both splits' examples, and the counts to log (``data/{split}_examples``,
    ``data/{split}_bad_rows``, ``data/{split}_below_min_reward``)."""

    train: Examples
    val: Examples

    @property
    def counts(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for split, ex in (("train", self.train), ("val", self.val)):
            out[f"data/{split}_examples"] = float(len(ex.kept))
            out[f"data/{split}_bad_rows"] = float(len(ex.bad))
            out[f"data/{split}_below_min_reward"] = float(ex.filtered)
        return out

    @property
    def bad(self) -> list[str]:
        return [*self.train.bad, *self.val.bad]


def load_sft_data(train_files: list[str], val_files: list[str], make: ExampleMaker, *, bad_rows: str) -> SFTData:
    """The examples of both splits.

    Raises:
        DataError: a file that cannot be read; with ``bad_rows="error"``, any bad row (each
            named, by file and line); no training example left.
    """
    data = SFTData(read_examples(train_files, make), read_examples(val_files, make))
    if data.bad and bad_rows == "error":
        raise DataError(
            f"{len(data.bad)} row(s) cannot be trained on (data.bad_rows=error; "
            f"data.bad_rows=skip leaves them out):\n{listing(data.bad)}"
        )
    if train_files and not data.train.kept:
        why = [f"{len(data.train.bad)} bad row(s) skipped"] if data.train.bad else []
        if data.train.filtered:
            why.append(f"{data.train.filtered} record(s) below data.min_reward={make.min_reward}")
        raise DataError(f"no training example left in data.train_files ({'; '.join(why) or 'no rows'})")
    return data
