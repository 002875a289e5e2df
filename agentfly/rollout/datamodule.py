"""The rollout DataModule: prompts in, scored and collated trajectories out.

The dataloader yields *prompts* (cheap; Lightning may fetch them one step ahead). The batch of
iteration k is handed over in ``on_before_batch_transfer``, which Lightning calls right before
each ``training_step`` — after the previous step's update and weight sync. With
``rollout_mode="sync"`` the rollout runs there, so iteration k's rollout uses the weights after
update k−1 (a rollout inside the dataloader would run one step early, on stale weights, because
of Lightning's prefetch). With ``one_step_off`` or ``async`` a
:class:`~agentfly.rollout.producer.RolloutProducer` rolls out upcoming iterations on a background
thread while the update runs, within the staleness bound (see :mod:`agentfly.rollout.producer`).

With ``greedy_baselines`` (an estimator that ``needs_baselines``, e.g. ReMax) the same rollout runs
one extra greedy chain per prompt beside the sampled ones, with the same weights, tools and
reward; its reward becomes ``reward_baselines`` of that prompt's chains and it is not trained on.

Validation batches are rolled out with ``val_kwargs`` sampling (greedy by default; ``n`` chains per
prompt), optionally a greedy pass beside a sampled one, and reduced to sums and counts per data
source. Each rank validates its own slice of the validation rows; the module adds the ranks'
sums and counts before logging, so the logged means are exact whatever the world size.

Every row's prompt is measured when the data is loaded (:mod:`agentfly.rollout.prompt_fit`):
before the engines start when the context is known from the config (``renderer_factory``),
else right after, with the agent loop's own tokenizer and context. Too long a prompt is dropped
(and counted: ``data/{split}_prompts_dropped``), cut, or stops the run, per ``data.*``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from torch.utils.data import DataLoader

from agentfly.core import metric_sums
from agentfly.core.batch import RolloutBatch
from agentfly.core.metric_sums import Sums
from agentfly.core.ranks import fail_together
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.data import DataError, load_rows
from agentfly.rollout.failures import complete_groups
from agentfly.rollout.producer import Produced, RolloutProducer, lead, too_stale
from agentfly.rollout.prompt_fit import (
    PromptRenderer,
    fit_prompts,
    prompt_limit,
    renderer_from_loop,
)
from agentfly.rollout.summary import summarize, trajectory_record
from agentfly.rollout.trainer_threads import TrainerThreads

logger = logging.getLogger(__name__)


def _add_val_sums(sums: Sums, prefix: str, trajs: list[Any]) -> None:
    """Add one pass's reward, accuracy, tool-call rate and turns, per data source, as [sum, count]."""
    for t in trajs:
        source = str(t.row.get("data_source", "val"))
        values = {
            "reward": float(t.reward or 0.0),
            "tool_call_rate": 1.0 if t.tool_calls else 0.0,
            "turns/mean": float(t.num_turns),
        }
        if "acc" in t.reward_extras:
            values["accuracy"] = float(t.reward_extras["acc"])
        for name, value in values.items():
            metric_sums.add(sums, f"{prefix}/{source}/{name}", value)


def _rows_collate(items: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    return items


class _Rows(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[int, dict[str, Any]]:
        return i, self.rows[i]


class IterationBatches(torch.utils.data.IterableDataset):
    """Prompt batches addressed by RL iteration: batch ``k`` depends only on (seed, k, rank).

    Epoch ``e`` is one seeded permutation of the rows (``seed + e``); iteration ``k`` takes the
    ``k``-th slice of ``world * batch_size`` rows of it, and this rank its share. A resumed run
    starts at the iteration the checkpoint holds and so sees exactly the prompts an
    uninterrupted run would have seen.
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        batch_size: int,
        *,
        seed: int,
        shuffle: bool,
        start: Callable[[], int],
        rank: Callable[[], tuple[int, int]],
    ) -> None:
        self.rows = rows
        self.batch_size = batch_size
        self.seed = 0 if seed is None else seed
        self.shuffle = shuffle
        self.start = start
        self.rank = rank

    def batch(self, k: int) -> list[tuple[int, dict[str, Any]]]:
        rank, world = self.rank()
        global_size = self.batch_size * world
        per_epoch = len(self.rows) // global_size
        if per_epoch == 0:
            raise ValueError(
                f"data.train_batch_size={global_size} is larger than the {len(self.rows)} training rows"
            )
        epoch, step = divmod(k, per_epoch)
        if self.shuffle:
            order = torch.randperm(len(self.rows), generator=torch.Generator().manual_seed(self.seed + epoch))
        else:
            order = torch.arange(len(self.rows))
        chunk = order[step * global_size : (step + 1) * global_size]
        mine = chunk[rank * self.batch_size : (rank + 1) * self.batch_size].tolist()
        return [(i, self.rows[i]) for i in mine]

    def __iter__(self):
        k = self.start()
        while True:
            yield self.batch(k)
            k += 1


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
        max_prompt_length: PositiveInt | None = None,
        filter_overlong_prompts: bool = True,
        truncation: Literal["error", "left", "right", "middle"] = "error",
        renderer_factory: Callable[[], PromptRenderer] | None = None,
        rollout_mode: Literal["sync", "one_step_off", "async"] = "sync",
        max_staleness: PositiveInt = 1,
        max_iterations: int | None = None,
        producer_threads: PositiveInt | None = None,
        idle_threads: PositiveInt | None = None,
        failed_chains: Literal["resample", "drop", "keep"] = "resample",
        max_resamples: NonNegativeInt = 3,
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
        self.num_val_samples = num_val_samples
        self.max_prompt_length = max_prompt_length
        self.filter_overlong_prompts = filter_overlong_prompts
        self.truncation = truncation
        self.renderer_factory = renderer_factory
        self.rollout_mode = rollout_mode
        # iterations a rollout may run ahead, which is also the staleness bound a token is held to
        self.lead = lead(rollout_mode, int(max_staleness))
        self.max_iterations = max_iterations
        self.producer_threads = producer_threads
        self.idle_threads = idle_threads
        self._threads: TrainerThreads | None = None
        self._producer: RolloutProducer | None = None
        self._rollout_lock = threading.Lock()  # one rollout at a time: the producer's or validation's
        self._batches: IterationBatches | None = None
        self.failed_chains = failed_chains
        self.max_resamples = max_resamples
        #: rows dropped or cut for their prompt's length (logged with every rollout)
        self.prompt_counts: dict[str, float] = {}
        self._prompts_fitted = False
        self.session: Any = None
        self.train_rows: list[dict[str, Any]] = []
        self.val_rows: list[dict[str, Any]] = []
        self.last_rollout: dict[str, Any] = {}
        self.val_samples: list[dict[str, Any]] = []  # this validation's written trajectories

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
        """Load the rows, keep those whose prompt fits, and check a batch can still be drawn."""
        limit = prompt_limit(self.max_prompt_length, int(renderer.max_model_len))
        settings = dict(
            limit=limit, filter_overlong=self.filter_overlong_prompts,
            truncation=self.truncation, prompt_key=self.prompt_key,
        )
        for split, files in (("train", self.train_files), ("val", self.val_files)):
            if not files:
                continue
            rows = [(f, i, r) for f in files for i, r in enumerate(load_rows(f, self.prompt_key))]
            fitted = fit_prompts(rows, renderer, split=split, **settings)
            setattr(self, f"{split}_rows", fitted.rows)
            self.prompt_counts[f"data/{split}_prompts_dropped"] = float(len(fitted.dropped))
            self.prompt_counts[f"data/{split}_prompts_truncated"] = float(len(fitted.truncated))
        needed = self.train_batch_size
        if self.train_files and len(self.train_rows) < needed:
            dropped = int(self.prompt_counts.get("data/train_prompts_dropped", 0))
            raise DataError(
                f"data.train_batch_size={needed} is larger than the {len(self.train_rows)} "
                f"training rows left after dropping {dropped} whose prompt is too long "
                f"(data.max_prompt_length={limit})"
            )
        self._prompts_fitted = True

    def teardown(self, stage: str) -> None:
        if stage == "fit":
            self.stop_producer()

    def stop_producer(self) -> None:
        """Stop rolling out ahead (what it rolled out and nobody trained on is dropped: a resumed
        run rolls those iterations out again from the same prompts)."""
        if self._producer is not None:
            self._producer.stop()
            self._producer = None
        if self._threads is not None:
            self._threads.detach()
            self._threads = None

    def close(self) -> None:
        """Stop the engine pool (the session outlives fit so that a final validation reuses it)."""
        self.stop_producer()
        if self.session is not None:
            self.session.close()
            self.session = None

    def train_dataloader(self) -> DataLoader:
        dataset = IterationBatches(
            self.train_rows, self._rank_batch_size(), seed=self.seed, shuffle=self.shuffle,
            start=self._iteration, rank=self._rank,
        )
        dataset.batch(0)  # a batch larger than the data fails here, naming both sizes
        self._batches = dataset
        return DataLoader(dataset, batch_size=None, collate_fn=_rows_collate)

    def _iteration(self) -> int:
        trainer = self.trainer
        return int(getattr(trainer.lightning_module, "iteration", 0)) if trainer else 0

    def _rank(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer else (0, 1)

    def val_dataloader(self) -> DataLoader | list:
        """This rank's contiguous slice of the validation rows (ranks may differ by one row)."""
        if not self.val_rows:
            return []
        rank, world = self._rank()
        n = len(self.val_rows)
        if n < world:
            raise ValueError(f"{n} validation rows cannot be split over {world} ranks (each needs one)")
        mine = list(range(rank * n // world, (rank + 1) * n // world))
        size = self.val_batch_size or len(mine)
        dataset = torch.utils.data.Subset(_Rows(self.val_rows), mine)
        return DataLoader(dataset, batch_size=size, shuffle=False, collate_fn=_rows_collate)

    @property
    def val_sampled(self) -> bool:
        return bool(self.val_temperature)

    # ------------------------------------------------------------------ rollouts

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if not (isinstance(batch, list) and batch and isinstance(batch[0], tuple)):
            return batch  # already a collated batch
        trainer = self.trainer
        if trainer is not None and trainer.training:
            return self.rollout(batch)
        return self.validate_rollout(batch)

    def rollout(self, items: list[tuple[int, dict[str, Any]]]) -> RolloutBatch:
        """Iteration k's batch: rolled out now (``sync``, the on-policy point), or taken from the
        producer, which rolled it out while earlier updates ran; then collated.

        With several ranks, a rollout that raised on one rank stops every rank here
        (:func:`~agentfly.core.ranks.fail_together`), before the update's collectives."""
        k = self._iteration()
        try:
            batch = self._rollout(k, items)
        except Exception as error:
            fail_together(error, f"the rollout of iteration {k}")
            raise
        fail_together(None, f"the rollout of iteration {k}")
        return batch

    def _rollout(self, k: int, items: list[tuple[int, dict[str, Any]]]) -> RolloutBatch:
        if self.rollout_mode == "sync":
            produced = self._roll(k, items)
            waited = produced.seconds
        else:
            if self._producer is None:
                self._producer = RolloutProducer(
                    self._roll, first=k, lead=self.lead, last=self.max_iterations,
                    lock=self._rollout_lock, on_start=self._producer_threads,
                )
                self._lend_idle_cores(self._producer)
            if self._threads is not None:
                self._threads.before_hand_over()
            produced, waited = self._producer.take(k)
            if [i for i, _ in produced.items] != [i for i, _ in items]:
                raise RuntimeError(
                    f"iteration {k}: the producer rolled out rows {[i for i, _ in produced.items]}, "
                    f"the data loader drew {[i for i, _ in items]}"
                )
        return self._hand_over(produced, waited)

    def _producer_threads(self) -> None:
        if self.producer_threads:
            torch.set_num_threads(int(self.producer_threads))

    def _lend_idle_cores(self, producer: RolloutProducer) -> None:
        """With ``idle_threads``, the module's models switch the training thread to them at
        their block boundaries while ``producer`` is idle."""
        share = torch.get_num_threads()
        if not self.idle_threads or self.idle_threads == share or self.trainer is None:
            return
        self._threads = TrainerThreads(share, int(self.idle_threads), lambda: producer.idle)
        self._threads.attach(self.trainer.lightning_module)

    def _roll(self, k: int, items: list[tuple[int, dict[str, Any]]] | None = None) -> Produced:
        """Roll out iteration ``k``'s prompts (drawn here when ``items`` is None)."""
        if items is None:
            assert self._batches is not None, "train_dataloader() draws the prompts"
            items = self._batches.batch(k)
        start = time.perf_counter()
        trajs, baselines = self._run_rows([row for _, row in items], self._group_offset(k))
        trajs, baselines, failures = self._complete(trajs, baselines)
        return Produced(
            k, items, trajs, baselines, seconds=time.perf_counter() - start, metrics=failures
        )

    def _complete(
        self, trajs: list[Any], baselines: list[Any], others_kept: bool = False
    ) -> tuple[list[Any], list[Any], dict[str, float]]:
        """``trajs`` without the chains the infrastructure failed: re-run, or their groups
        dropped (``failed_chains``); with the counts to log."""
        loop = self.session.loop
        return complete_groups(
            trajs, self.failed_chains, baselines=baselines, max_resamples=self.max_resamples,
            can_drop=self._rank()[1] == 1, others_kept=others_kept,
            resample=lambda chains, a: loop.rerun(chains, attempt=a, prompt_key=self.prompt_key),
        )

    def _run_rows(self, rows: list[dict[str, Any]], offset: int) -> tuple[list[Any], list[Any]]:
        """The sampled chains of ``rows`` (group ids from ``offset``), and their greedy
        baseline chains when the estimator needs them (else [])."""
        loop = self.session.loop
        if self.greedy_baselines:
            return loop.run_with_baselines(rows, prompt_key=self.prompt_key, group_offset=offset)
        return loop.run(rows, prompt_key=self.prompt_key, group_offset=offset), []

    def _refuse_stale(self, produced: Produced, current: int) -> int:
        """Roll out anew, on the engines' current weights, every group with a chain more than
        ``lead`` versions behind ``current``; returns the chains refused.

        The new chains go through the same failure handling as a first rollout (re-run or
        dropped, counted in ``produced.metrics``)."""
        refused = too_stale(produced.trajs, current, self.lead)
        if not refused:
            return 0
        offset = self._group_offset(produced.iteration)
        count = sum(1 for t in produced.trajs if t.group_id in refused)
        fresh_trajs: list[Any] = []
        fresh_baselines: list[Any] = []
        with self._rollout_lock:
            for gid in sorted(refused):  # group id = offset + the row's position in the batch
                t, b = self._run_rows([produced.items[gid - offset][1]], gid)
                fresh_trajs += t
                fresh_baselines += b
            others = any(t.group_id not in refused for t in produced.trajs)
            fresh_trajs, fresh_baselines, failures = self._complete(
                fresh_trajs, fresh_baselines, others_kept=others
            )
        by_group: dict[int, list[Any]] = {}
        for t in fresh_trajs:
            by_group.setdefault(t.group_id, []).append(t)
        trajs, baselines = [], []
        for t in produced.trajs:
            if t.group_id not in refused:
                trajs.append(t)
            elif t.chain_index == 0:
                trajs.extend(by_group.get(t.group_id, []))
        fresh_by_group = {b.group_id: b for b in fresh_baselines}
        for b in produced.baselines:
            if b.group_id not in refused:
                baselines.append(b)
            elif b.group_id in fresh_by_group:
                baselines.append(fresh_by_group[b.group_id])
        produced.trajs, produced.baselines = trajs, baselines
        for key, value in failures.items():
            produced.metrics[key] = produced.metrics.get(key, 0.0) + value
        return count

    def _hand_over(self, produced: Produced, waited: float) -> RolloutBatch:
        """Collate a rollout for the update, with its metrics and its record."""
        current = self._policy_version()
        refused = 0 if self.rollout_mode == "sync" else self._refuse_stale(produced, current)
        trajs, baselines = produced.trajs, produced.baselines
        elapsed = produced.seconds
        batch = collate_trajectories(
            trajs, self._pad_id(), baselines if self.greedy_baselines else None
        )
        summary = summarize(trajs)
        tokens = sum(sum(t.loss_mask) for t in trajs + baselines)  # every token the engines sampled
        self.last_rollout = {
            "timing/rollout_s": elapsed,
            "rollout/tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
            **{f"rollout/{k}": v for k, v in summary.items() if isinstance(v, int | float) and v is not None},
            **self.prompt_counts,
            **produced.metrics,
        }
        if self.rollout_mode != "sync":
            self.last_rollout.update(self._staleness_metrics(batch, current))
            self.last_rollout["timing/wait_for_rollout_s"] = waited
            self.last_rollout["timing/engine_wait_s"] = produced.engine_wait_s
            self.last_rollout["rollout/stale_refused_chains"] = float(refused)
        if self.greedy_baselines:
            rewards = [float(b.reward or 0.0) for b in baselines]
            self.last_rollout["rollout/reward_baseline/mean"] = sum(rewards) / len(rewards)
        batch.rollout_metrics = self.last_rollout
        self._write_rollout_record(
            produced.items, trajs, baselines, current, self._group_offset(produced.iteration)
        )
        return batch

    @staticmethod
    def _staleness_metrics(batch: RolloutBatch, current: int) -> dict[str, float]:
        """Staleness of the sampled tokens (versions behind the policy that trains on them)."""
        assert batch.policy_version is not None
        known = batch.policy_version >= 0
        if not bool(known.any()):
            return {}
        lag = (current - batch.policy_version[known]).float()
        return {"rollout/staleness/mean": float(lag.mean()), "rollout/staleness/max": float(lag.max())}

    def _policy_version(self) -> int:
        trainer = self.trainer
        module = trainer.lightning_module if trainer is not None else None
        return int(getattr(module, "policy_version", 0)) if module is not None else 0

    def _write_rollout_record(
        self, items: list[tuple[int, dict[str, Any]]], trajs: list[Any], baselines: list[Any],
        current: int, offset: int,
    ) -> None:
        """One JSON line per training batch in ``rollouts_rank{r}.jsonl``, written when it is
        handed to the update: which rows this rank trains on at which iteration, their rewards
        (the per-rank record of a DDP run), the greedy baseline chains' rewards (one per row)
        when there are any, and the policy versions that sampled them (``policy_version``: the
        one training on them). ``rows`` are the rows drawn; ``dropped_rows`` those of them whose
        group was dropped (``algorithm.failed_chains``): no chain of theirs is in ``rewards``."""
        if not self.trajectory_dir:
            return
        rank, world = self._rank()
        rewards = [t.reward for t in trajs]
        sampled = [v for t in trajs for v in t.sampled_versions if v >= 0]
        record = {"iteration": self._iteration() + 1, "rank": rank, "world_size": world,
                  "rows": [i for i, _ in items], "chains": len(trajs), "rewards": rewards,
                  "policy_version": current,
                  "sampled_by": [min(sampled), max(sampled)] if sampled else None}
        kept = {t.group_id for t in trajs}
        record["dropped_rows"] = [i for p, (i, _) in enumerate(items) if offset + p not in kept]
        if baselines:
            record["baseline_rewards"] = [b.reward for b in baselines]
        path = Path(self.trajectory_dir) / f"rollouts_rank{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def validate_rollout(self, items: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
        """Roll out a validation batch: ``{"index": ..., "val_sums": {metric: [sum, count]}}``
        (after the producer's rollout in flight, if any: the two do not share the engines).

        With several ranks an error is not raised here but handed over as ``val_error``: the
        ranks may hold different numbers of batches, so they agree on failures at the epoch's
        end, where the module raises on every rank (:func:`~agentfly.core.ranks.fail_together`)
        instead of one rank waiting for the others' sums."""
        try:
            with self._rollout_lock:
                return self._validate_rollout(items)
        except Exception as error:
            if self._rank()[1] == 1:
                raise
            return {"index": torch.arange(0), "val_sums": {}, "val_error": error}

    def _validate_rollout(self, items: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
        rows = [row for _, row in items]
        sums: Sums = {}
        passes = [("val", self.val_sampled)]
        if self.val_sampled and self.val_also_greedy:
            passes.append(("val_greedy", False))
        chains = 0
        for prefix, sampled in passes:
            trajs = self._val_pass(rows, sampled)
            chains += len(trajs)
            self._write_val_samples(trajs, prefix)
            _add_val_sums(sums, prefix, trajs)
        return {"index": torch.arange(chains), "val_sums": sums}

    def _val_pass(self, rows: list[dict[str, Any]], sampled: bool) -> list[Any]:
        loop = self.session.loop
        if not sampled:
            return loop.run(rows, prompt_key=self.prompt_key, num_chains=1, greedy=True)
        sampling = replace(
            loop.sampling, temperature=float(self.val_temperature), top_p=self.val_top_p, top_k=self.val_top_k
        )
        return loop.run(rows, prompt_key=self.prompt_key, num_chains=self.val_n, sampling=sampling)

    def _write_val_samples(self, trajs: list[Any], prefix: str = "val") -> None:
        """Append up to ``num_val_samples`` validation trajectories per validation to a JSONL
        (``{prefix}_trajectories_iterNNNNNN.jsonl``; rank 0, from its slice of the rows) and keep
        those of the main pass in ``val_samples`` for the loggers."""
        if not self.trajectory_dir or (self.trainer is not None and self.trainer.global_rank != 0):
            return
        step = getattr(self.trainer.lightning_module, "iteration", 0) if self.trainer else 0
        path = Path(self.trajectory_dir) / f"{prefix}_trajectories_iter{step:06d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        written = sum(1 for _ in path.open()) if path.exists() else 0
        with path.open("a", encoding="utf-8") as f:
            for t in trajs[: max(0, self.num_val_samples - written)]:
                record = trajectory_record(t, self.session.tokenizer)
                if prefix == "val":
                    self.val_samples.append(record)
                f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def _group_offset(self, k: int) -> int:
        """Iteration ``k``'s first group id on this rank (group ids are unique over the run)."""
        rank, world = self._rank()
        return (k * world + rank) * self._rank_batch_size()

    def wait_rollouts_idle(self) -> None:
        """Wait until the producer has rolled out all the bound allows (no rollout in flight)."""
        if self._producer is not None:
            self._producer.wait_idle()

    def before_weight_push(self) -> None:
        """Called before new weights reach the engines: in ``one_step_off`` mode, wait for the
        rollout in flight, so that it ends on the weights it began with."""
        if self.rollout_mode == "one_step_off" and self._producer is not None:
            self._producer.wait_idle()

    def _rank_batch_size(self) -> int:
        """This rank's prompts per iteration (the plan checked that the ranks divide the batch)."""
        return max(1, self.train_batch_size // self._rank()[1])

    def _pad_id(self) -> int:
        tok = self.session.tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0))

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state.get("seed", self.seed))
