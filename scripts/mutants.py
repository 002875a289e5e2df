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

Snippets point into the code as it is: when the code they name moves, edit ``MUTATIONS``.
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
COPIED = ("agentfly", "tests", "conf", "pyproject.toml")
LEARNING = "tests/modules/test_learning.py"
SIGNS = "tests/estimators/test_signs.py"
WORKERS = "tests/rollout/test_workers.py"
LENDING = "tests/rollout/test_lending.py"
BREAKER = "tests/rollout/test_breaker.py"


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` (exactly once in ``file``) by ``new``, then run ``tests``."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation(
        "policy gradient zeroed",
        "agentfly/modules/rl_module.py",
        "        loss = pg\n",
        "        loss = pg * 0\n",
        (f"{LEARNING}::test_one_update_raises_positive_and_lowers_negative_advantage_chains",),
    ),
    Mutation(
        "advantage sign flipped in the policy loss",
        "agentfly/modules/rl_module.py",
        "old, logp, micro.advantages, mask,",
        "old, logp, -micro.advantages, mask,",
        (f"{LEARNING}::test_one_update_raises_positive_and_lowers_negative_advantage_chains",),
    ),
    Mutation(
        "the policy loss that loss_mode names is not the one called",
        "agentfly/modules/rl_module.py",
        "get_policy_loss(policy_loss.loss_mode)",
        'get_policy_loss("vanilla")',
        (f"{LEARNING}::test_the_module_calls_the_policy_loss_that_loss_mode_names",),
    ),
    Mutation(
        "advantages zeroed by the advantage callback",
        "agentfly/callbacks/advantage.py",
        "batch.advantages, batch.returns = advantages, returns",
        "batch.advantages, batch.returns = advantages * 0, returns",
        (f"{LEARNING}::test_one_update_raises_positive_and_lowers_negative_advantage_chains",),
    ),
    Mutation(
        "critic optimizer step skipped (an optimizer that does not move)",
        "agentfly/modules/rl_module.py",
        "metrics.update(self._update(*critic_update, batch, optimizers[1], schedulers[1]))",
        "metrics.update(self._update(*critic_update, batch, torch.optim.SGD(self.critic.parameters(), lr=0.0), schedulers[1]))",
        (f"{LEARNING}::test_one_critic_update_moves_the_values_toward_the_returns",),
    ),
    Mutation(
        "critic trained toward its old values, not the returns",
        "agentfly/modules/rl_module.py",
        "self.values(micro), micro.values, micro.returns, micro.response_mask,",
        "self.values(micro), micro.values, micro.values, micro.response_mask,",
        (f"{LEARNING}::test_one_critic_update_moves_the_values_toward_the_returns",),
    ),
    Mutation(
        "KL term dropped from the loss",
        "agentfly/modules/rl_module.py",
        "loss = loss + kl.kl_loss_coef * kl_loss",
        "loss = loss",
        (f"{LEARNING}::test_kl_loss_pulls_the_actor_toward_the_reference",),
    ),
    Mutation(
        "KL penalty dropped from the reward",
        "agentfly/callbacks/kl_reward.py",
        "batch.token_level_rewards = batch.token_level_scores - beta * kld",
        "batch.token_level_rewards = batch.token_level_scores",
        (f"{LEARNING}::test_kl_in_the_reward_is_old_to_reference_and_shapes_the_returns",),
    ),
    Mutation(
        "actor and reference swapped in the KL loss",
        "agentfly/modules/rl_module.py",
        "per_token = kl_penalty(logp, micro.ref_log_probs, kl.kl_loss_type)",
        "per_token = kl_penalty(micro.ref_log_probs, logp, kl.kl_loss_type)",
        (f"{LEARNING}::test_logged_kl_loss_is_the_actor_to_reference_kl",),
    ),
    Mutation(
        "policy and reference swapped in the KL reward",
        "agentfly/callbacks/kl_reward.py",
        "kl_penalty(batch.old_log_probs, batch.ref_log_probs, self.kind)",
        "kl_penalty(batch.ref_log_probs, batch.old_log_probs, self.kind)",
        (f"{LEARNING}::test_kl_in_the_reward_is_old_to_reference_and_shapes_the_returns",),
    ),
    Mutation(
        "advantages computed before the reward is shaped",
        "agentfly/modules/rl_module.py",
        "        metrics.update(shape_rewards(self.rollout_callbacks, self.trainer, self, batch))\n"
        "        metrics.update(compute_advantages(self.rollout_callbacks, self.trainer, self, batch))\n",
        "        metrics.update(compute_advantages(self.rollout_callbacks, self.trainer, self, batch))\n"
        "        metrics.update(shape_rewards(self.rollout_callbacks, self.trainer, self, batch))\n",
        (f"{LEARNING}::test_kl_in_the_reward_is_old_to_reference_and_shapes_the_returns",),
    ),
    Mutation(
        "a weight bucket loaded as it arrives (the engine serves a mix of old and new weights)",
        "agentfly/rollout/engines/host.py",
        "        if not last:\n            return None\n",
        "",
        ("tests/config/test_newer_verl_keys.py::test_the_engine_serves_the_new_weights_after_the_last_bucket_only",),
    ),
    Mutation(
        "batch hooks in reverse stage order",
        "agentfly/core/batch_hooks.py",
        "sorted(hooks, key=lambda cb: cb.stage)",
        "sorted(hooks, key=lambda cb: -cb.stage)",
        ("tests/estimators/test_callbacks.py::test_hooks_of_one_phase_run_in_stage_order",),
    ),
    Mutation(
        "loss mask inverted in collate (observation tokens trained)",
        "agentfly/rollout/collate.py",
        "response_mask[i, :r] = torch.tensor(t.loss_mask, dtype=torch.float32)",
        "response_mask[i, :r] = 1 - torch.tensor(t.loss_mask, dtype=torch.float32)",
        (f"{LEARNING}::test_the_update_is_the_gradient_of_the_sampled_tokens_only",),
    ),
    Mutation(
        "observation tokens get loss mask 1",
        "agentfly/core/trajectory.py",
        "self._append(ids, 0, [0.0] * len(ids), -1)",
        "self._append(ids, 1, [0.0] * len(ids), -1)",
        (f"{LEARNING}::test_the_update_is_the_gradient_of_the_sampled_tokens_only",),
    ),
    Mutation(
        "loss mask inverted in the actor loss",
        "agentfly/modules/rl_module.py",
        "mask = micro.response_mask\n",
        "mask = 1 - micro.response_mask\n",
        (f"{LEARNING}::test_the_update_is_the_gradient_of_the_sampled_tokens_only",),
    ),
    Mutation(
        "ratio against the current log-probs (detached)",
        "agentfly/modules/rl_module.py",
        "old = logp.detach() if micro.old_log_probs is None else micro.old_log_probs",
        "old = logp.detach()",
        (f"{LEARNING}::test_the_ratio_is_taken_against_the_behaviour_log_probs",),
    ),
    Mutation(
        "ratio against the reference's log-probs",
        "agentfly/modules/rl_module.py",
        "old = logp.detach() if micro.old_log_probs is None else micro.old_log_probs",
        "old = logp.detach() if micro.ref_log_probs is None else micro.ref_log_probs",
        (f"{LEARNING}::test_the_ratio_is_taken_against_the_behaviour_log_probs",),
    ),
    Mutation(
        "entropy bonus sign flipped",
        "agentfly/modules/rl_module.py",
        "loss = loss - p.entropy_coeff * ent",
        "loss = loss + p.entropy_coeff * ent",
        (f"{LEARNING}::test_the_entropy_bonus_raises_the_entropy",),
    ),
    Mutation(
        "GRPO advantages centred the wrong way",
        "agentfly/estimators/grpo.py",
        "centered = scores - means",
        "centered = means - scores",
        (f"{SIGNS}::test_better_reward_gets_positive_advantage",),
    ),
    Mutation(
        "GAE TD error sign flipped",
        "agentfly/estimators/gae.py",
        "delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]",
        "delta = values[:, t] - token_level_rewards[:, t] - gamma * next_value",
        (f"{SIGNS}::test_better_reward_gets_positive_advantage",),
    ),
    Mutation(
        "weight sync skipped",
        "agentfly/callbacks/weight_sync.py",
        "            session.pool.update_weights(state, version=int(getattr(pl_module, \"policy_version\", 0)))\n",
        "            pass\n",
        ("tests/test_weight_sync.py::test_engine_matches_the_actor_after_an_update[transformers]",),
    ),
    # faults in user code (issue 14): each guard, removed, must make a test fail
    Mutation(
        "sync tools run in the trainer's threads, not the worker processes",
        "agentfly/rollout/tools/call.py",
        "    elif not tool.runs_in_process:",
        "    elif True:",
        (f"{WORKERS}::test_hung_tools_time_out_at_their_deadline_and_later_calls_run",),
    ),
    # a fault in some calls costs only the chains it hits (issue 29)
    Mutation(
        "a queued call's deadline counts from its submission again",
        "agentfly/rollout/execution/workers.py",
        "            job.deadline = started + job.timeout  # its own time starts now\n",
        "            job.deadline = job.submitted + job.timeout\n",
        (f"{WORKERS}::test_a_queued_call_s_deadline_starts_when_a_worker_takes_it",),
    ),
    Mutation(
        "a tool with no call running waits behind another tool's hung calls",
        "agentfly/rollout/execution/call_queue.py",
        "        return self._running[label] == 0 and running < 2 * self.num_workers\n",
        "        return False\n",
        (f"{WORKERS}::test_a_tool_whose_calls_hang_never_keeps_another_tool_from_running",),
    ),
    # a fault costs only the chains it hits and only their time (issue 37)
    Mutation(
        "no spare worker kept",
        "agentfly/rollout/execution/workers.py",
        "            wanted = max(wanted + self.spares, self.num_workers + self.spares)\n",
        "            wanted = max(wanted, self.num_workers)\n",
        (f"{WORKERS}::test_a_started_pool_keeps_a_spare_so_a_dead_worker_is_not_waited_for",),
    ),
    Mutation(
        "an idle call never lends its place",
        "agentfly/rollout/execution/lending.py",
        "            elif not job.lent and idle and queue.lent < self.max_lent:",
        "            elif False:",
        (f"{LENDING}::test_calls_that_sleep_wait_side_by_side_not_in_a_queue",),
    ),
    Mutation(
        "a lent call still holds its place",
        "agentfly/rollout/execution/call_queue.py",
        "        return self._running.total() - self._lent\n",
        "        return self._running.total()\n",
        (f"{LENDING}::test_calls_that_sleep_wait_side_by_side_not_in_a_queue",),
    ),
    Mutation(
        "a computing call lends its place",
        "agentfly/rollout/execution/lending.py",
        "            idle = look[1] - cpu_then <= IDLE_SHARE * (now - since)",
        "            idle = True",
        (f"{LENDING}::test_a_computing_call_keeps_its_place",),
    ),
    Mutation(
        "workers start past the memory budget",
        "agentfly/rollout/execution/memory_budget.py",
        "    return claim_mb(workers, memory_mb) + memory_mb <= budget_mb",
        "    return True",
        (f"{LENDING}::test_the_workers_claim_stays_within_the_memory_budget",),
    ),
    Mutation(
        "idle workers past the memory budget are kept",
        "agentfly/rollout/execution/memory_budget.py",
        "        if memory_mb <= 0 or claim <= budget_mb or left <= num_workers:",
        "        if True:",
        (f"{LENDING}::test_the_workers_claim_stays_within_the_memory_budget",),
    ),
    Mutation(
        "a late worker start stops the pool at once",
        "agentfly/rollout/execution/worker_starts.py",
        "        return self.failures >= self.attempts",
        "        return True",
        (f"{WORKERS}::test_a_late_start_is_tried_again_and_the_pool_goes_on",),
    ),
    Mutation(
        "the tool breaker's first-calls rule never trips",
        "agentfly/rollout/tools/breaker.py",
        "        if self.first_calls and self._first.total() == self.first_calls and len(self._first) == 1:",
        "        if False:",
        (f"{BREAKER}::test_run_tool_call_stops_a_tool_whose_first_calls_all_failed",),
    ),
    Mutation(
        "the tool breaker's failure-rate rule never trips",
        "agentfly/rollout/tools/breaker.py",
        "        if len(settled) == self.window and failed >= self.failure_rate * self.window:",
        "        if False:",
        (f"{BREAKER}::test_the_failure_rate_rule_counts_over_the_last_window_calls",),
    ),
    Mutation(
        "the tool breaker counts calls in the order they ended",
        "agentfly/rollout/tools/breaker.py",
        "        running = min(self._pending, default=self.started)",
        "        running = self.started",
        (f"{BREAKER}::test_calls_count_in_the_order_they_started_not_the_order_they_ended",),
    ),
    Mutation(
        "the tool breaker counts a tool's own raise as a failure",
        "agentfly/rollout/tools/breaker.py",
        "        failed = kind in INFRA_TOOL_ERRORS",
        "        failed = kind is not None",
        (f"{BREAKER}::test_a_raise_of_the_tool_is_an_answer_and_only_infrastructure_failures_count",),
    ),
    Mutation(
        "a broken tool fails its chains instead of stopping the rollout",
        "agentfly/rollout/agent_loop.py",
        "        except (WorkerStartError, ToolBroken):  # every chain would fail alike: the rollout stops",
        "        except WorkerStartError:",
        (f"{BREAKER}::test_a_broken_tool_stops_the_rollout_instead_of_failing_its_chains",),
    ),
    Mutation(
        "rewards beyond float32 accepted",
        "agentfly/rollout/rewards/result.py",
        "    if abs(number) > FLOAT32_MAX:",
        "    if False:",
        (f"{WORKERS}::test_a_reward_beyond_float32_is_malformed_and_named",),
    ),
    Mutation(
        "a prompt that leaves no room is generated anyway",
        "agentfly/rollout/agent_loop.py",
        "        if len(prompt.ids) >= self.max_model_len:",
        "        if False:",
        ("tests/rollout/test_prompt_fit.py::test_a_chain_whose_prompt_leaves_no_room_never_generates",),
    ),
    Mutation(
        "the sandbox keeps root",
        "agentfly/rollout/execution/sandbox_worker.py",
        '    if limits.get("uid") is not None and os.geteuid() == 0:',
        "    if False:",
        ("tests/rollout/test_sandbox_escape.py::test_etc_shadow_is_unreadable",),
    ),
    Mutation(
        "a damaged last.ckpt is resumed from",
        "agentfly/run/checkpoints.py",
        "            why = checkpoint_damage(path)\n",
        "            why = None\n",
        ("tests/test_damaged_checkpoint.py::test_a_truncated_last_ckpt_resumes_from_the_intact_iteration_before_it",),
    ),
    Mutation(
        "a resume across a changed meaning key is not refused",
        "agentfly/run/resume.py",
        "    if refused and not plan.resume_changed_config:",
        "    if False:",
        ("tests/test_resume_config.py::test_a_changed_train_batch_size_is_refused_unless_told",),
    ),
    Mutation(
        "sft loss on every response token (observations trained)",
        "agentfly/modules/sft_module.py",
        'loss = agg_loss(nll, micro.response_mask, "token-mean", num_tokens=tokens)',
        'loss = agg_loss(nll, torch.ones_like(micro.response_mask), "token-mean", num_tokens=tokens)',
        ("tests/sft/test_sft_module.py::test_the_loss_is_the_mean_nll_of_the_assistant_tokens",),
    ),
    Mutation(
        "sft conversation: the text between turns laid out as sampled (mask 1)",
        "agentfly/sft/conversations.py",
        "traj.append_observation(self._encode(between))",
        "traj.append_sampled(self._encode(between), [0.0] * len(self._encode(between)))",
        ("tests/sft/test_conversations.py::test_the_mask_is_one_exactly_on_the_assistant_tokens",),
    ),
    Mutation(
        "LoRA adapter not merged into the weights the engines receive",
        "agentfly/core/weights.py",
        'state[f"{name}.weight"] = weight + layer.get_delta_weight(ADAPTER).to(weight.dtype)',
        'state[f"{name}.weight"] = weight + 0 * layer.get_delta_weight(ADAPTER).to(weight.dtype)',
        ("tests/test_lora_fit.py::test_merged_weights_reach_the_engine_with_merge",),
    ),
    # the transformers engine's prefix cache (issue 37): stale or misplaced K/V train silently
    Mutation(
        "prefix cache: new weights keep the old weights' K/V",
        "agentfly/rollout/engines/transformers_engine.py",
        "        self._prefixes.free()  # its K/V were computed with the old weights\n",
        "",
        ("tests/rollout/test_prefix_cache.py::test_new_weights_or_sleep_empty_the_store",),
    ),
    Mutation(
        "prefix cache: a new LoRA adapter keeps the old adapter's K/V",
        "agentfly/rollout/engines/transformers_engine.py",
        "        self._prefixes.free()  # its K/V were computed with the old weights\n"
        "        if isinstance(weights, LoraAdapter):\n"
        "            self._load_adapter(weights)\n"
        "            return\n",
        "        if isinstance(weights, LoraAdapter):\n"
        "            self._load_adapter(weights)\n"
        "            return\n"
        "        self._prefixes.free()  # its K/V were computed with the old weights\n",
        ("tests/rollout/test_prefix_cache.py::test_new_weights_or_sleep_empty_the_store",),
    ),
    Mutation(
        "prefix cache: emptying the store keeps its blocks",
        "agentfly/rollout/engines/prefix_cache.py",
        "        self._blocks.clear()\n",
        "",
        ("tests/rollout/test_prefix_cache.py::test_new_weights_or_sleep_empty_the_store",),
    ),
    Mutation(
        "prefix cache: kept through a sync update on the trainer's device",
        "agentfly/callbacks/weight_sync.py",
        "        session.pool.free_prefix_cache()\n",
        "",
        ("tests/rollout/test_prefix_cache_memory.py::"
         "test_a_fit_s_update_runs_with_the_in_process_engine_s_store_empty_and_serves_exactly_after",),
    ),
    Mutation(
        "prefix cache: a reused prefix's first token masked out",
        "agentfly/rollout/engines/kv_cache.py",
        "            mask[u, width - n :] = 1\n",
        "            mask[u, width - n + 1 :] = 1\n",
        ("tests/rollout/test_prefix_cache.py::"
         "test_multi_turn_calls_equal_the_uncached_engine_and_prefill_only_the_new_tokens",),
    ),
    Mutation(
        "prefix cache: a finished row's K/V stored from the batch's first row",
        "agentfly/rollout/engines/prefix_reuse.py",
        "kv_cache.row_kv(cache, row, columns[start:end])",
        "kv_cache.row_kv(cache, 0, columns[start:end])",
        ("tests/rollout/test_prefix_cache.py::"
         "test_multi_turn_calls_equal_the_uncached_engine_and_prefill_only_the_new_tokens",),
    ),
]


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
