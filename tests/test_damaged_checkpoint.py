"""A damaged checkpoint never stops a resume that has an intact one, and a failing run leaves no
empty folder behind.

``resume_mode=auto`` passes over a ``last.ckpt`` that does not load (truncated, empty, not a
checkpoint, a link to nothing) for the newest intact ``iter_*.ckpt``, saying which it passed over
and which it used; with none intact it starts fresh, saying so. A checkpoint named outright
(``--ckpt_path``, ``resume_from_path``) that does not load stops the run before anything starts,
naming the file.
"""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from agentfly.cli import main
from agentfly.run.checkpoints import checkpoint_damage, find_resume_checkpoint
from tests.fit_runs import fit_args, iterations_by_launch


def copy_checkpoints(run: Path, dest: Path) -> Path:
    """The run's checkpoints copied (not linked) into ``dest/checkpoints``; returns that folder."""
    ckpts = dest / "checkpoints"
    ckpts.mkdir(parents=True)
    for path in (run / "checkpoints").iterdir():
        shutil.copyfile(path, ckpts / path.name)
    return ckpts


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.unlink()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(os.urandom(4096))
    elif how == "dangling link":
        path.symlink_to(path.with_name("gone.ckpt"))
    elif how == "zip without a record":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("archive/notes.txt", "not a checkpoint")
    elif how == "record cut":  # the central directory is whole, a tensor record is not there
        src = zipfile.ZipFile(path.with_name("iter_000001.ckpt"))
        with zipfile.ZipFile(path, "w") as out:
            for info in src.infolist():
                if "/data/" not in info.filename:  # keep data.pkl, drop every tensor's bytes
                    out.writestr(info, src.read(info))
    else:
        raise AssertionError(how)


DAMAGES = ["truncated", "empty", "garbage", "dangling link", "zip without a record", "record cut"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_last_ckpt_falls_back_to_the_newest_intact_iteration(finished_run, tmp_path, how):
    _, _, run = finished_run
    ckpts = copy_checkpoints(run, tmp_path)
    assert checkpoint_damage(ckpts / "last.ckpt") is None
    damage(ckpts / "last.ckpt", how)
    assert checkpoint_damage(ckpts / "last.ckpt") is not None
    choice = find_resume_checkpoint(tmp_path)
    assert choice.path == str(ckpts / "iter_000002.ckpt")
    assert [p for p, _ in choice.damaged] == [str(ckpts / "last.ckpt")]
    said = choice.message()
    assert str(ckpts / "last.ckpt") in said and str(ckpts / "iter_000002.ckpt") in said


def test_with_no_intact_checkpoint_auto_starts_fresh_and_says_so(finished_run, tmp_path):
    _, _, run = finished_run
    ckpts = copy_checkpoints(run, tmp_path)
    for path, how in zip(sorted(ckpts.iterdir()), ["garbage", "truncated", "empty"], strict=True):
        damage(path, how)
    choice = find_resume_checkpoint(tmp_path)
    assert choice.path is None
    assert len(choice.damaged) == 3
    assert "starting fresh" in choice.message()
    assert find_resume_checkpoint(tmp_path / "nothing_here").message() is None  # nothing: silent


def test_a_truncated_last_ckpt_resumes_from_the_intact_iteration_before_it(finished_run, tmp_path, caplog):
    """In place, as a full disk or a copy cut short leaves it: ``iter_000002.ckpt`` is a link to
    the same file and is damaged with it, so the run resumes from iteration 1 and runs 2 and 3."""
    root, model, run = finished_run
    out = tmp_path / "run"
    shutil.copytree(run, out, copy_function=shutil.copyfile)
    os.unlink(out / "checkpoints" / "iter_000002.ckpt")
    os.link(out / "checkpoints" / "last.ckpt", out / "checkpoints" / "iter_000002.ckpt")
    with open(out / "checkpoints" / "last.ckpt", "r+b") as f:
        f.truncate(1000)
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        assert main(fit_args(root, model, out, 3, ["trainer.resume_mode=auto"])) == 0
    said = [r.getMessage() for r in caplog.records if "damaged checkpoint" in r.getMessage()]
    assert len(said) == 1, said
    assert str(out / "checkpoints" / "last.ckpt") in said[0]
    assert str(out / "checkpoints" / "iter_000002.ckpt") in said[0]
    assert said[0].endswith(f"resuming from {out / 'checkpoints' / 'iter_000001.ckpt'}, the newest intact one")
    # one metrics file: the first launch's iteration 1 (its 2 is not in the checkpoint resumed
    # from, so its row went), then the resumed launch's 2 and 3
    assert iterations_by_launch(out) == {"1": [1.0], "2": [2.0, 3.0]}
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["agentfly_iteration"] == 3


@pytest.mark.parametrize("how", ["--ckpt_path", "resume_path"])
def test_a_named_damaged_checkpoint_stops_before_anything_starts(finished_run, tmp_path, capsys, how):
    root, model, _ = finished_run
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"PK\x03\x04 not really")
    out = tmp_path / "out"
    command = fit_args(root, model, out, 2)
    if how == "--ckpt_path":
        command += ["--ckpt_path", str(bad)]
        named = f"--ckpt_path {bad} is not a complete torch checkpoint"
    else:
        command += ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={bad}"]
        named = f"trainer.resume_from_path={bad} is not a complete torch checkpoint"
    assert main(command) == 2
    assert named in capsys.readouterr().err
    assert not out.exists()  # no run directory, no model loaded


def empty_folders(root: Path) -> list[str]:
    return [d for d, dirs, files in os.walk(root) if not dirs and not files]


def test_a_run_failing_at_the_start_leaves_no_empty_folder(finished_run, tmp_path):
    root, model, _ = finished_run
    out = tmp_path / "out"
    command = fit_args(root, model, out, 2, ["--trainer.callbacks+=tests.planted.Fail"])
    with pytest.raises(RuntimeError, match="planted failure"):
        main(command)
    assert not out.exists() or not empty_folders(out), empty_folders(out)


def test_a_resumed_run_failing_leaves_no_empty_version_folder(finished_run, tmp_path):
    """The issue's case: a resume that fails leaves its ``metrics/version_1`` with nothing in it;
    the earlier launch's folders stay as they are."""
    root, model, run = finished_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "kept_empty").mkdir()  # not this run's: left alone
    before = sorted(p.name for p in (out / "metrics").iterdir())
    command = fit_args(root, model, out, 3, ["trainer.resume_mode=auto",
                                             "--trainer.callbacks+=tests.planted.Fail"])
    with pytest.raises(RuntimeError, match="planted failure"):
        main(command)
    assert sorted(p.name for p in (out / "metrics").iterdir()) == before
    assert empty_folders(out) == [str(out / "kept_empty")]
