"""The rollout DataModule: prompts in, scored and collated trajectories out.

Lightning's hooks, and who does each job:

- prompts and loaders (:mod:`agentfly.rollout.loaders`): the rows whose prompt fits, measured
  before the engines start when the context is known from the config (``renderer_factory``),
  else right after with the agent loop's own tokenizer and context; one prompt batch per
  iteration (:class:`~agentfly.rollout.loaders.IterationBatches`), each rank's validation slice;
- the hand-over of produced batches (:mod:`agentfly.rollout.handover`): in
  ``on_before_batch_transfer``, which Lightning calls right before each ``training_step`` (after
  the previous update and weight sync), the batch is rolled out or taken from the producer,
  checked for staleness and failed groups, collated and recorded;
- validation (:mod:`agentfly.rollout.validation`): each validation batch rolled out and reduced
  to sums and counts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal

import lightning.pytorch as pl
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveInt
from torch.utils.data import DataLoader

from agentfly.core.batch import RolloutBatch
from agentfly.core.ranks import fail_together
from agentfly.rollout.data import DataError
from agentfly.rollout.handover import TrainingRollouts
from agentfly.rollout.loaders import (
    Items,
    IterationBatches,
    load_prompt_rows,
    train_loader,
    val_loader,
)
from agentfly.rollout.prompt_fit import PromptRenderer, renderer_from_loop
from agentfly.rollout.validation import ValidationRollouts


def check_reward_fields(reward: str, splits: dict[str, list[dict[str, Any]]]) -> None:
    """Every row holds the fields ``reward``'s signature requires (those it is called with at
    scoring time, :func:`~agentfly.rollout.rewards.arguments.bind_reward_kwargs`).

    Raises:
        DataError: rows of a split lack a required field: how many, the first (counted from 1)
            and its fields, the reward and the field named.
    """
    from agentfly.rollout.rewards.arguments import bind_reward_kwargs
    from agentfly.rollout.rewards.registry import info_of
    from agentfly.rollout.rewards.result import RewardError
    from agentfly.rollout.rewards.reward_config import CONFIGURABLE

    if reward in CONFIGURABLE:  # its settings are bound from reward_config, not the rows
        return
    fn, _ = info_of(reward)
    for split, rows in splits.items():
        lacking: list[tuple[int, str]] = []
        for i, row in enumerate(rows):
            try:
                bind_reward_kwargs(fn, "", None, row)
            except RewardError as err:
                if err.kind != "missing_field":
                    raise DataError(f"reward {reward!r}: {err}") from None
                lacking.append((i, str(err)))
        if lacking:
            first, why = lacking[0]
            raise DataError(
                f"{split}: {len(lacking)} of {len(rows)} rows cannot be scored, the first row "
                f"{first + 1} (counted from 1, as loaded): {why}"
            )


class RolloutDataModule(pl.LightningDataModule):
    """Draws prompts and turns them into training batches through the agent loop.

    Args:
        session_factory: builds the :class:`~agentfly.rollout.runner.RolloutSession` (engine
            pool + agent loop); called once, in ``setup``.
        train_files: training task files (JSON, JSONL or parquet rows).
        val_files: validation task files (may be empty).
        train_batch_size: prompts per iteration, all ranks together (each draws its share).
        val_batch_size: prompts per validation batch (None: all).
        prompt_key: the row field holding the question (None: the first of ``question``,
            ``prompt``, ``problem``, ``instruction``).
        shuffle: shuffle the training prompts each epoch.
        seed: the shuffling seed (None: ``trainer.seed``).
        val_temperature: validation sampling temperature; ``None`` or 0 = greedy.
        val_top_p: validation nucleus mass (when sampling).
        val_top_k: validation top-k (when sampling; -1 = none).
        val_n: chains per validation prompt.
        val_also_greedy: when validation samples, also run a greedy pass (one chain per prompt),
            logged as ``val_greedy/...``.
        greedy_baselines: roll out one greedy chain per training prompt beside the sampled ones
            and hand its reward over as ``reward_baselines`` (logged as
            ``rollout/reward_baseline/mean``); set from the estimator's ``needs_baselines``.
        trajectory_dir: where validation trajectories are written as JSONL, and each rank's
            record of its training rollouts (``rollouts_rank{r}.jsonl``); None: nowhere.
        num_val_samples: trajectories kept per validation in that file.
        num_train_samples: training chains per iteration whose whole text is kept there
            (``train_trajectories_iterNNNNNN.jsonl``, rank 0; 0: none).
        max_prompt_length: longest rendered prompt in tokens (system prompt, tools' schemas and
            chat template included); None: ``agent.init_config.max_model_len`` less one token.
        filter_overlong_prompts: drop (count and name once) the rows whose prompt is longer,
            training and validation alike (else ``truncation``).
        truncation: what to do with a longer prompt when filtering is off: ``error`` (stop,
            naming the file, the row and the length), or cut the question's tokens on the
            ``left``, the ``right`` or in the ``middle`` until it fits.
        renderer_factory: builds the prompt renderer without an engine, so that prompts are
            measured before the engines start (None, or a renderer with no ``max_model_len``:
            measured with the session's agent loop once it is built).
        reward: the reward's name: every training and validation row is checked at set-up for
            the fields its signature requires (a row lacking one is refused, named, before any
            engine starts where the context is known); None: not checked.
        rollout_mode: ``sync``, ``one_step_off`` or ``async`` (:mod:`agentfly.rollout.producer`).
        max_staleness: in ``async`` mode, how many policy versions older than the one training a
            sampled token may be (``one_step_off``: 1).
        max_iterations: the run's iterations (the producer rolls out none beyond); None: no end.
        producer_threads: torch threads of the producer's thread, where an in-process engine
            generates (None: torch's default).
        idle_threads: torch threads of the training thread while the producer is idle until the
            next hand-over (its share of the cores otherwise; :mod:`agentfly.rollout.trainer_threads`).
            None: the training thread keeps its count.
        failed_chains: what becomes of a training chain the infrastructure failed:
            ``resample``, ``drop`` or ``keep`` (:mod:`agentfly.rollout.failures`).
        max_resamples: re-runs of a failed chain at most (``resample``).
        resample_budget_s: seconds past a rollout's first round within which a re-run must be
            expected to end (``resample``; :mod:`agentfly.rollout.resampling`); None: the
            longest deadline of the tool calls that timed out so far, 30 s while none has.
        filter_groups_metric: DAPO's dynamic sampling (:mod:`agentfly.rollout.dynamic_sampling`):
            the groups whose chains' metric (``acc``, ``score``, ``seq_reward``,
            ``seq_final_reward`` or a field of the reward's result) is all equal leave the batch,
            which further prompts fill; None: off.
        max_num_gen_batches: generation batches an iteration may roll out with dynamic sampling,
            the first included; 0: as many as the training rows hold.
        anchor_similarity: group the turns' anchor states by text similarity at this threshold
            (GiGPO's ``enable_similarity``, for an estimator that ``needs_turns``); None: by
            equal text.
    """

    def __init__(
        self,
        session_factory: Callable[[], Any],
        *,
        train_files: list[str] | None = None,
        val_files: list[str] | None = None,
        train_batch_size: PositiveInt = 1024,
        val_batch_size: PositiveInt | None = None,
        prompt_key: str | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        val_temperature: float | None = None,
        val_top_p: float = 1.0,
        val_top_k: int = -1,
        val_n: int = 1,
        val_also_greedy: bool = False,
        greedy_baselines: bool = False,
        trajectory_dir: str | None = None,
        num_val_samples: int = 16,
        num_train_samples: int = 4,
        max_prompt_length: PositiveInt | None = None,
        filter_overlong_prompts: bool = True,
        truncation: Literal["error", "left", "right", "middle"] = "error",
        renderer_factory: Callable[[], PromptRenderer] | None = None,
        reward: str | None = None,
        rollout_mode: Literal["sync", "one_step_off", "async"] = "sync",
        max_staleness: PositiveInt = 1,
        max_iterations: int | None = None,
        producer_threads: PositiveInt | None = None,
        idle_threads: PositiveInt | None = None,
        failed_chains: Literal["resample", "drop", "keep"] = "resample",
        max_resamples: NonNegativeInt = 3,
        resample_budget_s: NonNegativeFloat | None = None,
        filter_groups_metric: str | None = None,
        max_num_gen_batches: NonNegativeInt = 0,
        anchor_similarity: float | None = None,
    ) -> None:
        super().__init__()
        self.session_factory = session_factory
        self.train_files = list(train_files or [])
        self.val_files = list(val_files or [])
        self.train_batch_size = train_batch_size
        self.val_batch_size = val_batch_size
        self.prompt_key = prompt_key
        self.shuffle = shuffle
        self.seed = seed
        self.val_temperature = val_temperature
        self.val_top_p = val_top_p
        self.val_top_k = val_top_k
        self.val_n = max(1, int(val_n))
        self.val_also_greedy = val_also_greedy
        self.greedy_baselines = greedy_baselines
        self.trajectory_dir = trajectory_dir
        self.max_prompt_length = max_prompt_length
        self.filter_overlong_prompts = filter_overlong_prompts
        self.truncation = truncation
        self.renderer_factory = renderer_factory
        self.reward = reward
        self.rollout_mode = rollout_mode
        self.max_staleness = max_staleness
        self.failed_chains = failed_chains
        self.max_resamples = max_resamples
        self.resample_budget_s = resample_budget_s
        self.filter_groups_metric = filter_groups_metric
        self.max_num_gen_batches = max_num_gen_batches
        lock = threading.Lock()  # one rollout at a time: the producer's or validation's
        self.train_rollouts = TrainingRollouts(
            self, lock, prompt_key=prompt_key, greedy_baselines=greedy_baselines,
            failed_chains=failed_chains, max_resamples=max_resamples,
            resample_budget_s=resample_budget_s, rollout_mode=rollout_mode,
            max_staleness=max_staleness, max_iterations=max_iterations,
            producer_threads=producer_threads, idle_threads=idle_threads, trajectory_dir=trajectory_dir,
            filter_metric=filter_groups_metric, max_num_gen_batches=max_num_gen_batches,
            anchor_similarity=anchor_similarity, num_train_samples=num_train_samples,
        )
        self.val_rollouts = ValidationRollouts(
            self, lock, prompt_key=prompt_key, temperature=val_temperature, top_p=val_top_p,
            top_k=val_top_k, n=val_n, also_greedy=val_also_greedy, trajectory_dir=trajectory_dir,
            num_samples=num_val_samples,
        )
        #: rows dropped or cut for their prompt's length (logged with every rollout)
        self.prompt_counts: dict[str, float] = {}
        self._prompts_fitted = False
        self._batches: IterationBatches | None = None
        self.session: Any = None
        self.train_rows: list[dict[str, Any]] = []
        self.val_rows: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ set-up

    def setup(self, stage: str | None = None) -> None:
        if not self._prompts_fitted:
            renderer = self.renderer_factory() if self.renderer_factory is not None else None
            if renderer is not None and renderer.max_model_len:
                self._fit_prompts(renderer)  # before any engine starts
        if self.session is None:
            self.session = self.session_factory()
        if not self._prompts_fitted:
            self._fit_prompts(renderer_from_loop(self.session.loop))

    def _fit_prompts(self, renderer: PromptRenderer) -> None:
        rows = load_prompt_rows(
            self.train_files, self.val_files, renderer, max_prompt_length=self.max_prompt_length,
            filter_overlong_prompts=self.filter_overlong_prompts, truncation=self.truncation,
            prompt_key=self.prompt_key, train_batch_size=self.train_batch_size,
        )
        if self.train_files:
            self.train_rows = rows.train
        if self.val_files:
            self.val_rows = rows.val
        self.prompt_counts.update(rows.counts)
        self._prompts_fitted = True
        if self.reward is not None:
            check_reward_fields(self.reward, {"data.train_files": self.train_rows, "data.val_files": self.val_rows})

    def teardown(self, stage: str) -> None:
        if stage == "fit":
            self.stop_producer()

    def stop_producer(self) -> None:
        """Stop rolling out ahead (what it rolled out and nobody trained on is dropped: a resumed
        run rolls those iterations out again from the same prompts)."""
        self.train_rollouts.stop()

    def close(self) -> None:
        """Stop the engine pool (the session outlives fit so that a final validation reuses it)."""
        self.stop_producer()
        if self.session is not None:
            self.session.close()
            self.session = None

    # ------------------------------------------------------------------ loaders

    def train_dataloader(self) -> DataLoader:
        bound = self.gen_batch_bound()
        if bound > 1 and bound * self.train_batch_size > len(self.train_rows):
            raise DataError(
                f"algorithm.filter_groups.max_num_gen_batches={bound} needs {bound} × "
                f"data.train_batch_size={self.train_batch_size} training rows (a row is rolled "
                f"out at most once per iteration), more than the {len(self.train_rows)} left; "
                f"lower it to at most {len(self.train_rows) // self.train_batch_size} (0: as many "
                "as the rows hold)"
            )
        self._batches = IterationBatches(
            self.train_rows, self._rank_batch_size(), seed=self.seed, shuffle=self.shuffle,
            start=self.iteration, rank=self.rank,
        )
        return train_loader(self._batches)

    def val_dataloader(self) -> DataLoader | list:
        if not self.val_rows:
            return []
        rank, world = self.rank()
        return val_loader(self.val_rows, rank, world, self.val_batch_size)

    # ------------------------------------------------------------------ where the run is

    def iteration(self) -> int:
        """RL iterations done (the module's count; 0 without a trainer)."""
        trainer = self.trainer
        return int(getattr(trainer.lightning_module, "iteration", 0)) if trainer else 0

    def rank(self) -> tuple[int, int]:
        """(rank, world size)."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer else (0, 1)

    def policy_version(self) -> int:
        """The version of the policy the next update trains (the module's ``policy_version``)."""
        module = self.lightning_module()
        return int(getattr(module, "policy_version", 0)) if module is not None else 0

    def lightning_module(self) -> Any:
        trainer = self.trainer
        return trainer.lightning_module if trainer is not None else None

    def draw(self, k: int, j: int = 0) -> Items:
        """Iteration ``k``'s prompts on this rank; ``j`` > 0: its generation batch ``j`` of
        dynamic sampling (:meth:`~agentfly.rollout.loaders.IterationBatches.refill`)."""
        assert self._batches is not None, "train_dataloader() draws the prompts"
        return self._batches.refill(k, j) if j else self._batches.batch(k)

    def group_offset(self, k: int, j: int = 0) -> int:
        """The first group id of iteration ``k``'s generation batch ``j`` on this rank (group
        ids are unique over the run; without dynamic sampling ``j`` is 0 and the bound 1)."""
        rank, world = self.rank()
        return ((k * self.gen_batch_bound() + j) * world + rank) * self._rank_batch_size()

    def gen_batch_bound(self) -> int:
        """Generation batches an iteration may roll out: 1 without dynamic sampling, else
        ``max_num_gen_batches``, or (0) as many as the training rows hold."""
        if self.filter_groups_metric is None:
            return 1
        return self.max_num_gen_batches or max(1, len(self.train_rows) // self.train_batch_size)

    def _rank_batch_size(self) -> int:
        """This rank's prompts per iteration (the plan checked that the ranks divide the batch)."""
        return max(1, self.train_batch_size // self.rank()[1])

    # ------------------------------------------------------------------ batches

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if not (isinstance(batch, list) and batch and isinstance(batch[0], tuple)):
            return batch  # already a collated batch
        trainer = self.trainer
        if trainer is not None and trainer.training:
            return self.rollout(batch)
        return self.validate_rollout(batch)

    def rollout(self, items: Items) -> RolloutBatch:
        """Iteration k's batch (:meth:`TrainingRollouts.batch`).

        With several ranks, a rollout that raised on one rank stops every rank here
        (:func:`~agentfly.core.ranks.fail_together`), before the update's collectives."""
        k = self.iteration()
        try:
            batch = self.train_rollouts.batch(k, items)
        except Exception as error:
            fail_together(error, f"the rollout of iteration {k}")
            raise
        fail_together(None, f"the rollout of iteration {k}")
        return batch

    def validate_rollout(self, items: Items) -> dict[str, Any]:
        """A validation batch's sums (:meth:`ValidationRollouts.batch`)."""
        return self.val_rollouts.batch(items)

    @property
    def last_rollout(self) -> dict[str, Any]:
        """The metrics of the last training batch handed over."""
        return self.train_rollouts.last

    @property
    def val_samples(self) -> list[dict[str, Any]]:
        """This validation's written trajectories (for the loggers, which empty the list)."""
        return self.val_rollouts.samples

    @val_samples.setter
    def val_samples(self, samples: list[dict[str, Any]]) -> None:
        self.val_rollouts.samples = samples

    def wait_rollouts_idle(self) -> None:
        """Wait until the producer has rolled out all the bound allows (no rollout in flight)."""
        self.train_rollouts.wait_idle()

    def before_weight_push(self) -> None:
        """Called before new weights reach the engines: in ``one_step_off`` mode, wait for the
        rollout in flight, so that it ends on the weights it began with."""
        self.train_rollouts.before_weight_push()

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state.get("seed", self.seed))
