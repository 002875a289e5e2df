"""Ctrl-C and SIGTERM keep the last finished iteration and say how to go on.

A run stopped by hand loses nothing it finished: an interrupt between iterations (during a
rollout, a validation) checkpoints the state at the end of the last finished iteration, which is
exactly what it still is (an iteration changes the weights, the optimizer and the counters only
between ``on_train_batch_start`` and ``on_train_batch_end``). An interrupt inside an iteration's
update would catch it half done, so the first Ctrl-C there is held: the iteration finishes, is
checkpointed, and the run stops; a second Ctrl-C stops at once, keeping only the checkpoints
already written. Either way the last line names the checkpoint and the command that resumes.

The checkpoint is the one ``save_freq`` would have written (``iter_N.ckpt`` and ``last.ckpt``,
:meth:`~agentfly.callbacks.iterations.IterationScheduleCallback.save`), also with
``save_freq=-1``: keeping nothing periodically is a choice, losing an hour's work to a Ctrl-C is
not. With several ranks an interrupt between iterations cannot be saved (each rank is
interrupted wherever it is, and saving is collective): the held update's checkpoint is, since
every rank reaches the iteration's end together; SLURM's requeue signal does the same
(:mod:`agentfly.callbacks.requeue`).
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback


def resume_command(resume_mode: str) -> str:
    """The command line of this process, as a user would type it again to resume."""
    args = sys.argv[1:]
    program = "agentfly" if Path(sys.argv[0]).name == "agentfly" else "python -m agentfly.cli"  # or -m: __main__.py
    if resume_mode != "auto":
        args = [*args, "trainer.resume_mode=auto"]
    return f"{program} {shlex.join(args)}".strip()


class InterruptCheckpoint(Callback):
    """Checkpoints the last finished iteration on Ctrl-C or SIGTERM (see the module docstring).

    Args:
        resume_mode: the run's ``trainer.resume_mode`` (the resume line adds ``auto`` when the
            run's own would not resume).
    """

    def __init__(self, resume_mode: str = "auto") -> None:
        self.resume_mode = resume_mode
        self.busy = False  # inside an iteration: between its batch start and end
        self.held = False  # a Ctrl-C held until the iteration ends
        self._stopping = False  # the held Ctrl-C's iteration is saved: stop at the loop's end
        self._previous: Any = None
        self._installed = False

    # ------------------------------------------------------------------ the signal

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.busy and not self.held:
            self.held = True
            print("\nCtrl-C: this iteration's update finishes and is checkpointed, then the run "
                  "stops (Ctrl-C again: stop now, without it)", file=sys.stderr, flush=True)
            return
        raise KeyboardInterrupt

    def _restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)
            self._installed = False

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._restore()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._restore()

    # ------------------------------------------------------------------ the iteration

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.busy = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # after IterationScheduleCallback's (earlier in the list): a periodic save is already written
        self.busy = False
        flag = torch.tensor(1.0 if self.held else 0.0, device=trainer.strategy.root_device)
        if trainer.world_size > 1:  # every rank is here together: agree whether one was interrupted
            flag = trainer.strategy.reduce(flag, reduce_op="sum")
        if float(flag) == 0:
            return
        self.held = False
        self._save(trainer, pl_module, quiet=True)
        schedule = self._schedule(trainer)
        if schedule is not None and pl_module.iteration >= schedule.total_iterations:
            return  # the last iteration: the run ends as it would have
        # stop once Lightning has logged this iteration's metrics (after this hook), then take
        # Lightning's interrupt path (on_exception, teardown, exit 1) at the end of the epoch loop
        trainer.should_stop = True
        trainer.limit_val_batches = 0  # Lightning validates an epoch that stops; this one is interrupted
        self._stopping = True

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._stopping:
            self._stopping = False
            raise KeyboardInterrupt

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if not isinstance(exception, (KeyboardInterrupt, SystemExit)) or trainer.state.fn != "fit":
            return  # a validate/test changes no weights: nothing to keep
        self._restore()
        if self.busy:
            say = f"stopped inside iteration {pl_module.iteration + 1}: it is not checkpointed"
            self._say(trainer, pl_module, say)
        elif trainer.world_size > 1:
            self._say(trainer, pl_module, "stopped between iterations on several ranks: no checkpoint written now")
        else:
            self._save(trainer, pl_module)

    # ------------------------------------------------------------------ saving

    def _schedule(self, trainer: Any) -> Any:
        from agentfly.callbacks.iterations import IterationScheduleCallback

        return next((cb for cb in trainer.callbacks if isinstance(cb, IterationScheduleCallback)), None)

    def _save(self, trainer: Any, pl_module: Any, quiet: bool = False) -> None:
        k = int(pl_module.iteration)
        schedule = self._schedule(trainer)
        if k == 0 or schedule is None or schedule.checkpoint_dir is None:
            self._say(trainer, pl_module, "interrupted before the first iteration ended: nothing to checkpoint")
            return
        path = schedule.checkpoint_dir / f"iter_{k:06d}.ckpt"
        if not path.exists():
            schedule.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            schedule.save(trainer, k)
        if not quiet:
            self._say(trainer, pl_module, f"interrupted: iteration {k} is checkpointed in {path}", resumable=True)

    def _say(self, trainer: Any, pl_module: Any, what: str, resumable: bool = False) -> None:
        if not trainer.is_global_zero:
            return
        schedule = self._schedule(trainer)
        last = None if schedule is None or schedule.checkpoint_dir is None else schedule.checkpoint_dir / "last.ckpt"
        if not resumable and last is not None and last.exists():
            what += f"; the last checkpoint is {last.resolve()}"
            resumable = True
        line = f"{what}. To resume: {resume_command(self.resume_mode)}" if resumable else f"{what}."
        print(line, file=sys.stderr, flush=True)
