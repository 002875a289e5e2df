"""Which checkpoint a run resumes from, and whether a checkpoint file can be loaded at all.

A checkpoint is a torch zip archive: its central directory sits at the end of the file, and its
``data.pkl`` record names every tensor record. :func:`checkpoint_damage` opens the central
directory and unpickles the record with the tensors memory-mapped (``torch.load(mmap=True)``):
the tensor bytes are not read, so the check costs a few milliseconds whatever the checkpoint's
size, and catches a truncated file, an empty one, a file that is not a checkpoint and a link to
a missing file. A flipped bit inside a tensor's bytes is not caught (that needs a read of the
whole file).

``resume_mode=auto`` looks in the run directory (:func:`find_resume_checkpoint`): the newest
intact of ``checkpoints/last.ckpt`` then ``checkpoints/iter_*.ckpt`` (highest iteration first),
and of SLURM's ``hpc_ckpt_*.ckpt``; a damaged one is passed over, saying which and which was used.
"""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from agentfly.core.errors import InputError

logger = logging.getLogger(__name__)


class DamagedCheckpointError(InputError):
    """A checkpoint named outright (``--ckpt_path``, ``trainer.resume_from_path``) cannot be loaded."""


class MissingCheckpointError(InputError, FileNotFoundError):
    """A checkpoint named outright (``--ckpt_path``, ``trainer.resume_from_path``) does not exist."""


def checkpoint_damage(path: str | Path) -> str | None:
    """Why the checkpoint at ``path`` cannot be loaded, or None when it can.

    Args:
        path: a checkpoint file (a symlink is followed).

    Returns:
        None for an intact torch zip checkpoint; else a short reason ("is empty (0 bytes)", ...).
    """
    path = Path(path)
    try:
        size = path.stat().st_size  # follows a symlink: a missing target raises here
    except OSError as err:
        target = f" (a link to {path.readlink()})" if path.is_symlink() else ""
        return f"cannot be read{target}: {err.strerror or err}"
    if path.is_dir():
        return "is a folder, not a checkpoint file"
    if size == 0:
        return "is empty (0 bytes)"
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as err:
        return f"is not a complete torch checkpoint ({size} bytes; {err}): truncated, or not a checkpoint"
    if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        return "is a zip archive without a torch record (data.pkl): not a checkpoint"
    import torch

    try:  # tensors memory-mapped: their records must exist, their bytes are not read
        torch.load(path, mmap=True, map_location="cpu", weights_only=False)
    except Exception as err:  # any failure to load is the damage reported
        return f"does not load ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    return None


def check_named_checkpoint(path: str | Path, source: str) -> str:
    """``path`` when it exists and loads; else raise naming it as ``source`` spells it.

    Args:
        path: the checkpoint.
        source: what named it, put before the path in a message (``"--ckpt_path "``,
            ``"trainer.resume_from_path="``).

    Raises:
        MissingCheckpointError: nothing at ``path`` (and it is not a link).
        DamagedCheckpointError: it is there but cannot be loaded.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise MissingCheckpointError(f"{source}{path} does not exist")
    why = checkpoint_damage(path)
    if why is not None:
        raise DamagedCheckpointError(f"{source}{path} {why}; name an intact checkpoint")
    return str(path)


@dataclass
class ResumeChoice:
    """What :func:`find_resume_checkpoint` found.

    Attributes:
        path: the checkpoint to resume from; None when none is intact (or there is none).
        damaged: each damaged checkpoint passed over, with why.
    """

    path: str | None = None
    damaged: list[tuple[str, str]] = field(default_factory=list)

    def message(self) -> str | None:
        """One sentence naming every damaged file and the one used (None when nothing was damaged)."""
        if not self.damaged:
            return None
        bad = "; ".join(f"{p} {why}" for p, why in self.damaged)
        if self.path is None:
            return f"no intact checkpoint to resume from ({bad}): starting fresh"
        return f"damaged checkpoint passed over ({bad}): resuming from {self.path}, the newest intact one"


def _iteration(path: Path) -> int:
    try:
        return int(path.stem.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return -1


def _is_ckpt(path: Path) -> bool:
    return path.is_file() or path.is_symlink()


def find_resume_checkpoint(run_dir: str | Path) -> ResumeChoice:
    """The checkpoint ``resume_mode=auto`` resumes from in ``run_dir``.

    Two series, each newest first: ``checkpoints/last.ckpt`` then ``checkpoints/iter_*.ckpt``
    (highest iteration first), and ``hpc_ckpt_*.ckpt`` (Lightning's SLURM auto-requeue). The
    first intact file of each series is its choice; of the two, the later written (mtime) is
    used. Files that are damaged but newer than the one used are reported in ``damaged``.
    """
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    iters = sorted((p for p in ckpt_dir.glob("iter_*.ckpt") if _is_ckpt(p)), key=_iteration, reverse=True)
    hpc = sorted((p for p in run_dir.glob("hpc_ckpt_*.ckpt") if _is_ckpt(p)), key=_iteration, reverse=True)
    series = [[last, *iters] if _is_ckpt(last) else iters, hpc]
    choice = ResumeChoice()
    found: list[Path] = []
    for files in series:
        for path in files:
            why = checkpoint_damage(path)
            if why is None:
                found.append(path)
                break
            choice.damaged.append((str(path), why))
    if found:
        chosen = max(found, key=lambda p: p.stat().st_mtime)
        choice.path = str(chosen)
        newer = chosen.stat().st_mtime
        # damaged files older than the one used would not have been chosen anyway
        choice.damaged = [(p, why) for p, why in choice.damaged if _mtime(Path(p)) >= newer]
    return choice


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return path.lstat().st_mtime
