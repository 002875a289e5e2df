"""The hand-over of a training batch: iteration k's rollout, produced now or ahead, checked for
staleness, failed groups completed or dropped, collated, recorded.

The batch of iteration k is handed over right before its ``training_step`` — after the previous
step's update and weight sync. With ``rollout_mode="sync"`` the rollout runs there, so iteration
k's rollout uses the weights after update k−1 (a rollout inside the dataloader would run one step
early, on stale weights, because of Lightning's prefetch). With ``one_step_off`` or ``async`` a
:class:`~agentfly.rollout.producer.RolloutProducer` rolls out upcoming iterations on a background
thread while the update runs, within the staleness bound (see :mod:`agentfly.rollout.producer`);
at hand-over every chain is checked again, and a group with a chain past the bound is rolled out
anew on the current weights.

A chain the infrastructure failed is re-run as soon as it fails (:mod:`agentfly.rollout.resampling`),
or its group dropped, or kept (:mod:`agentfly.rollout.failures`), in a first rollout and in a
group rolled out again alike.

With ``greedy_baselines`` (an estimator that ``needs_baselines``, e.g. ReMax) the same rollout runs
one extra greedy chain per prompt beside the sampled ones, with the same weights, tools and
reward; its reward becomes ``reward_baselines`` of that prompt's chains and it is not trained on.

With ``algorithm.filter_groups`` (DAPO's dynamic sampling, :mod:`agentfly.rollout.dynamic_sampling`)
a rollout leaves out the groups whose chains all score alike and rolls out further generation
batches of the iteration until the batch is full again, after the failed chains are handled and
with their greedy baselines; in every rollout mode it happens inside the rollout (the producer's,
off ``sync``), and again at hand-over for the groups rolled out anew as too stale.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import torch

from agentfly.core.batch import RolloutBatch
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.dynamic_sampling import PREFIX, Generation, GroupFilter, GroupRows
from agentfly.rollout.failures import complete_groups
from agentfly.rollout.loaders import Items
from agentfly.rollout.producer import Produced, RolloutProducer, lead, too_stale
from agentfly.rollout.resampling import Resampler
from agentfly.rollout.summary import summarize
from agentfly.rollout.trainer_threads import TrainerThreads


def staleness_metrics(batch: RolloutBatch, current: int) -> dict[str, float]:
    """Staleness of the sampled tokens (versions behind the policy that trains on them)."""
    assert batch.policy_version is not None
    known = batch.policy_version >= 0
    if not bool(known.any()):
        return {}
    lag = (current - batch.policy_version[known]).float()
    return {"rollout/staleness/mean": float(lag.mean()), "rollout/staleness/max": float(lag.max())}


class RunPosition(Protocol):
    """What the hand-over reads of the run it serves (the rollout data module)."""

    session: Any  # the RolloutSession: its agent loop and tokenizer
    prompt_counts: dict[str, float]  # rows dropped or cut for their prompt's length

    def iteration(self) -> int: ...  # RL iterations done

    def rank(self) -> tuple[int, int]: ...  # (rank, world size)

    def policy_version(self) -> int: ...  # the version of the policy the update trains

    def draw(self, k: int, j: int = 0) -> Items: ...  # iteration k's prompts (generation batch j) on this rank

    def group_offset(self, k: int, j: int = 0) -> int: ...  # their first group id on this rank

    def gen_batch_bound(self) -> int: ...  # generation batches an iteration may roll out

    def lightning_module(self) -> Any: ...  # the module whose threads idle cores may join


class TrainingRollouts:
    """Hands over each iteration's training batch.

    Args:
        run: where the run is, and its rollout session.
        lock: one rollout at a time (the producer's, a refused group's, validation's).
        prompt_key: the row field holding the question.
        greedy_baselines: roll out one greedy chain per prompt as its reward baseline.
        failed_chains: ``resample``, ``drop`` or ``keep``.
        max_resamples: re-runs of a failed chain at most.
        resample_budget_s: seconds past a rollout's first round within which a re-run must be
            expected to end; None: the longest deadline of the tool calls that timed out so far, 30 s
            while none has (:mod:`agentfly.rollout.resampling`).
        rollout_mode: ``sync``, ``one_step_off`` or ``async``.
        max_staleness: in ``async`` mode, policy versions a sampled token may be behind.
        max_iterations: the run's iterations (the producer rolls out none beyond); None: no end.
        producer_threads: torch threads of the producer's thread (None: torch's default).
        idle_threads: torch threads of the training thread while the producer is idle (None:
            unchanged).
        trajectory_dir: where ``rollouts_rank{r}.jsonl`` is written, and rank 0's
            ``train_trajectories_iterNNNNNN.jsonl`` (the text of ``num_train_samples`` of each
            iteration's training chains); None: nowhere.
        num_train_samples: training chains per iteration whose whole text is kept (the first
            ones of the batch: the prompt as the model saw it, the turns, tool calls and
            observations, reward, finish reason); 0: none.
        filter_metric: with dynamic sampling, ``algorithm.filter_groups.metric``; None: off.
        max_num_gen_batches: ``algorithm.filter_groups.max_num_gen_batches`` (0: as many as the
            rows hold, :meth:`RunPosition.gen_batch_bound`).
        anchor_similarity: group the turns' anchor states by text similarity at this threshold
            when collating (GiGPO's ``enable_similarity``); None: by equal text.
    """

    def __init__(
        self, run: RunPosition, lock: threading.Lock, *, prompt_key: str | None,
        greedy_baselines: bool, failed_chains: str, max_resamples: int,
        resample_budget_s: float | None, rollout_mode: str,
        max_staleness: int, max_iterations: int | None, producer_threads: int | None,
        idle_threads: int | None, trajectory_dir: str | None, filter_metric: str | None = None,
        max_num_gen_batches: int = 0, anchor_similarity: float | None = None,
        num_train_samples: int = 4,
    ) -> None:
        self.run = run
        self.num_train_samples = num_train_samples
        self.lock = lock
        self.prompt_key = prompt_key
        self.greedy_baselines = greedy_baselines
        self.failed_chains = failed_chains
        self.max_resamples = max_resamples
        self.resample_budget_s = resample_budget_s
        self.rollout_mode = rollout_mode
        # iterations a rollout may run ahead, which is also the staleness bound a token is held to
        self.lead = lead(rollout_mode, int(max_staleness))
        self.max_iterations = max_iterations
        self.producer_threads = producer_threads
        self.idle_threads = idle_threads
        self.trajectory_dir = trajectory_dir
        self.filter_metric = filter_metric
        self.max_num_gen_batches = max_num_gen_batches
        self.anchor_similarity = anchor_similarity
        self.producer: RolloutProducer | None = None
        self._threads: TrainerThreads | None = None
        self.last: dict[str, Any] = {}  # the metrics of the last batch handed over

    # ------------------------------------------------------------------ the batch of iteration k

    def batch(self, k: int, items: Items) -> RolloutBatch:
        """Iteration k's batch: rolled out now (``sync``, the on-policy point), or taken from the
        producer, which rolled it out while earlier updates ran; then collated."""
        if self.rollout_mode == "sync":
            produced = self.roll(k, items)
            waited = produced.seconds
        else:
            if self.producer is None:
                self.producer = RolloutProducer(
                    self.roll, first=k, lead=self.lead, last=self.max_iterations,
                    lock=self.lock, on_start=self._producer_threads,
                )
                self._lend_idle_cores(self.producer)
            if self._threads is not None:
                self._threads.before_hand_over()
            produced, waited = self.producer.take(k)
            if [i for i, _ in produced.items] != [i for i, _ in items]:
                raise RuntimeError(
                    f"iteration {k}: the producer rolled out rows {[i for i, _ in produced.items]}, "
                    f"the data loader drew {[i for i, _ in items]}"
                )
        return self.hand_over(produced, waited)

    def roll(self, k: int, items: Items | None = None) -> Produced:
        """Roll out iteration ``k``'s prompts (drawn here when ``items`` is None); with dynamic
        sampling, the groups whose chains all score alike are replaced from further generation
        batches (their time is in ``seconds``)."""
        if items is None:
            items = self.run.draw(k)
        start = time.perf_counter()
        batch, rolled = self.generate(k, 0, items), 1
        group_filter = self.group_filter()
        if group_filter is not None:
            batch, rolled = group_filter.fill(
                batch, lambda j: self.generate(k, j, self.run.draw(k, j)), size=len(items),
                rolled=rolled, where=self._where(k),
            )
        return Produced(
            k, items, batch.trajs, batch.baselines, seconds=time.perf_counter() - start,
            metrics=batch.metrics, rows=batch.rows, left_out=batch.left_out, gen_batches=rolled,
        )

    def generate(self, k: int, j: int, items: Items) -> Generation:
        """Generation batch ``j`` of iteration ``k`` (``items``), its failed chains handled."""
        resampler = self.resampler()
        offset = self.run.group_offset(k, j)
        trajs, baselines = self.run_rows([row for _, row in items], offset, resampler)
        trajs, baselines, failures = self.complete(trajs, baselines, resampler)
        if resampler is not None and resampler.first_round_s is not None:
            # every chain's first run: what re-runs added past it is the rest of timing/rollout_s
            failures["timing/first_round_s"] = resampler.first_round_s
        rows = {offset + p: item for p, item in enumerate(items)}
        return Generation(trajs, baselines, rows, metrics=failures)

    def group_filter(self) -> GroupFilter | None:
        """Dynamic sampling's filter (None: off)."""
        if self.filter_metric is None:
            return None
        return GroupFilter(self.filter_metric, self.run.gen_batch_bound(), self.max_num_gen_batches)

    def _where(self, k: int) -> str:
        rank, world = self.run.rank()
        return f"iteration {k}" + (f" on rank {rank} of {world}" if world > 1 else "")

    def resampler(self) -> Resampler | None:
        """What re-runs a rollout's failed chains as they fail (``resample``), else None."""
        if self.failed_chains != "resample":
            return None
        return Resampler(self.max_resamples, self.resample_budget_s)

    def run_rows(
        self, rows: list[dict[str, Any]], offset: int, resampler: Resampler | None
    ) -> tuple[list[Any], list[Any]]:
        """The sampled chains of ``rows`` (group ids from ``offset``), and their greedy
        baseline chains when the estimator needs them (else []); a failed chain re-run in its
        place by ``resampler``."""
        loop = self.run.session.loop
        kwargs = {"prompt_key": self.prompt_key, "group_offset": offset, "retry": resampler}
        if self.greedy_baselines:
            return loop.run_with_baselines(rows, **kwargs)
        return loop.run(rows, **kwargs), []

    def complete(
        self, trajs: list[Any], baselines: list[Any], resampler: Resampler | None,
        others_kept: bool = False,
    ) -> tuple[list[Any], list[Any], dict[str, float]]:
        """``trajs`` without the chains the infrastructure failed: their re-runs counted, or
        their groups dropped (``failed_chains``); with the counts to log."""
        return complete_groups(
            trajs, self.failed_chains, resampler=resampler, baselines=baselines,
            can_drop=self.run.rank()[1] == 1, others_kept=others_kept,
        )

    def refuse_stale(self, produced: Produced, current: int) -> int:
        """Roll out anew, on the engines' current weights, every group with a chain more than
        ``lead`` versions behind ``current``; returns the chains refused.

        The new chains go through the same failure handling as a first rollout (re-run or
        dropped, counted in ``produced.metrics``), and with dynamic sampling through the same
        filter: a group whose new chains all score alike leaves, and the batch is filled again
        from the iteration's next generation batches."""
        refused = too_stale(produced.trajs, current, self.lead)
        if not refused:
            return 0
        offset = self.run.group_offset(produced.iteration)
        rows = produced.rows or {offset + p: item for p, item in enumerate(produced.items)}
        count = sum(1 for t in produced.trajs if t.group_id in refused)
        fresh_trajs: list[Any] = []
        fresh_baselines: list[Any] = []
        resampler = self.resampler()
        with self.lock:
            for gid in sorted(refused):
                t, b = self.run_rows([rows[gid][1]], gid, resampler)
                fresh_trajs += t
                fresh_baselines += b
            others = any(t.group_id not in refused for t in produced.trajs)
            fresh_trajs, fresh_baselines, failures = self.complete(
                fresh_trajs, fresh_baselines, resampler, others_kept=others
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
        group_filter = self.group_filter()
        if group_filter is not None:
            k = produced.iteration
            with self.lock:
                refilled, produced.gen_batches = group_filter.fill(
                    Generation(trajs, baselines, rows), lambda j: self.generate(k, j, self.run.draw(k, j)),
                    size=len(produced.items), rolled=produced.gen_batches,
                    checked={g for g in rows if g not in refused}, where=self._where(k),
                )
            trajs, baselines, produced.rows = refilled.trajs, refilled.baselines, refilled.rows
            produced.left_out.update(refilled.left_out)
            failures = {**failures, **{
                key: failures.get(key, 0.0) + value for key, value in refilled.metrics.items()
            }}
        produced.trajs, produced.baselines = trajs, baselines
        for key, value in failures.items():
            produced.metrics[key] = produced.metrics.get(key, 0.0) + value
        return count

    def hand_over(self, produced: Produced, waited: float) -> RolloutBatch:
        """Collate a rollout for the update, with its metrics and its record."""
        current = self.run.policy_version()
        start = time.perf_counter()
        refused = 0 if self.rollout_mode == "sync" else self.refuse_stale(produced, current)
        trajs, baselines = produced.trajs, produced.baselines
        elapsed = produced.seconds + (time.perf_counter() - start if refused else 0.0)  # with re-rolls
        batch = collate_trajectories(
            trajs, self._pad_id(), baselines if self.greedy_baselines else None,
            self.anchor_similarity,
        )
        summary = summarize(trajs)
        tokens = sum(sum(t.loss_mask) for t in trajs + baselines)  # every token the engines sampled
        self.last = {
            "timing/rollout_s": elapsed,
            "rollout/tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
            **{f"rollout/{k}": v for k, v in summary.items() if isinstance(v, int | float) and v is not None},
            **self.run.prompt_counts,
            # after the summary: the failures of every run (re-run and dropped ones too), not
            # only of the chains trained on, so each count agrees with rollout/failed_chains/*
            **produced.metrics,
        }
        if self.rollout_mode != "sync":
            self.last.update(staleness_metrics(batch, current))
            self.last["timing/wait_for_rollout_s"] = waited
            self.last["timing/engine_wait_s"] = produced.engine_wait_s
            self.last["rollout/stale_refused_chains"] = float(refused)
        if self.greedy_baselines:
            rewards = [float(b.reward or 0.0) for b in baselines]
            self.last["rollout/reward_baseline/mean"] = sum(rewards) / len(rewards)
        if self.filter_metric is not None:
            self.last[PREFIX + "gen_batches"] = float(produced.gen_batches)
        batch.rollout_metrics = self.last
        self.write_record(
            produced.items, trajs, baselines, current, self.run.group_offset(produced.iteration),
            rows=produced.rows, left_out=produced.left_out,
        )
        return batch

    def write_record(
        self, items: Items, trajs: list[Any], baselines: list[Any], current: int, offset: int,
        rows: GroupRows | None = None, left_out: dict[int, str] | None = None,
    ) -> None:
        """One JSON line per training batch in ``rollouts_rank{r}.jsonl``, written when it is
        handed to the update: which rows this rank trains on at which iteration, their rewards
        (the per-rank record of a DDP run), the greedy baseline chains' rewards (one per row)
        when there are any, and the policy versions that sampled them (``policy_version``: the
        one training on them). ``rows`` are the rows drawn; ``dropped_rows`` those whose group
        was dropped (``algorithm.failed_chains``): no chain of theirs is in ``rewards``. With
        dynamic sampling (``rows``: every group rolled out, ``left_out``: the filter's), also
        ``refill_rows`` (the rows of the further generation batches, in order),
        ``all_alike_rows`` (left out: their chains all scored alike) and ``trimmed_rows`` (left
        out: the batch was full); ``dropped_rows`` may then name refill rows too.
        Chains that acted in environments add each chain's ``turn_rewards`` (each turn's own
        reward: its environment steps' and the reward function's) and ``returns`` (each
        episode's, by environment)."""
        if not self.trajectory_dir:
            return
        rank, world = self.run.rank()
        rewards = [t.reward for t in trajs]
        sampled = [v for t in trajs for v in t.sampled_versions if v >= 0]
        record = {"iteration": self.run.iteration() + 1, "rank": rank, "world_size": world,
                  "rows": [i for i, _ in items], "chains": len(trajs), "rewards": rewards,
                  "policy_version": current,
                  "sampled_by": [min(sampled), max(sampled)] if sampled else None}
        kept = {t.group_id for t in trajs}
        groups = rows or {offset + p: item for p, item in enumerate(items)}
        left_out = left_out or {}
        record["dropped_rows"] = [i for g, (i, _) in groups.items() if g not in kept and g not in left_out]
        if self.filter_metric is not None:
            first = range(offset, offset + len(items))
            record["refill_rows"] = [i for g, (i, _) in groups.items() if g not in first]
            for why in ("all_alike", "trimmed"):
                record[f"{why}_rows"] = [groups[g][0] for g, w in left_out.items() if w == why]
        if baselines:
            record["baseline_rewards"] = [b.reward for b in baselines]
        if any(t.environments for t in trajs):
            record["turn_rewards"] = [t.turn_rewards for t in trajs]
            record["returns"] = [{k: e["return"] for k, e in t.environments.items()} for t in trajs]
        path = Path(self.trajectory_dir) / f"rollouts_rank{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if rank == 0 and self.num_train_samples > 0:
            from agentfly.rollout.summary import trajectory_record

            step = Path(self.trajectory_dir) / f"train_trajectories_iter{record['iteration']:06d}.jsonl"
            tokenizer = getattr(self.run.session, "tokenizer", None)  # None: the records without text
            with step.open("w", encoding="utf-8") as f:  # a re-run iteration (a resume) writes it anew
                for t in trajs[: self.num_train_samples]:
                    f.write(json.dumps(trajectory_record(t, tokenizer), ensure_ascii=False) + "\n")

    def _pad_id(self) -> int:
        tok = self.run.session.tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0))

    # ------------------------------------------------------------------ the producer

    def _producer_threads(self) -> None:
        if self.producer_threads:
            torch.set_num_threads(int(self.producer_threads))

    def _lend_idle_cores(self, producer: RolloutProducer) -> None:
        """With ``idle_threads``, the module's models switch the training thread to them at
        their block boundaries while ``producer`` is idle."""
        share = torch.get_num_threads()
        module = self.run.lightning_module()
        if not self.idle_threads or self.idle_threads == share or module is None:
            return
        self._threads = TrainerThreads(share, int(self.idle_threads), lambda: producer.idle)
        self._threads.attach(module)

    def wait_idle(self) -> None:
        """Wait until the producer has rolled out all the bound allows (no rollout in flight)."""
        if self.producer is not None:
            self.producer.wait_idle()

    def before_weight_push(self) -> None:
        """In ``one_step_off`` mode, wait for the rollout in flight, so that it ends on the
        weights it began with."""
        if self.rollout_mode == "one_step_off" and self.producer is not None:
            self.producer.wait_idle()

    def stop(self) -> None:
        """Stop rolling out ahead (what it rolled out and nobody trained on is dropped: a resumed
        run rolls those iterations out again from the same prompts)."""
        if self.producer is not None:
            self.producer.stop()
            self.producer = None
        if self._threads is not None:
            self._threads.detach()
            self._threads = None
