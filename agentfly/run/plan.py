"""The one reader of the config: what every component of a run receives.

:func:`plan_run` turns a composed config (:func:`agentfly.cli.load_config`) and the machine
(:class:`~agentfly.run.topology.Hardware`) into plain keyword arguments for each component:
the LightningModule, the rollout DataModule, the engine pool and the agent loop, the callbacks,
the loggers and the Lightning ``Trainer``. :mod:`agentfly.run.fit` and :mod:`agentfly.rollout.runner`
build objects from these and read nothing else of the config; so what a key changes is visible
here, and ``tests/config/test_every_key.py`` checks key by key that changing a value changes what
some component receives (or that the value is refused, or named as having no effect).

Nothing here imports torch, Ray or Lightning, or touches a model: a plan is cheap to make.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentfly.config.keys import plain
from agentfly.config.schema_actor_critic import PREFIX_CACHING_ENGINES
from agentfly.core.errors import ConfigError
from agentfly.models.paths import check_context, check_model_paths
from agentfly.rollout.rollout_plan import RolloutPlan
from agentfly.run.job import JobPlan, job_fields, plan_trainer
from agentfly.run.module_plan import plan_module
from agentfly.run.topology import Hardware, Topology, check_batches, resolve_topology


@dataclass(kw_only=True)
class RunPlan(JobPlan):
    """Everything a training (or validation) run builds: :class:`~agentfly.run.job.JobPlan`'s
    fields (``module``: :class:`~agentfly.modules.rl_module.AgentRLModule`'s settings groups,
    :func:`agentfly.run.module_plan.plan_module`; ``datamodule``:
    :class:`~agentfly.rollout.datamodule.RolloutDataModule`'s keyword arguments, the session
    factory aside; ``rollout``: the engines, agent and loop), and the engine's name.

    Attributes:
        engine_name: ``actor_rollout_ref.rollout.name`` as given (checks and messages).
    """

    engine_name: str = ""
    stage: str = "fit"


def train_rows(cfg: Any) -> int:
    """Rows of the training files (read and checked row by row; prompt lengths aside)."""
    from agentfly.rollout.data import load_rows

    return sum(len(load_rows(f, cfg.data.prompt_key)) for f in cfg.data.train_files)


def check_rows(cfg: Any, rows: int) -> None:
    """An iteration's prompts come from the training rows: the batch cannot be larger.

    Raises:
        ConfigError: naming both numbers (no training files: nothing to check).
    """
    batch = int(cfg.data.train_batch_size)
    if cfg.data.train_files and batch > rows:
        raise ConfigError(
            f"data.train_batch_size={batch} is larger than the {rows} training rows of "
            f"data.train_files; lower it to at most {rows}"
        )


def check_failed_chains(cfg: Any, world_size: int) -> None:
    """``algorithm.failed_chains=drop`` needs one rank: a dropped group shrinks that rank's batch,
    and ranks with different numbers of micro-batches would wait on each other's collectives
    (DDP's gradient all-reduce, FSDP's all-gathers) forever.

    Raises:
        ConfigError: naming the key, the ranks and what to use instead.
    """
    if cfg.algorithm.failed_chains == "drop" and world_size > 1:
        raise ConfigError(
            f"algorithm.failed_chains=drop cannot run on {world_size} ranks: a dropped group "
            f"would leave the ranks with batches of different sizes, and the update's "
            f"collectives would wait forever; use algorithm.failed_chains=resample (a group "
            f"it cannot complete stops the run) or keep"
        )


def check_filter_groups(cfg: Any, rows: int) -> None:
    """Dynamic sampling rolls out a row at most once per iteration: ``max_num_gen_batches``
    generation batches of ``data.train_batch_size`` prompts must fit in the training rows.

    Raises:
        ConfigError: naming the key, the rows and the most they allow.
    """
    groups, batch = cfg.algorithm.filter_groups, int(cfg.data.train_batch_size)
    if groups.enable and cfg.data.train_files and groups.max_num_gen_batches * batch > rows:
        raise ConfigError(
            f"algorithm.filter_groups.max_num_gen_batches={groups.max_num_gen_batches} asks for "
            f"more generation batches of data.train_batch_size={batch} prompts than the {rows} "
            f"training rows hold (a row is rolled out at most once per iteration); lower it to "
            f"at most {rows // batch}, or 0 (as many as the rows hold)"
        )


def check_folding(cfg: Any, world_size: int) -> None:
    """A tool that folds the chain's history (``summarize``) needs one rank: a folded chain
    trains as several rows (:mod:`agentfly.rollout.folding`), so ranks would take different
    numbers of mini-batches and their collectives would wait on each other forever.

    Raises:
        ConfigError: naming the tools and the ranks.
    """
    from agentfly.rollout.tools import TOOLS

    names = [str(n) for n in cfg.agent.init_config.tools or []]
    folding = [n for n in names if n in TOOLS and TOOLS.get(n).folds_context]
    harness = any(OmegaConf.select(cfg, f"agent.harness.{k}") is not None for k in ("command", "function"))
    if harness and world_size > 1:  # a program that rewrites its history trains as segments too
        raise ConfigError(
            f"agent.harness cannot run on {world_size} ranks yet: a harness program that rewrites "
            "its history trains as one row per segment, so the ranks' batches could differ in "
            "size and the update's collectives would wait forever; train on one rank"
        )
    if folding and world_size > 1:
        raise ConfigError(
            f"agent.init_config.tools {folding} fold the chain's history, which cannot run on "
            f"{world_size} ranks yet: a folded chain trains as one row per segment, so the "
            "ranks' batches would differ in size and the update's collectives would wait "
            "forever; train on one rank or drop the folding tool"
        )


def check_vision(cfg: Any, needs_critic: bool) -> None:
    """What a vision-language actor (:func:`agentfly.models.loading.is_vision_model`) cannot run
    with yet: a critic (no value head reads images), padding-free packing (image rows run
    whole, with the model's multimodal positions) and an engine whose class does not take
    images (``takes_images``: vLLM is handed token ids only, the images would not reach it).

    Raises:
        ConfigError: naming each key and what to set instead.
    """
    from agentfly.models.loading import is_vision_model

    model = cfg.actor_rollout_ref.model
    path = Path(str(model.path)).expanduser()
    if not (path / "config.json").is_file() or not is_vision_model(path, bool(model.get("trust_remote_code", False))):
        return
    errors = []
    if needs_critic:
        errors.append(f"algorithm.adv_estimator={cfg.algorithm.adv_estimator!r} needs a critic, which "
                      "is not built for vision-language models; use grpo, rloo, reinforce_plus_plus, "
                      "remax, opo or gigpo")
    for key in ("actor_rollout_ref.model.use_remove_padding",):
        if OmegaConf.select(cfg, key):
            errors.append(f"{key}=true: padding-free packing of rows holding images is not built "
                          "(they run whole, with the model's multimodal positions); set it false")
    import agentfly.rollout.engines.builtin  # noqa: F401  (registers the engines; no torch)
    from agentfly.rollout.engines.base import ENGINES

    if not getattr(ENGINES.get(str(cfg.actor_rollout_ref.rollout.name)), "takes_images", False):
        errors.append(f"actor_rollout_ref.rollout.name={cfg.actor_rollout_ref.rollout.name!r} "
                      "does not take images yet; use transformers")
    if errors:
        raise ConfigError(f"{path} is a vision-language model: " + "; ".join(errors))


def total_iterations(cfg: Any, rows: int) -> int:
    """RL iterations: ``trainer.total_training_steps``, else ``total_epochs`` passes over ``rows``."""
    if cfg.trainer.total_training_steps:
        return int(cfg.trainer.total_training_steps)
    return max(1, rows // cfg.data.train_batch_size) * int(cfg.trainer.total_epochs)


def plan_datamodule(
    cfg: Any, topology: Topology, run_dir: Path, estimator: Any, iterations: int, hw: Hardware
) -> dict[str, Any]:
    """The rollout DataModule's keyword arguments; ``estimator``: the registered
    ``algorithm.adv_estimator``."""
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    train_temperature = cfg.actor_rollout_ref.rollout.temperature
    groups = cfg.algorithm.filter_groups
    return dict(
        train_files=[str(f) for f in cfg.data.train_files],
        val_files=[str(f) for f in cfg.data.val_files],
        train_batch_size=int(cfg.data.train_batch_size),
        val_batch_size=cfg.data.val_batch_size,
        prompt_key=cfg.data.prompt_key,
        max_prompt_length=cfg.data.max_prompt_length,
        filter_overlong_prompts=bool(cfg.data.filter_overlong_prompts),
        truncation=str(cfg.data.truncation),
        shuffle=bool(cfg.data.shuffle),
        seed=int(cfg.data.seed),
        # do_sample with temperature 0 samples at the training temperature
        val_temperature=float(val.temperature or train_temperature) if val.do_sample else None,
        val_top_p=float(val.top_p),
        val_top_k=int(val.top_k),
        val_n=int(val.n),
        val_also_greedy=bool(val.also_greedy),
        # what the estimator declares it needs from the rollout: a greedy chain per prompt
        greedy_baselines=estimator.needs_baselines,
        trajectory_dir=str(run_dir / "trajectories"),
        rollout_mode=str(cfg.trainer.rollout_mode),
        max_staleness=int(cfg.trainer.max_staleness),
        max_iterations=iterations,
        producer_threads=_engine_threads(cfg, topology, hw) if topology.num_engines == 0 else None,
        idle_threads=_idle_threads(cfg, topology, hw),
        failed_chains=str(cfg.algorithm.failed_chains),
        max_resamples=int(cfg.algorithm.max_resamples),
        resample_budget_s=(
            None if cfg.algorithm.resample_budget_s is None else float(cfg.algorithm.resample_budget_s)
        ),
        filter_groups_metric=str(groups.metric) if groups.enable else None,
        max_num_gen_batches=int(groups.max_num_gen_batches),
        # the estimator's anchor states, grouped by similarity (GiGPO's enable_similarity)
        anchor_similarity=(
            float(cfg.algorithm.gigpo.similarity_thresh)
            if estimator.needs_turns and cfg.algorithm.gigpo.enable_similarity else None
        ),
    )



def _engine_threads(cfg: Any, topology: Topology, hw: Hardware) -> int | None:
    """Torch threads of each CPU engine when generation overlaps the update (``rollout_mode``
    other than ``sync``): the engines share half the cores, the trainer keeps the rest. None:
    the engines' default (sync mode, where the two take turns, or engines on GPUs)."""
    if str(cfg.trainer.rollout_mode) == "sync" or topology.cuda_engines:
        return None
    return max(1, hw.cpus // 2 // max(1, topology.num_engines))


def _trainer_threads(cfg: Any, topology: Topology, hw: Hardware) -> int | None:
    """``trainer.num_threads``, or when generation overlaps the update on CPU engines, the cores
    the engines do not get (:func:`_engine_threads`)."""
    if cfg.trainer.num_threads is not None:
        return int(cfg.trainer.num_threads)
    if _engine_threads(cfg, topology, hw) is None:
        return None
    return max(1, hw.cpus - hw.cpus // 2)


def _idle_threads(cfg: Any, topology: Topology, hw: Hardware) -> int | None:
    """The training thread's torch threads while the in-process engine's producer is idle: every
    core, where the split of :func:`_engine_threads` is the plan's own (``trainer.num_threads``
    unset). None: no switch (sync, engines in Ray actors or on GPUs, or threads set by hand)."""
    if topology.num_engines != 0 or cfg.trainer.num_threads is not None:
        return None
    return None if _engine_threads(cfg, topology, hw) is None else hw.cpus


def _engine_kwargs(cfg: Any, topology: Topology) -> dict[str, Any]:
    """What each engine is built with: the model, its dtype and seed, and the engine's own
    settings (prefix caching and its budget, vLLM's memory share, tensor parallelism, eager
    mode, LoRA rank)."""
    init = cfg.agent.init_config
    rollout, model = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model
    engine_kwargs: dict[str, Any] = {
        "model": str(model.path),
        "dtype": str(rollout.dtype) if topology.cuda_engines else "float32",
        "seed": int(cfg.trainer.seed),
    }
    if model.trust_remote_code:
        engine_kwargs["trust_remote_code"] = True
    if not topology.cuda_engines and rollout.name == "transformers":
        engine_kwargs["device"] = "cpu"
    if init.max_model_len:
        engine_kwargs["max_model_len"] = int(init.max_model_len)
    if rollout.name in PREFIX_CACHING_ENGINES:
        engine_kwargs["enable_prefix_caching"] = bool(rollout.enable_prefix_caching)
    if rollout.name == "transformers":  # vLLM's prefix cache lives in its gpu_memory_utilization
        engine_kwargs["prefix_cache_max_gib"] = float(rollout.prefix_cache_max_gib)
    if rollout.name in ("transformers", "vllm") and rollout.enforce_eager is not None:
        engine_kwargs["enforce_eager"] = bool(rollout.enforce_eager)
    if rollout.name == "vllm":
        engine_kwargs["gpu_memory_utilization"] = float(rollout.gpu_memory_utilization)
        engine_kwargs["tensor_parallel_size"] = topology.tensor_parallel
        if sends_adapter(cfg):  # vLLM builds its LoRA layers when it starts
            engine_kwargs["max_lora_rank"] = int(model.lora.rank)
    return engine_kwargs


def _overlong_buffer(cfg: Any) -> dict[str, Any] | None:
    """DAPO's overlong penalty's settings (``reward_model.overlong_buffer``); None when off."""
    buffer = cfg.reward_model.overlong_buffer
    if not buffer.enable:
        return None
    return dict(len=int(buffer.len), penalty_factor=float(buffer.penalty_factor), log=bool(buffer.log))


def _loop_settings(cfg: Any, training: bool) -> dict[str, Any]:
    """The agent loop's keyword arguments: turns, chains, lengths and sampling, and for
    training what becomes of a failed chain (for the warning of a failed reward)."""
    from agentfly.rollout.failures import describe_policy

    init, run = cfg.agent.init_config, cfg.agent.run_config
    rollout = cfg.actor_rollout_ref.rollout
    loop = dict(
        max_turns=int(run.max_turns),
        num_chains=int(run.num_chains),
        max_concurrent_chains=run.max_concurrent_chains,
        max_tokens=int(run.generation_config.max_tokens),
        max_model_len=int(init.max_model_len) if init.max_model_len else None,
        max_response_len=int(rollout.response_length),
        overlong_buffer=_overlong_buffer(cfg),
        temperature=float(rollout.temperature),
        top_p=float(rollout.top_p),
        top_k=int(rollout.top_k),
        train_on_last_turn=bool(cfg.agent.train_on_last_turn),
        seed=int(cfg.trainer.seed),
        tool_breaker=dict(
            first_calls=int(run.tool_breaker.first_calls),
            window=int(run.tool_breaker.window),
            failure_rate=float(run.tool_breaker.failure_rate),
        ),
    )
    if training:
        alg = cfg.algorithm
        loop["failed_chain_consequence"] = describe_policy(
            str(alg.failed_chains), int(alg.max_resamples)
        )
    return loop


def plan_rollout(
    cfg: Any, topology: Topology, hw: Hardware | None = None, *, training: bool = False
) -> RolloutPlan:
    """The engines, the agent and the agent loop's settings; ``training``: for ``fit``, whose
    failed chains are re-run or dropped (``algorithm.failed_chains``), which the warning of a
    failed reward says."""
    from agentfly.core.plugins import is_object_spec, portable

    init, run = cfg.agent.init_config, cfg.agent.run_config
    rollout, model = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model
    if not model.path:
        raise ConfigError("actor_rollout_ref.model.path (or agent.init_config.model_name_or_path) is not set")
    check_model_paths(cfg, needs_critic=False)  # `agentfly rollout` plans only this part
    check_context(cfg)
    engine_kwargs = _engine_kwargs(cfg, topology)
    loop = _loop_settings(cfg, training)
    name = str(rollout.name)
    pool_kwargs: dict[str, Any] = {
        "num_gpus_per_engine": topology.gpus_per_engine,
        "weight_bucket_mb": int(rollout.checkpoint_engine.update_weights_bucket_megabytes),
    }
    threads = _engine_threads(cfg, topology, hw) if hw is not None and topology.num_engines else None
    if threads:
        pool_kwargs["num_threads"] = threads
    return RolloutPlan(
        engine=portable(name) if is_object_spec(name) else name,
        num_engines=topology.num_engines,
        engine_kwargs=engine_kwargs,
        pool_kwargs=pool_kwargs,
        agent_type=str(init.agent_type),
        tool_parser=init.tool_parser_name,
        system_prompt=init.system_prompt,
        tools=[str(t) for t in init.tools],
        tool_config=plain(init.tool_config) or {},
        reward=init.reward_name,
        reward_config=plain(init.reward_config) or {},
        template=init.template,
        resource_backend=str(run.context_config.resource_backend),
        plugins=[portable(str(p)) for p in init.plugins],
        loop=loop,
        workers=dict(
            num_workers=run.workers.num_workers,
            memory_mb=int(run.workers.memory_mb),
            start_timeout=float(run.workers.start_timeout),
            queue_timeout=float(run.workers.queue_timeout),
            lend_after=float(run.workers.lend_after),
            max_lent=int(run.workers.max_lent),
            memory_budget_mb=run.workers.memory_budget_mb,
        ),
        chains_in_flight=int(
            run.max_concurrent_chains or int(cfg.data.train_batch_size) * int(run.num_chains)
        ),
        reward_timeout=float(init.reward_timeout) if init.reward_timeout is not None else None,
        harness=_harness(cfg),
    )


def _harness(cfg: Any) -> dict[str, Any] | None:
    """``agent.harness`` as :class:`~agentfly.rollout.harness.Harness`' arguments (None: the
    built-in loop); a function's file path made absolute."""
    from agentfly.core.plugins import portable

    h = cfg.agent.harness
    if h.command is None and h.function is None:
        return None
    return dict(command=h.command, function=portable(str(h.function)) if h.function else None,
                timeout=float(h.timeout), request_timeout=float(h.request_timeout),
                sandbox=bool(h.sandbox), failures=str(h.failures))


def sends_adapter(cfg: Any) -> bool:
    """A LoRA actor's engines receive its adapter (not its merged weights): ``lora.merge`` is off
    and the engine serves adapters (its class's ``serves_adapters``)."""
    import agentfly.rollout.engines.builtin  # noqa: F401  (registers the engines; no torch)
    from agentfly.rollout.engines.base import ENGINES

    lora = cfg.actor_rollout_ref.model.lora
    if not lora.rank or lora.merge:
        return False
    return bool(getattr(ENGINES.get(str(cfg.actor_rollout_ref.rollout.name)), "serves_adapters", False))


def plan_callbacks(cfg: Any, run_dir: Path, iterations: int) -> list[tuple[str, dict[str, Any]]]:
    """agentfly's own callbacks: advantages, weight sync, iterations, turn rewards and KL in the
    reward, display."""
    alg = cfg.algorithm
    out: list[tuple[str, dict[str, Any]]] = [
        ("AdvantageCallback", dict(
            adv_estimator=str(alg.adv_estimator), gamma=float(alg.gamma), lam=float(alg.lam),
            norm_adv_by_std_in_grpo=bool(alg.norm_adv_by_std_in_grpo),
            step_advantage_w=float(alg.gigpo.step_advantage_w), gigpo_mode=str(alg.gigpo.mode),
        )),
        ("WeightSyncCallback", {"send_adapter": sends_adapter(cfg)}),
        ("IterationScheduleCallback", dict(
            total_iterations=iterations, checkpoint_dir=str(run_dir / "checkpoints"),
            save_freq=int(cfg.trainer.save_freq or -1), hf_dir=str(run_dir / "hf_actor"),
            hf_export=str(cfg.actor_rollout_ref.model.lora.export),
        )),
        ("InterruptCheckpoint", {"resume_mode": str(cfg.trainer.resume_mode)}),
    ]
    if alg.use_turn_rewards:
        out.append(("TurnRewardCallback", {"mode": str(alg.turn_reward_mode)}))
    if alg.use_kl_in_reward:
        k = alg.kl_ctrl
        out.append(("KLRewardCallback", dict(
            kl_penalty=str(alg.kl_penalty), kl_ctrl_type=str(k.type), kl_coef=float(k.kl_coef),
            target_kl=float(k.target_kl), horizon=int(k.horizon),
        )))
    names = [n for n in plain(cfg.trainer.logger) or [] if isinstance(n, str)]
    if "wandb" in names:
        out.append(("ValTrajectoryTable", {}))
    if "console" in names:
        out.append(("IterationProgressBar", {"total_iterations": iterations}))
    return out


def plan_run(cfg: Any, hardware: Hardware | None = None) -> RunPlan:
    """Everything a run of ``cfg`` builds on ``hardware`` (detected when None).

    Raises:
        ConfigError: a model path that cannot be loaded (:mod:`agentfly.models.paths`),
            the machine cannot run what ``cfg`` asks (see
            :func:`~agentfly.run.topology.resolve_topology`), the batch sizes do not
            split over the ranks that will run or exceed the training rows, or
            ``algorithm.failed_chains=drop`` or a folding tool with several ranks, or more
            generation batches of dynamic sampling than the training rows hold.
    """
    from agentfly.estimators import get_estimator

    hw = hardware or Hardware.detect()
    topology = resolve_topology(cfg, hw)
    estimator = get_estimator(cfg.algorithm.adv_estimator)  # resolved once, here
    needs_critic = estimator.needs_critic
    check_model_paths(cfg, needs_critic)
    check_vision(cfg, needs_critic)
    check_batches(cfg, topology.world_size, needs_critic)
    check_failed_chains(cfg, topology.world_size)
    check_folding(cfg, topology.world_size)
    rows = train_rows(cfg)
    check_rows(cfg, rows)
    check_filter_groups(cfg, rows)
    run_dir = Path(str(cfg.trainer.default_local_dir))
    iterations = total_iterations(cfg, rows)
    shared = job_fields(cfg, topology)
    if topology.cpu_fallback:
        shared["notes"] += _cpu_notes(cfg)
    return RunPlan(
        **shared,
        topology=topology,
        iterations=iterations,
        module=plan_module(cfg, topology, iterations, estimator),
        datamodule=plan_datamodule(cfg, topology, run_dir, estimator, iterations, hw),
        rollout=plan_rollout(cfg, topology, hw, training=True),
        callbacks=plan_callbacks(cfg, run_dir, iterations),
        trainer=plan_trainer(cfg, topology, needs_critic),
        num_threads=_trainer_threads(cfg, topology, hw),
        engine_name=str(cfg.actor_rollout_ref.rollout.name),
    )


def _cpu_notes(cfg: Any) -> list[str]:
    """GPU-only settings the CPU fallback cannot use, named once."""
    from agentfly.run.topology import offload_keys

    offloads = offload_keys(cfg)
    if not offloads:
        return []
    return [f"no GPU: nothing to offload to the CPU ({', '.join(offloads)} have no effect)"]
