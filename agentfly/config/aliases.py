"""Alternative spellings of config keys, and the one canonical node each reaches.

AgentFly's scripts spell the agent keys three ways (``agent.max_turns``,
``agent.run_config.max_turns``, ``agent.max_steps``); all reach one node. An alias maps a dotted
*prefix* to its canonical prefix, so ``agent.generation_config.max_tokens`` and a YAML section
``agent: {generation_config: {max_tokens: ...}}`` both land on
``agent.run_config.generation_config.max_tokens``. The longest matching prefix wins.

Canonical homes: run-time shape under ``agent.run_config``, construction under
``agent.init_config``, the backend at ``agent.init_config.backend`` (AgentFly's
``agent.init_config.backend_config.backend`` is an alias of it).

The model path and the training sampling settings have one key each, as the trainer reads
them; the agent-side spellings AgentFly's scripts use (``agent.init_config.model_name_or_path``,
``agent.generation_config.temperature``/``top_p``) are aliases of them.
"""

from __future__ import annotations

_INIT_KEYS = (
    "agent_type",
    "template",
    "tools",
    "reward_name",
    "backend",
    "tool_parser_name",
    "max_model_len",
    "system_prompt",
    "tool_config",
    "plugins",
)

#: alias prefix → canonical prefix.
ALIASES: dict[str, str] = {
    # run shape: agent.* and agent.run_config.* spellings
    "agent.max_turns": "agent.run_config.max_turns",
    "agent.max_steps": "agent.run_config.max_turns",
    "agent.run_config.max_steps": "agent.run_config.max_turns",
    "agent.num_chains": "agent.run_config.num_chains",
    "agent.max_concurrent_chains": "agent.run_config.max_concurrent_chains",
    "agent.generation_config": "agent.run_config.generation_config",
    "agent.max_tokens_per_turn": "agent.run_config.generation_config.max_tokens",
    "agent.run_config.max_tokens_per_turn": "agent.run_config.generation_config.max_tokens",
    "agent.context_config": "agent.run_config.context_config",
    "agent.resource_backend": "agent.run_config.context_config.resource_backend",
    "agent.run_config.resource_backend": "agent.run_config.context_config.resource_backend",
    # one key each for the model and the sampling settings the trainer reads
    "agent.model_name_or_path": "actor_rollout_ref.model.path",
    "agent.init_config.model_name_or_path": "actor_rollout_ref.model.path",
    "agent.run_config.generation_config.temperature": "actor_rollout_ref.rollout.temperature",
    "agent.run_config.generation_config.top_p": "actor_rollout_ref.rollout.top_p",
    # construction: agent.* and agent.init_args.* spellings of agent.init_config.*
    **{f"agent.{k}": f"agent.init_config.{k}" for k in _INIT_KEYS},
    "agent.init_args": "agent.init_config",
    "agent.backend_config.backend": "agent.init_config.backend",
    "agent.init_config.backend_config.backend": "agent.init_config.backend",
    # newer verl's spellings: rollout.n is the samples per prompt (two spellings with different
    # values are refused, agentfly.config.verl_args), rollout.prompt_length the prompt limit that
    # verl's rollout.yaml takes from data.max_prompt_length, critic.fsdp the critic's FSDP engine
    # config of AgentFly's verl (critic.model.fsdp_config in verl's older workers)
    "actor_rollout_ref.rollout.n": "agent.run_config.num_chains",
    "actor_rollout_ref.rollout.prompt_length": "data.max_prompt_length",
    "critic.fsdp": "critic.model.fsdp_config",
    # verl's FSDP spellings of the LoRA keys (its Megatron spellings are the canonical ones)
    "actor_rollout_ref.model.lora_rank": "actor_rollout_ref.model.lora.rank",
    "actor_rollout_ref.model.lora_alpha": "actor_rollout_ref.model.lora.alpha",
    "actor_rollout_ref.model.target_modules": "actor_rollout_ref.model.lora.target_modules",
    # Lightning Trainer arguments that agentfly's own keys express (--trainer.max_steps 100)
    "trainer.max_steps": "trainer.total_training_steps",  # RL iterations, not optimizer steps
    "trainer.max_epochs": "trainer.total_epochs",
    "trainer.devices": "trainer.n_gpus_per_node",
    "trainer.num_nodes": "trainer.nnodes",
    "trainer.accelerator": "trainer.device",
    "trainer.default_root_dir": "trainer.default_local_dir",
    "trainer.strategy": "actor_rollout_ref.actor.strategy",
    "seed_everything": "trainer.seed",
    # a file printed by `agentfly rollout --print_config` holds Lightning's arguments here
    "trainer.lightning": "trainer",
}

_BY_LENGTH = sorted(ALIASES, key=len, reverse=True)


def canonical_key(key: str, aliases: dict[str, str] | None = None) -> str:
    """The canonical spelling of a dotted key (itself when it is not an alias).

    ``aliases``: another command's alias table (``agentfly sft``'s); None: :data:`ALIASES`.

    >>> canonical_key("agent.max_steps")
    'agent.run_config.max_turns'
    >>> canonical_key("agent.generation_config.max_tokens")
    'agent.run_config.generation_config.max_tokens'
    """
    table = ALIASES if aliases is None else aliases
    by_length = _BY_LENGTH if aliases is None else sorted(table, key=len, reverse=True)
    # an alias may map into another alias's prefix (agent.init_args.backend_config.backend)
    for _ in range(4):
        for alias in by_length:
            if key == alias or key.startswith(alias + "."):
                key = table[alias] + key[len(alias) :]
                break
        else:
            return key
    return key

