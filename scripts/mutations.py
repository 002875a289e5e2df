"""The mutations ``scripts/mutants.py`` runs: each replaces one exact snippet of one file (it must
occur exactly once) and names the tests that must then fail. Snippets point into the code as it
is: when the code they name moves, edit them here."""

from __future__ import annotations

from dataclasses import dataclass

LEARNING = "tests/modules/test_learning.py"
SIGNS = "tests/estimators/test_signs.py"
WORKERS = "tests/rollout/test_workers.py"
LENDING = "tests/rollout/test_lending.py"
BREAKER = "tests/rollout/test_breaker.py"
RESAMPLING = "tests/rollout/test_resampling.py"
LOSSES = "agentfly/modules/policy_losses.py"
LOSS_TESTS = "tests/modules/test_policy_losses.py"
GIGPO = "tests/estimators/test_gigpo.py"
TURNS = "tests/estimators/test_turn_rewards.py"
DYNAMIC = "tests/rollout/test_dynamic_sampling.py"
PACKING = "tests/modules/test_packing.py"
MICRO = "tests/modules/test_micro_batches.py"
STATIC = "tests/rollout/test_static_decode.py"
VISION = "tests/rollout/test_vision_tokens.py"
HARNESS = "tests/rollout/test_harness.py"
FUSED = "tests/modules/test_fused_logprobs.py"


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
        "a re-sample past the first round ignores the budget",
        "agentfly/rollout/resampling.py",
        "        if past_round and now - self._round_end + seconds > self.budget():\n",
        "        if False:\n",
        (f"{RESAMPLING}::test_past_the_first_round_a_rerun_starts_only_if_it_would_end_within_the_budget",),
    ),
    Mutation(
        "the re-sampling budget ignores how long the re-run will take",
        "agentfly/rollout/resampling.py",
        "        if past_round and now - self._round_end + seconds > self.budget():\n",
        "        if past_round and now - self._round_end > self.budget():\n",
        (f"{RESAMPLING}::test_past_the_first_round_a_rerun_starts_only_if_it_would_end_within_the_budget",),
    ),
    Mutation(
        "the unset budget stays 30 s after a tool's calls time out",
        "agentfly/rollout/resampling.py",
        "        self._note_timeouts(traj)\n",
        "",
        (f"{RESAMPLING}::test_the_unset_budget_is_the_deadline_of_the_calls_that_timed_out",),
    ),
    Mutation(
        "a failed chain's re-run waits for the first round to end",
        "agentfly/rollout/agent_loop.py",
        "                attempt += 1\n",
        "                while retry._first_runs:\n"
        "                    await asyncio.sleep(0.01)\n"
        "                attempt += 1\n",
        (f"{RESAMPLING}::test_a_failed_chain_is_rerun_while_the_first_round_still_runs",),
    ),
    Mutation(
        "the math judge takes any number for its verdict",
        "agentfly/rollout/rewards/llm_judge.py",
        "(0\\.0|1\\.0)",
        "([0-9.]+)",
        ("tests/rollout/test_llm_judge.py::test_a_verdict_that_does_not_parse_fails_the_reward",),
    ),
    Mutation(
        "a run scores with the judge unbound to its server",
        "agentfly/rollout/runner.py",
        "        reward=reward,\n",
        "        reward=plan.reward,\n",
        ("tests/rollout/test_llm_judge.py::test_a_rollout_scores_its_chains_with_the_configured_judge",),
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
        "traj.append_observation(self._encode_with(between, shown))",
        "traj.append_sampled(self._encode_with(between, shown), [0.0] * len(self._encode_with(between, shown)))",
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
    Mutation(
        "sspo_multiturn (its math in no source) is not refused",
        "agentfly/config/validate.py",
        "    if name in NOT_BUILT:\n",
        "    if False:\n",
        ("tests/config/test_estimator_needs.py::"
         "test_sspo_multiturn_is_refused_naming_why_not_as_unknown",),
    ),
    Mutation(
        "a folded chain's reward on every segment's row",
        "agentfly/rollout/collate.py",
        "        if len(sampled) and rewards[i] is not None:\n"
        "            scores[i, int(sampled[-1])] = float(rewards[i])\n",
        "        if len(sampled) and trajs[-1].reward is not None:\n"
        "            scores[i, int(sampled[-1])] = float(trajs[-1].reward)\n",
        ("tests/rollout/test_folding.py::"
         "test_collate_gives_a_row_per_segment_and_the_reward_to_the_last",),
    ),
    Mutation(
        "SWE workspace: a link out of the workspace not resolved before the confinement check",
        "agentfly/rollout/tools/workspace.py",
        "        full = Path(os.path.realpath(root / text))\n",
        "        full = Path(os.path.abspath(root / text))\n",
        ("tests/rollout/test_tools_workspace.py::"
         "test_no_file_tool_reaches_a_path_outside_the_workspace",),
    ),
    Mutation(
        "GSPO's sequence ratio zeroed",
        LOSSES,
        "seq_log_ratio = (log_ratio * mask).sum(-1) / lengths  # (B,)",
        "seq_log_ratio = 0 * (log_ratio * mask).sum(-1) / lengths  # (B,)",
        (f"{LOSS_TESTS}::test_gspo_by_hand",),
    ),
    Mutation(
        "GSPO's sequence ratio sign-flipped",
        LOSSES,
        "seq_log_ratio = (log_ratio * mask).sum(-1) / lengths  # (B,)",
        "seq_log_ratio = -(log_ratio * mask).sum(-1) / lengths  # (B,)",
        (f"{LOSS_TESTS}::test_gspo_by_hand",),
    ),
    Mutation(
        "CISPO's clipped weight not stopped from the gradient",
        LOSSES,
        "per_token = _weigh(-clipped.detach() * advantages * logprob, weights)",
        "per_token = _weigh(-clipped * advantages * logprob, weights)",
        (f"{LOSS_TESTS}::test_cispo_by_hand_keeps_the_gradient_of_clipped_tokens",),
    ),
    Mutation(
        "SAPO's temperatures swapped",
        LOSSES,
        "masked_fill(advantages > 0, s.tau_pos)",
        "masked_fill(advantages <= 0, s.tau_pos)",
        (f"{LOSS_TESTS}::test_sapo_at_ratio_one_is_ppos_gradient_and_reads_its_temperatures",),
    ),
    Mutation(
        "DPPO's ratio cap carries a gradient",
        LOSSES,
        "capped = ratio.clamp(max=clip_ratio_c).detach()",
        "capped = ratio.clamp(max=clip_ratio_c)",
        (f"{LOSS_TESTS}::test_dppo_tv_by_hand",),
    ),
    Mutation(
        "KL-Cov penalises the tokens of smallest covariance",
        LOSSES,
        "penalised[flat[cov.topk(",
        "penalised[flat[(-cov).topk(",
        (f"{LOSS_TESTS}::test_kl_cov_penalises_the_token_of_largest_covariance",),
    ),
    Mutation(
        "DRO's penalty sign flipped",
        LOSSES,
        "- 0.5 * beta * log_ratio.square()",
        "+ 0.5 * beta * log_ratio.square()",
        (f"{LOSS_TESTS}::test_each_loss_is_verls_formula_and_gradient[dro-token-mean-0]",),
    ),
    Mutation(
        "the module does not hand the policy loss its settings",
        "agentfly/modules/rl_module.py",
        "weights=weights, config=p, **norms,",
        "weights=weights, **norms,",
        (f"{LOSS_TESTS}::test_the_module_hands_the_loss_its_settings",),
    ),
    Mutation(
        "GiGPO's step advantage dropped",
        "agentfly/estimators/gigpo.py",
        "    adv = (episode.unsqueeze(-1) + x.step_advantage_w * token_steps) * mask\n",
        "    adv = episode.unsqueeze(-1) * mask\n",
        (f"{GIGPO}::test_mean_norm_by_hand",),
    ),
    Mutation(
        "GiGPO's anchor states pooled across groups",
        "agentfly/estimators/gigpo.py",
        "torch.stack([groups, anchor[held]], dim=1)",
        "anchor[held].unsqueeze(1)",
        (f"{GIGPO}::test_mean_norm_by_hand",),
    ),
    Mutation(
        "GiGPO's turn returns undiscounted",
        "agentfly/estimators/turns.py",
        "running = step_rewards[:, k] + gamma * running",
        "running = step_rewards[:, k] + running",
        (f"{GIGPO}::test_mean_norm_by_hand",),
    ),
    Mutation(
        "turn rewards not added to the token rewards",
        "agentfly/callbacks/turn_rewards.py",
        "batch.token_level_rewards = rewards + placed",
        "batch.token_level_rewards = rewards",
        (f"{TURNS}::test_collated_turn_rewards_enter_the_token_rewards_through_the_callback",),
    ),
    Mutation(
        "a reward function's turn rewards dropped",
        "agentfly/rollout/rewards/call.py",
        "    if result.turn_rewards:  # the reward function's word on each turn replaces the tools' rewards\n",
        "    if False:  # the reward function's word on each turn replaces the tools' rewards\n",
        (f"{TURNS}::test_a_reward_function_gives_each_turn_its_reward",),
    ),
    Mutation(
        "turn rewards counted beside the outcome they decompose (a won TextWorld chain's return 2, not 1)",
        "agentfly/callbacks/turn_rewards.py",
        "            placed = placed - earned[:, None] * last_sampled(batch.response_mask)\n",
        "            pass\n",
        (f"{TURNS}::test_decomposed_turn_rewards_move_the_reward_earlier_and_keep_its_sum",
         "tests/envs/test_textworld.py::test_a_won_chains_token_rewards_add_up_to_its_reward_with_turn_rewards"),
    ),
    Mutation(
        "a reward function's turn rewards added to the environment's step rewards they already count",
        "agentfly/rollout/rewards/call.py",
        "        trajectory.turn_rewards = [float(r) for r in result.turn_rewards]\n",
        "        trajectory.turn_rewards = [a + float(r) for a, r in zip(trajectory.turn_rewards + [0.0] * len(result.turn_rewards), result.turn_rewards)]\n",
        (f"{TURNS}::test_a_reward_function_gives_each_turn_its_reward",
         "tests/envs/test_textworld.py::test_a_won_chains_token_rewards_add_up_to_its_reward_with_turn_rewards"),
    ),
    Mutation(
        "TextWorld's progress reward puts every turn's share on the last turn",
        "agentfly/rollout/rewards/env_rewards.py",
        "        turns.append(min(calls[i].turn, last) if i < len(calls) else last)\n",
        "        turns.append(last)\n",
        ("tests/rollout/test_env_rewards.py::test_textworld_progress_reward_gives_each_turn_the_share_its_step_earned",),
    ),
    Mutation(
        "dynamic sampling keeps the groups whose chains all score alike",
        "agentfly/rollout/dynamic_sampling.py",
        "    return [g for g, v in values.items() if len(v) > 1 and min(v) == max(v)]\n",
        "    return []\n",
        (f"{DYNAMIC}::test_alike_groups_are_dropped_and_refilled_to_exactly_the_batch_size",),
    ),
    Mutation(
        "dynamic sampling does not cut the filled batch to train_batch_size",
        "agentfly/rollout/dynamic_sampling.py",
        "        trimmed = out.trim(size)\n",
        "        trimmed = []\n",
        (f"{DYNAMIC}::test_alike_groups_are_dropped_and_refilled_to_exactly_the_batch_size",),
    ),
    Mutation(
        "the overlong penalty's sign flipped",
        "agentfly/rollout/rewards/overlong.py",
        "    return min(-exceed_len / buffer_len * penalty_factor, 0)\n",
        "    return min(exceed_len / buffer_len * penalty_factor, 0)\n",
        ("tests/rollout/test_overlong.py::test_the_penalty_by_hand",),
    ),
    Mutation(
        "the overlong length counts the sampled tokens only",
        "agentfly/rollout/rewards/overlong.py",
        "overlong_reward(len(traj.response_ids),",
        "overlong_reward(sum(traj.loss_mask),",
        ("tests/rollout/test_overlong.py::test_the_chain_is_measured_by_every_token_after_its_prompt",),
    ),
    Mutation(
        "IcePop's band loses its lower side",
        "agentfly/modules/rollout_correction.py",
        "    outside = high + low  # (B, T): 0 or 1, the sides exclude each other\n",
        "    outside = high  # (B, T): 0 or 1, the sides exclude each other\n",
        ("tests/modules/test_icepop.py::test_icepop_zeroes_the_weights_outside_the_band_and_keeps_every_token",),
    ),
    Mutation(
        "packed log-probs read the logits one position late",
        "agentfly/modules/packing.py",
        "    predictors = slot.view(real.shape)[:, prompt_length:][response] - 1  # (K,)\n",
        "    predictors = slot.view(real.shape)[:, prompt_length:][response]  # (K,)\n",
        (f"{PACKING}::test_log_probs_and_gradients_equal_the_padded_pass",),
    ),
    Mutation(
        "packed rows attend across each other under agentfly_sdpa (one block for every row)",
        "agentfly/models/attention.py",
        "    _, counts = torch.unique_consecutive(rows.flatten(), return_counts=True)\n",
        "    counts = torch.tensor([rows.numel()])\n",
        (f"{PACKING}::test_log_probs_and_gradients_equal_the_padded_pass",),
    ),
    Mutation(
        "a packed critic pass keeps a cache, so transformers does not read its rows off the positions",
        "agentfly/modules/packing.py",
        "        use_cache=False,  # with a cache transformers would not read the rows off the positions\n",
        "",
        (f"{PACKING}::test_values_and_gradients_equal_the_padded_pass",),
    ),
    Mutation(
        "the fused log-probs forget the rollout temperature",
        "agentfly/modules/rl_module.py",
        "        return linear_logprobs(hidden, weight, batch.responses, temperature=m.temperature)\n",
        "        return linear_logprobs(hidden, weight, batch.responses)\n",
        (f"{FUSED}::test_the_update_is_the_logits_paths",),
    ),
    Mutation(
        "the fused path drops the entropy bonus's gradient",
        "agentfly/modules/rl_module.py",
        "            entropy = entropy if p.entropy_coeff else entropy.detach()\n",
        "            entropy = entropy.detach()\n",
        (f"{FUSED}::test_the_update_is_the_logits_paths",),
    ),
    Mutation(
        "the chunked backward forgets the temperature",
        "agentfly/modules/linear_logprobs.py",
        "            g_z /= tau\n",
        "",
        ("tests/modules/test_linear_logprobs.py::test_values_and_gradients_equal_the_full_logits_path",),
    ),
    Mutation(
        "token-budget micro-batches come back in the wrong rows",
        "agentfly/modules/micro_batches.py",
        "    return out[torch.argsort(order)]\n",
        "    return out[order]\n",
        (f"{MICRO}::test_results_come_back_in_row_order",),
    ),
    Mutation(
        "each micro-batch's loss normalised by itself, not by the mini-batch",
        "agentfly/modules/rl_module.py",
        "loss, losses = loss_fn(micro, s.loss_agg_mode, norms)\n",
        "loss, losses = loss_fn(micro, s.loss_agg_mode, {})\n",
        (MICRO,),
    ),
    Mutation(
        "the static decode lets a row attend to its next, unwritten column",
        "agentfly/rollout/engines/static_decode.py",
        "        attend = self.columns[None, :] <= positions[:, None]  # (rows, L)\n",
        "        attend = self.columns[None, :] < positions[:, None]  # (rows, L)\n",
        (f"{STATIC}::test_greedy_static_equals_dynamic_with_more_rows_than_slots",),
    ),
    Mutation(
        "the static decode copies a prefill's padding into its slot",
        "agentfly/rollout/engines/static_decode.py",
        "torch.argsort((~real).int(), dim=-1, stable=True)",
        "torch.argsort(real.int(), dim=-1, stable=True)",
        (f"{STATIC}::test_greedy_static_equals_dynamic_with_more_rows_than_slots",),
    ),
    Mutation(
        "the engine prefills prompts with equal ids once, whatever their images",
        "agentfly/rollout/engines/transformers_engine.py",
        "        return (tuple(self.prompt), *(im.digest for im in self.images))\n",
        "        return (tuple(self.prompt),)\n",
        (f"{VISION}::test_same_ids_different_images_are_not_merged",),
    ),
    Mutation(
        "the trainer's forward of image rows uses text positions, not the model's multimodal ones",
        "agentfly/models/vision_inputs.py",
        '        kwargs["position_ids"] = rope_positions(model, input_ids, attention_mask, grid)\n',
        "",
        (f"{VISION}::test_engine_and_trainer_logprobs_agree",),
    ),
    Mutation(
        "a micro-batch's images are not its rows' images",
        "agentfly/core/batch.py",
        "images = images[rows] if isinstance(rows, slice) else [images[int(i)] for i in rows]",
        "images = images[::-1][rows] if isinstance(rows, slice) else [images[-1 - int(i)] for i in rows]",
        (f"{VISION}::test_engine_and_trainer_logprobs_agree",),
    ),
    Mutation(
        "a harness chain's tool results are trained on as if sampled",
        "agentfly/rollout/endpoint/chain.py",
        "            traj.append_observation(between)\n",
        "            traj.append_sampled(between, [0.0] * len(between))\n",
        (f"{HARNESS}::test_the_example_program_as_a_function_samples_what_the_builtin_loop_does_seeded",),
    ),
    Mutation(
        "a harness request that rewrote its history extends the old segment (tokens never given)",
        "agentfly/rollout/endpoint/chain.py",
        "        return (all(_view(a) == _view(b) for a, b in zip(messages, expected, strict=False))\n",
        "        return (True or all(_view(a) == _view(b) for a, b in zip(messages, expected, strict=False))\n",
        (f"{HARNESS}::test_every_training_token_is_what_the_engine_was_given_and_sampled",),
    ),
    Mutation(
        "packed rows attend across rows under eager (a boolean block mask, which eager adds to the scores)",
        "agentfly/modules/packing.py",
        "        return packed_rows(self.rows) if implementation == NAME else None\n",
        "        n = self.rows.shape[0]\n"
        "        same = (self.rows[:, None] == self.rows[None, :]) & torch.ones(n, n, dtype=torch.bool).tril()\n"
        "        return packed_rows(self.rows) if implementation == NAME else same[None, None]\n",
        (f"{PACKING}::test_log_probs_and_gradients_equal_the_padded_pass",
         "tests/modules/test_packed_fit.py::test_every_metric_of_the_iteration_is_the_padded_one"),
    ),
    Mutation(
        "agentfly_sdpa's packed rows see their own later tokens",
        "agentfly/models/attention.py",
        "            dropout_p=dropout, scale=scaling, is_causal=True, enable_gqa=grouped,\n",
        "            dropout_p=dropout, scale=scaling, is_causal=False, enable_gqa=grouped,\n",
        (f"{PACKING}::test_log_probs_and_gradients_equal_the_padded_pass",),
    ),
    Mutation(
        "a harness chain's requests answered at once (a reply stored after one it was not sampled from)",
        "agentfly/rollout/endpoint/service.py",
        "        async with chain.lock:  # a chain's requests one after another (endpoint/chain.py)\n",
        "        async with asyncio.Semaphore(2):  # a chain's requests one after another (endpoint/chain.py)\n",
        (f"{HARNESS}::test_two_completions_sent_at_once_each_train_after_what_they_were_sampled_from",),
    ),
    Mutation(
        "a harness request that failed keeps what it appended (its retry appends the tool results again)",
        "agentfly/rollout/endpoint/service.py",
        "                chain.restore(before)\n",
        "                pass\n",
        (f"{HARNESS}::test_a_request_retried_after_a_504_is_recorded_as_if_sent_once",),
    ),
    Mutation(
        "a harness chain's earlier segments train with no reward",
        "agentfly/rollout/harness.py",
        '            traj.segment_reward = "broadcast"\n',
        "            pass\n",
        (f"{HARNESS}::test_each_segment_trains_with_the_chain_s_reward",),
    ),
    Mutation(
        "a chain's room left is the looser of its context and response budgets",
        "agentfly/core/trajectory.py",
        'return (context, "max_model_len") if context <= response else (response, "max_response_len")',
        'return (context, "max_model_len") if context >= response else (response, "max_response_len")',
        ("tests/rollout/test_agent_loop.py::test_the_room_left_is_the_tighter_of_the_context_and_the_response_budget",),
    ),
    Mutation(
        "gui_point_reward's Gaussian spreads by the box's height across and its width down",
        "agentfly/rollout/rewards/gui_rewards.py",
        "math.exp(-(dx * dx / (2 * w * w) + dy * dy / (2 * h * h)))",
        "math.exp(-(dx * dx / (2 * h * h) + dy * dy / (2 * w * w)))",
        ("tests/rollout/test_gui_tools_rewards.py::test_gui_point_reward_is_one_inside_the_box_and_a_gaussian_of_the_distance_outside",),
    ),
]
