"""AgentFly's ``agent`` and verl's ``algorithm``, ``actor_rollout_ref`` and ``critic`` sections, typed.

Each dataclass is a group of ``agentfly fit`` (LightningCLI parses and checks them: a field's type
states its range or its choices, its docstring line is the key's help). ``data.*`` are the
arguments of :class:`~agentfly.rollout.datamodule.RolloutDataModule` and ``trainer.*`` those of
:class:`~agentfly.modules.trainer.AgentflyTrainer`. Defaults are verl's ``ppo_trainer.yaml`` where the
AgentFly documents are silent, and the AgentFly documents' where they state one. Departures from
verl, each on purpose:

- ``actor.use_kl_loss=True``, ``actor.entropy_coeff=0.001``,
  ``model.enable_gradient_checkpointing=False``, ``trainer.logger=['console']``: the AgentFly
  training guide's stated defaults.
- ``rollout.name='transformers'`` (verl: required): the embedded transformers engine, so a CPU
  run needs no vLLM (verl's ``hf`` is accepted for it, as AgentFly's ``agent_type=hf`` is for the
  ``hermes`` agent type; the composed config holds the registered names); ``rollout.tensor_model_parallel_size=1`` (verl: 2), so one GPU works.
- ``actor.strategy='auto'`` (verl: ``fsdp``) and ``trainer.device='auto'`` (verl: ``cuda``).
- ``data.filter_overlong_prompts=True`` (verl: False) and ``data.max_prompt_length`` = the
  context less one token (verl: 512): a row whose prompt leaves no room is dropped and counted.
- Model paths default to ``None`` (verl: a placeholder path).
- ``ppo_mini_batch_size`` counts *trajectories* (after the ``num_chains`` expansion; see
  :mod:`agentfly.config.validate`).

``actor_rollout_ref`` and ``critic`` are in :mod:`agentfly.config.schema_actor_critic`.

A key the LightningModule receives unchanged takes its default from the module's settings group
(:mod:`agentfly.modules.settings`), so the two cannot disagree: the value is written there once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
)

from agentfly.modules.settings import (
    BYPASS_LOSS_TYPES,
    CorrectionSettings,
    KLSettings,
)

# -------------------------------------------------------------------------------------- agent


@dataclass
class AgentInitConfig:
    """How the agent is built (canonical home of ``agent.tools``, ``agent.template``...).

    Attributes:
        agent_type: agent class by registry name (``hermes``, ``react``, ``code``, ``action``,
            ``searchr1``...; AgentFly's ``hf`` is ``hermes``) or ``module:attr``.
        template: chat template name; ``None`` = the tokenizer's own template.
        tools: tool names available to the agent.
        reward_name: registered reward function.
        backend: generation backend during training; only ``async_verl`` (AgentFly's value),
            which names agentfly's asynchronous engine pool: any other value is refused.
            ``agent.init_config.backend_config.backend`` is the same node.
        tool_parser_name: the tool parser that reads the model's turns: an agent type's
            (``hermes``, ``react``, ``code``, ``action``...) or ``qwen3_coder`` (Qwen3-Coder's
            XML calls); ``None`` = the agent type's own. An agent type that keeps its own parser
            (``searchr1``, ``bash_swe``, as AgentFly's) reads its turns itself whatever this
            names; the name is still checked.
        max_model_len: longest conversation in tokens a chain may reach; ``None`` = the model's.
        system_prompt: replaces the agent type's default system prompt.
        tool_config: per-tool settings by tool name (e.g.
            ``{search: {corpus_path: ..., top_k: 3}, calculator: {max_digits: 50}}``): each tool
            declares the settings it accepts (plus ``timeout`` and ``max_output_chars``); names
            and types are checked when the config is composed.
        plugins: the user's modules to import before any name is looked up (dotted module
            names or ``.py`` file paths), so that what they register can be named; any name
            above (and ``algorithm.adv_estimator``, ``actor_rollout_ref.rollout.name``) may also
            be a ``module:attr`` of the user's.
        reward_timeout: seconds a reward call may take before it scores 0 as a ``timeout``
            failure (its worker process killed); ``None`` = the reward's own
            ``@reward(timeout=)`` (60 s when it sets none).
        reward_config: settings of the reward by its name; only the LLM judges take any
            (``{llm_as_judge_math_reward: {base_url: http://host:8000/v1, model: ...,
            api_key_env: ..., timeout: 30}}``; :mod:`agentfly.rollout.rewards.reward_config`),
            and they need ``base_url`` and ``model``. Checked when the config is composed.
    """

    agent_type: str = "hermes"
    template: str | None = None
    tools: list[str] = field(default_factory=list)
    reward_name: str | None = None
    backend: str = "async_verl"
    tool_parser_name: str | None = None
    max_model_len: PositiveInt | None = None
    system_prompt: str | None = None
    tool_config: dict[str, Any] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    reward_timeout: PositiveFloat | None = None
    reward_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationConfig:
    """Sampling per turn during training rollouts.

    Attributes:
        max_tokens: tokens generated per turn at most.

    ``agent.generation_config.temperature``/``top_p`` (and ``agent.run_config...``) are spellings
    of ``actor_rollout_ref.rollout.temperature``/``top_p``: one sampling setting, one key.
    """

    max_tokens: PositiveInt = 512


@dataclass
class ContextConfig:
    """Where stateful tool and reward resources live.

    Attributes:
        resource_backend: ``local`` (in-process) or ``ray`` (Ray actors).
    """

    resource_backend: Literal["local", "ray"] = "local"


@dataclass
class WorkersConfig:
    """The worker processes that run sync tools and rewards (killed at a call's deadline).

    Attributes:
        num_workers: calls running at once in the worker processes (started once, reused);
            beyond it, a tool or the reward with no call running still gets one worker, so
            that a tool whose calls hang never stalls another. ``None`` = the usable CPU count
            within 2..8, or, when a tool or reward that runs in the workers is declared
            ``io_bound``, one per chain in flight (``max_concurrent_chains``, else a training
            batch's chains) up to 64.
        memory_mb: each worker's address-space limit in MiB (``RLIMIT_AS``, virtual memory,
            set after the plugins are imported): an allocation past it is a ``MemoryError`` in
            the worker (a counted ``exception`` failure); 0 = no limit (needed by code that
            initialises CUDA, which reserves far more address space than it uses).
        start_timeout: seconds a worker may take to start (import the plugins) before the
            rollout stops with an error naming what failed.
        queue_timeout: seconds a call may wait for a worker; past it the call fails as
            ``queue_timeout`` (``rollout/failed_chains/tool_queue_timeout``, ``..._reward_...``):
            the pool is too small for the calls in flight. A call's own timeout counts only
            from when a worker takes it.
        lend_after: seconds a call must run idle on the CPU (sleeping, waiting on a socket)
            before its worker lends its place: the call no longer counts against
            ``num_workers`` and another starts beside it, so hung calls wait side by side.
        max_lent: calls lent at once at most (each holds a worker process); 0 = none.
        memory_budget_mb: what the workers may claim together, in MiB: beyond the first
            ``num_workers``, a worker starts only while every worker's ``memory_mb`` (a lent
            one's resident memory) plus its own stays within it; ``None`` = the machine's
            memory (``MemTotal``, or the cgroup's limit when lower).
    """

    num_workers: PositiveInt | None = None
    memory_mb: NonNegativeInt = 4096
    start_timeout: PositiveFloat = 60.0
    queue_timeout: PositiveFloat = 600.0
    lend_after: PositiveFloat = 0.1
    max_lent: NonNegativeInt = 64
    memory_budget_mb: PositiveInt | None = None


@dataclass
class ToolBreakerConfig:
    """When a tool whose calls keep failing for the infrastructure (timeouts, dead workers, an
    unreachable service) stops the run, naming it and the counts.

    Attributes:
        first_calls: the run stops when a tool's first ``first_calls`` calls all failed the
            same way; 0 = never.
        window: with ``failure_rate``: the run stops when, of a tool's last ``window`` calls,
            at least that share failed; 0 = never.
        failure_rate: the share of ``window`` (a raise of the tool itself is an answer, not a
            failure).
    """

    first_calls: NonNegativeInt = 10
    window: NonNegativeInt = 50
    failure_rate: ClosedUnitInterval = 0.9


@dataclass
class AgentRunConfig:
    """The shape of a rollout (canonical home of ``agent.max_turns``, ``agent.num_chains``...).

    Attributes:
        max_turns: generation/tool turns per chain at most (``agent.max_steps`` is the same node).
        num_chains: chains (trajectories) per prompt; the group size of GRPO/RLOO.
        max_concurrent_chains: chains running at once at most; ``None`` = no extra cap.
        generation_config: per-turn sampling.
        context_config: resource placement.
        workers: the worker processes of sync tools and rewards.
        tool_breaker: when a tool whose calls keep failing stops the run.
    """

    max_turns: PositiveInt = 3
    num_chains: PositiveInt = 1
    max_concurrent_chains: PositiveInt | None = None
    generation_config: GenerationConfig = field(default_factory=GenerationConfig)
    context_config: ContextConfig = field(default_factory=ContextConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    tool_breaker: ToolBreakerConfig = field(default_factory=ToolBreakerConfig)


@dataclass
class HarnessConfig:
    """The user's own agent program in place of the built-in agent loop
    (:mod:`agentfly.rollout.harness`): each chain runs it against an OpenAI-compatible endpoint
    of its own, and trains on exactly what the engine sampled for its requests.

    Attributes:
        command: a shell command run once per chain with ``OPENAI_BASE_URL``,
            ``OPENAI_API_KEY`` and ``AGENTFLY_TASK`` (a file holding the row as JSON) set; its
            answer is the last line of its standard output. ``None``: not a command.
        function: ``module:attr`` (or ``file.py:attr``) of an ``async def f(task: dict, client)
            -> str`` given an ``openai.AsyncOpenAI`` client bound to the chain's endpoint.
            ``None``: not a function. At most one of ``command`` and ``function``; neither: the
            built-in agent loop.
        timeout: seconds the program may run for one chain; past it the chain fails (its
            processes killed).
        request_timeout: seconds one engine call may take; past it the request is answered 504.
        sandbox: run the command in the code sandbox (bubblewrap: a read-only file system with
            the working directory read-only and a private ``/tmp``, its own processes, a uid of
            its own under a root trainer, only its endpoint's variables set), with the host's
            network so that it reaches its endpoint. Needs ``command`` and bubblewrap.
        failures: whose fault a program's failure is (it hangs past ``timeout``, exits
            non-zero, raises, prints nothing): ``infrastructure`` (the default) re-samples or
            drops it per ``algorithm.failed_chains``, never a reward in a baseline; ``model``
            scores it 0 in its group, so outputs that make the program fail are trained against
            (``finish_reason`` ``program_failed``). See docs/harness.md.
    """

    command: str | None = None
    function: str | None = None
    timeout: PositiveFloat = 300.0
    request_timeout: PositiveFloat = 120.0
    sandbox: bool = False
    failures: Literal["infrastructure", "model"] = "infrastructure"


@dataclass
class AgentConfig:
    """The agent rollout path (AgentFly's own namespace).

    Attributes:
        use_agent: use the multi-turn agent loop; only ``True`` (verl's single-turn path is not
            built, ``False`` is refused).
        train_on_last_turn: compute the loss on the last assistant turn only.
        init_config: how the agent is built.
        run_config: how chains are run.
        harness: the user's agent program instead of the built-in loop.
    """

    use_agent: bool = True
    train_on_last_turn: bool = False
    init_config: AgentInitConfig = field(default_factory=AgentInitConfig)
    run_config: AgentRunConfig = field(default_factory=AgentRunConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)


# ---------------------------------------------------------------------------------- algorithm


@dataclass
class KLControlConfig:
    """The KL-in-reward coefficient controller.

    Attributes:
        type: ``fixed`` or ``adaptive`` (Ziegler et al., 2019).
        kl_coef: (initial) KL coefficient.
        target_kl: target KL of the adaptive controller.
        horizon: horizon of the adaptive controller, in samples.
    """

    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: NonNegativeFloat = 0.001
    target_kl: float = 0.1
    horizon: PositiveInt = 10000


@dataclass
class RolloutCorrectionConfig:
    """Off-policy correction between the engine that sampled the tokens (the behaviour policy)
    and the trainer (:mod:`agentfly.modules.rollout_correction`; verl's names and meanings).
    ``w = π_prox / π_behav``, π_prox the actor's policy before the update. ``rollout_rs`` takes
    ``token``/``sequence``, verl's ``token_k1``/``seq_sum_k1`` (also accepted by those names);
    verl's other rejection statistics and ``rollout_is_batch_normalize`` are not built. A band
    ``"lower_upper"`` is written with a decimal point in each bound, or quoted: ``0.5_5`` reads as
    the number 0.55 (in YAML and on the command line, as in verl).

    Attributes:
        rollout_is: importance weights on each token's policy loss, w per ``token`` or per
            ``sequence`` (the product over the chain's sampled tokens); ``None`` = off.
        rollout_is_threshold: a number C: truncated importance sampling (TIS), ``min(w, C)``;
            ``"lower_upper"`` (e.g. ``"0.5_5.0"``): IcePop, ``w · 1{lower ≤ w ≤ upper}``, a token
            outside the band adds nothing to the loss but stays in its denominator (verl's
            spelling, PR #5722).
        rollout_rs: rejection (masked IS): the tokens (``token``), or whole chains (``sequence``),
            whose w leaves the band ``rollout_rs_threshold`` leave the actor's loss and its
            denominator (the advantages keep them); ``None`` = off. With ``rollout_is`` at the
            same level and bound it is MIS, ``w · 1{lower ≤ w ≤ upper}``.
        rollout_rs_threshold: the rejection band: a number C is ``[1/C, C]`` (verl's ``*_k1``),
            ``"lower_upper"`` its two bounds; ``None`` = ``rollout_is_threshold``'s.
        bypass_mode: the engine's log-probabilities are PPO's old policy (the ratio and the clip
            are π_θ / π_behav; no pass recomputes the actor's); ``False``: decoupled PPO, the ratio
            and the clip use π_prox and ``rollout_is``/``rollout_rs`` weigh π_prox against π_behav.
            ``None`` = ``True`` when ``trainer.rollout_mode`` is not ``sync`` and neither
            ``rollout_is`` nor ``rollout_rs`` is set (stale samples are then clipped against the
            policy that sampled them), else ``False``; ``True`` with
            ``actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode``, which needs it. With
            that loss ``rollout_is`` and ``rollout_rs`` weigh π_θ / π_behav (verl's bypass mode);
            with any other they are refused in bypass mode.
        loss_type: the ``bypass_mode`` loss's: ``ppo_clip`` (PPO's clipped loss; the weights are
            only logged) or ``reinforce`` (``-w·A·log π_θ`` with ``rollout_is``'s weights).
    """

    rollout_is: Literal["token", "sequence"] | None = None
    rollout_is_threshold: PositiveFloat | str = CorrectionSettings.rollout_is_threshold
    rollout_rs: Literal["token", "sequence", "token_k1", "seq_sum_k1"] | None = None
    rollout_rs_threshold: PositiveFloat | str | None = None
    bypass_mode: bool | None = None
    loss_type: Literal[BYPASS_LOSS_TYPES] = CorrectionSettings.loss_type  # type: ignore[valid-type]


@dataclass
class FilterGroupsConfig:
    """DAPO's dynamic sampling (Yu et al. 2025; verl's keys and meanings,
    :mod:`agentfly.rollout.dynamic_sampling`).

    Attributes:
        enable: leave out of the batch every group whose chains' ``metric`` is all equal (a
            group of one chain stays), and roll out further prompts until the batch holds
            ``data.train_batch_size`` groups; logged as ``rollout/filter_groups/*``.
        metric: what is compared per chain: ``acc`` or ``score`` (that field of the reward's
            result, else the reward function's value), ``seq_reward`` (the chain's reward, a
            length penalty included), ``seq_final_reward`` (the same; refused with
            ``algorithm.use_kl_in_reward``, whose penalty the update computes later), or any
            other field of the reward's result. Required with ``enable``.
        max_num_gen_batches: generation batches (of ``data.train_batch_size`` prompts) an
            iteration may roll out, the first included; past it the run stops, naming the
            counts. 0 (verl: no limit): as many as the training rows hold, a row being rolled
            out at most once per iteration.
    """

    enable: bool = False
    metric: str | None = None
    max_num_gen_batches: NonNegativeInt = 0


@dataclass
class GiGPOConfig:
    """GiGPO's settings (``adv_estimator=gigpo``, :mod:`agentfly.estimators.gigpo`; verl-agent's
    ``algorithm.gigpo`` keys and defaults).

    Attributes:
        step_advantage_w: weight of the step-level advantage added to the episode-level one.
        mode: ``mean_norm`` subtracts the group's mean; ``mean_std_norm`` also divides by its std
            (episode and step groups alike).
        enable_similarity: turns whose anchor observations are similar (not only equal) share a
            step group.
        similarity_thresh: the ``difflib`` ratio at or above which two anchors are similar.
    """

    step_advantage_w: NonNegativeFloat = 1.0
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    enable_similarity: bool = False
    similarity_thresh: OpenUnitInterval = 0.95


@dataclass
class AlgorithmConfig:
    """The RL algorithm.

    Attributes:
        adv_estimator: registered advantage estimator (``gae``, ``grpo``, ``rloo``...).
        gamma: discount per sampled token.
        lam: GAE lambda.
        norm_adv_by_std_in_grpo: divide group-relative advantages by the group std.
        use_turn_rewards: put each turn's own reward (its tools' ``ToolResult.reward``, an
            environment's step reward, or the reward function's ``turn_rewards`` where it returns
            them, which then replace the tools') in the token rewards at the turn's last sampled
            token (:class:`agentfly.callbacks.TurnRewardCallback`).
        turn_reward_mode: how turn rewards meet the outcome reward (``use_turn_rewards``):
            ``decompose`` (the default) takes them as a split of the reward, the outcome token
            keeping the rest, so a chain's token rewards add up to its reward (counted once);
            ``add`` puts them beside the whole reward, the return then reward + turn rewards.
        gigpo: GiGPO's settings (``adv_estimator=gigpo``).
        use_kl_in_reward: subtract ``kl_coef * KL`` from the token rewards.
        kl_penalty: KL estimator in the reward (``kl``, ``abs``, ``mse``, ``low_var_kl``...).
        kl_ctrl: the KL coefficient controller.
        rollout_correction: the off-policy correction (off by default).
        failed_chains: a chain the infrastructure failed (engine error, tool past its deadline
            or its worker dead, reward failure; see :mod:`agentfly.rollout.failures`) never
            enters a baseline as reward 0: ``resample`` runs it again (same prompt and group,
            a new seed), ``drop`` leaves its whole group out of the batch (one rank only),
            ``keep`` trains on it as reward 0; counted as ``rollout/failed_chains/<reason>``.
        max_resamples: re-runs of a failed chain at most (``resample``) before its group is
            dropped.
        resample_budget_s: seconds past a rollout's first round (every chain's first run) within
            which a re-run must be expected to end, judged by the run it replaces (``resample``:
            a failed chain is re-run as soon as it fails, beside the others; one refused by the
            budget is counted failed like one past ``max_resamples``). None (the default): the
            longest deadline of the tool calls that timed out so far (each tool's ``timeout``),
            30 s while none has, so a rollout whose tool calls hang takes its healthy time and
            about two of the tool's deadlines. See :mod:`agentfly.rollout.resampling`.
        filter_groups: DAPO's dynamic sampling (off by default).
    """

    adv_estimator: str = "gae"
    gamma: ClosedUnitInterval = 1.0
    lam: ClosedUnitInterval = 1.0
    norm_adv_by_std_in_grpo: bool = True
    use_turn_rewards: bool = False
    turn_reward_mode: Literal["decompose", "add"] = "decompose"
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    use_kl_in_reward: bool = KLSettings.use_kl_in_reward
    kl_penalty: str = KLSettings.kl_penalty
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    failed_chains: Literal["resample", "drop", "keep"] = "resample"
    max_resamples: NonNegativeInt = 3
    resample_budget_s: NonNegativeFloat | None = None
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)


# ------------------------------------------------------------------------------- reward_model


@dataclass
class OverlongBufferConfig:
    """DAPO's overlong reward shaping (Yu et al. 2025; verl's keys and meanings,
    :mod:`agentfly.rollout.rewards.overlong`).

    Attributes:
        enable: add ``min(-(n - (response_length - len)) / len · penalty_factor, 0)`` to each
            chain's reward, n its tokens after the prompt (sampled and observation alike; a
            folded chain's last segment), ``response_length`` =
            ``actor_rollout_ref.rollout.response_length``: 0 up to ``response_length - len``
            tokens, ``-penalty_factor`` at the budget.
        len: the buffer, in tokens: 1..``response_length`` when enabled.
        penalty_factor: the penalty at the budget.
        log: add ``overlong_reward`` and ``overlong`` (whether it is below 0) to each chain's
            reward extras (``rollout/reward_extras/overlong_reward``, ``.../overlong``).
    """

    enable: bool = False
    len: NonNegativeInt = 0
    penalty_factor: NonNegativeFloat = 0.0
    log: bool = False


@dataclass
class RewardModelConfig:
    """verl's ``reward_model`` section; only its DAPO shaping is built (the reward itself is
    ``agent.init_config.reward_name``; no reward model is loaded).

    Attributes:
        overlong_buffer: DAPO's overlong penalty (off by default).
    """

    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
