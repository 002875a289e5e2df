"""A setting is a promise: every key of the schema, one by one, changes what a component of the run
receives (the run's plan, :func:`agentfly.run.plan.plan_run`: the module's, data module's, engines',
agent loop's, callbacks', loggers' and Trainer's arguments), or is refused at compose time with the
reason. A key set where another setting turns it off is named in a warning
(:mod:`agentfly.config.inactive`), never dropped in silence.

Each case sets one key to a new valid value, in a context where it is in use, and compares plans.
A key added to the schema without a case here fails ``test_every_key_has_a_case``.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest

from agentfly.cli import load_config
from agentfly.config import ConfigError, canonical_key
from agentfly.config.inactive import RULES
from agentfly.config.keys import verl_key_table
from agentfly.run.plan import plan_run
from agentfly.run.topology import Hardware
from tests.config.plans import base, compose, write_plan_data

TWO_GPUS = Hardware(gpus=2, cpus=8)

FSDP = ["actor_rollout_ref.actor.strategy=fsdp"]
VLLM = ["actor_rollout_ref.rollout.name=vllm"]
COSINE = ["actor_rollout_ref.actor.optim.warmup_style=cosine"]
CRITIC_COSINE = ["critic.optim.warmup_style=cosine"]
NO_STEPS = ["trainer.total_training_steps=null"]
DR_GRPO_LOSS = ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"]
GRPO = ["algorithm.adv_estimator=grpo"]
RATIO = ["actor_rollout_ref.actor.optim.lr_warmup_steps=-1"]
RC = "algorithm.rollout_correction."
BYPASS = [RC + "bypass_mode=true"]
CRITIC_RATIO = ["critic.optim.lr_warmup_steps=-1"]
LORA = ["actor_rollout_ref.model.lora.rank=8"]
OB = "reward_model.overlong_buffer."
OVERLONG = [OB + "enable=true", OB + "len=64", OB + "penalty_factor=1.0"]
GIGPO = ["algorithm.adv_estimator=gigpo"]
FILTER = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
PL = "actor_rollout_ref.actor.policy_loss."
ONE_RANK = ["trainer.n_gpus_per_node=1"]  # a harness runs on one rank
HARNESS = ["agent.init_config.tools=[]", "agent.harness.command=./agent", *ONE_RANK]


def loss(mode: str) -> list[str]:
    return [PL + "loss_mode=" + mode]

AD = "actor_rollout_ref.actor.use_dynamic_bsz=true"
# key -> (new value, context overrides). Values are Hydra words, as on the command line.
CHANGES: dict[str, tuple[str, list[str]]] = {
    "actor_rollout_ref.model.use_remove_padding": ("true", []),
    "critic.model.use_remove_padding": ("true", []),
    "actor_rollout_ref.model.override_config.attn_implementation": ("eager", []),
    "actor_rollout_ref.model.use_fused_kernels": ("true", []),
    "critic.model.override_config.attn_implementation": ("eager", []),
    "actor_rollout_ref.actor.use_dynamic_bsz": ("true", []),
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": ("4096", [AD]),
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": ("true", []),
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": ("4096", [AD]),
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": ("true", []),
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": ("4096", [AD]),
    "critic.use_dynamic_bsz": ("true", []),
    "critic.ppo_max_token_len_per_gpu": ("4096", [AD]),
    "critic.forward_max_token_len_per_gpu": ("4096", [AD]),
    "data.train_files": ("[{data}/other.json]", []),
    "data.val_files": ("[{data}/other.json]", []),
    "data.train_batch_size": ("16", ["actor_rollout_ref.actor.ppo_mini_batch_size=32", "critic.ppo_mini_batch_size=32"]),
    "data.val_batch_size": ("4", []),
    "data.prompt_key": ("problem", []),
    "data.shuffle": ("false", []),
    "data.seed": ("7", []),
    "data.max_prompt_length": ("100", []),
    "data.filter_overlong_prompts": ("false", []),
    "data.truncation": ("left", ["data.filter_overlong_prompts=false"]),
    "agent.train_on_last_turn": ("true", []),
    "agent.harness.command": ("./agent", ["agent.init_config.tools=[]", *ONE_RANK]),
    "agent.harness.function": ("tests.rollout.harness_programs:by_mode", ["agent.init_config.tools=[]", *ONE_RANK]),
    "agent.harness.timeout": ("7", HARNESS),
    "agent.harness.request_timeout": ("7", HARNESS),
    "agent.harness.sandbox": ("true", HARNESS),
    "agent.harness.failures": ("model", HARNESS),
    "agent.init_config.agent_type": ("react", []),
    "agent.init_config.template": ("qwen2.5", []),
    "agent.init_config.tools": ("[calculator,answer]", []),
    "agent.init_config.reward_name": ("math_equal_reward", []),
    "agent.init_config.tool_parser_name": ("react", []),
    "agent.init_config.max_model_len": ("1024", []),
    "agent.init_config.system_prompt": ("Be brief.", []),
    "agent.init_config.tool_config": ("{calculator: {timeout: 3}}", []),
    "agent.init_config.plugins": ("[{data}/plugin.py]", []),
    "agent.init_config.reward_timeout": ("5", []),
    "agent.init_config.reward_config": (
        "{llm_as_judge_math_reward: {base_url: 'http://127.0.0.1:8000/v1', model: other}}",
        [
            "agent.init_config.reward_name=llm_as_judge_math_reward",
            "agent.init_config.reward_config.llm_as_judge_math_reward.base_url=http://127.0.0.1:8000/v1",
            "agent.init_config.reward_config.llm_as_judge_math_reward.model=judge",
        ],
    ),
    "agent.run_config.workers.num_workers": ("3", []),
    "agent.run_config.workers.memory_mb": ("1024", []),
    "agent.run_config.workers.start_timeout": ("10", []),
    "agent.run_config.workers.queue_timeout": ("30", []),
    "agent.run_config.workers.lend_after": ("0.5", []),
    "agent.run_config.workers.max_lent": ("8", []),
    "agent.run_config.workers.memory_budget_mb": ("8192", []),
    "agent.run_config.tool_breaker.first_calls": ("3", []),
    "agent.run_config.tool_breaker.window": ("20", []),
    "agent.run_config.tool_breaker.failure_rate": ("0.5", []),
    "agent.run_config.max_turns": ("5", []),
    "agent.run_config.num_chains": ("2", []),
    "agent.run_config.max_concurrent_chains": ("4", []),
    "agent.run_config.generation_config.max_tokens": ("64", []),
    "agent.run_config.context_config.resource_backend": ("ray", []),
    "algorithm.adv_estimator": ("grpo", []),
    "algorithm.gamma": ("0.9", []),
    "algorithm.lam": ("0.9", []),
    "algorithm.norm_adv_by_std_in_grpo": ("false", GRPO),
    "algorithm.use_turn_rewards": ("true", []),
    "algorithm.turn_reward_mode": ("add", ["algorithm.use_turn_rewards=true"]),
    "algorithm.gigpo.step_advantage_w": ("0.5", GIGPO),
    "algorithm.gigpo.mode": ("mean_std_norm", GIGPO),
    "algorithm.gigpo.enable_similarity": ("true", GIGPO),
    "algorithm.gigpo.similarity_thresh": ("0.8", [*GIGPO, "algorithm.gigpo.enable_similarity=true"]),
    "algorithm.use_kl_in_reward": ("false", []),
    "algorithm.kl_penalty": ("low_var_kl", []),
    "algorithm.kl_ctrl.type": ("adaptive", []),
    "algorithm.kl_ctrl.kl_coef": ("0.01", []),
    "algorithm.kl_ctrl.target_kl": ("0.5", []),
    "algorithm.kl_ctrl.horizon": ("100", []),
    RC + "rollout_is": ("token", []),
    RC + "rollout_is_threshold": ("5.0", [RC + "rollout_is=sequence"]),
    RC + "rollout_rs": ("sequence", []),
    RC + "rollout_rs_threshold": ("5.0", [RC + "rollout_rs=token"]),
    RC + "bypass_mode": ("true", []),
    RC + "loss_type": ("reinforce", loss("bypass_mode")),
    "algorithm.failed_chains": ("keep", []),
    "algorithm.max_resamples": ("5", []),
    "algorithm.resample_budget_s": ("5.0", []),
    "algorithm.filter_groups.enable": ("true", ["algorithm.filter_groups.metric=acc"]),
    "algorithm.filter_groups.metric": ("score", FILTER),
    "algorithm.filter_groups.max_num_gen_batches": ("3", FILTER),
    "actor_rollout_ref.actor.strategy": ("fsdp", []),
    "actor_rollout_ref.actor.ppo_mini_batch_size": ("8", []),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": ("2", []),
    "actor_rollout_ref.actor.ppo_epochs": ("2", []),
    "actor_rollout_ref.actor.shuffle": ("true", []),
    "actor_rollout_ref.actor.clip_ratio": ("0.3", []),
    "actor_rollout_ref.actor.clip_ratio_low": ("0.1", []),
    "actor_rollout_ref.actor.clip_ratio_high": ("0.28", []),
    "actor_rollout_ref.actor.clip_ratio_c": ("5.0", []),
    "actor_rollout_ref.actor.loss_agg_mode": ("seq-mean-token-mean", []),
    "actor_rollout_ref.actor.loss_scale_factor": ("1024", DR_GRPO_LOSS),
    "actor_rollout_ref.actor.grad_clip": ("0.5", []),
    "actor_rollout_ref.actor.use_kl_loss": ("false", []),
    "actor_rollout_ref.actor.kl_loss_coef": ("0.1", []),
    "actor_rollout_ref.actor.kl_loss_type": ("mse", []),
    "actor_rollout_ref.actor.entropy_coeff": ("0.0", []),
    "actor_rollout_ref.actor.policy_loss.loss_mode": ("{data}/plugin.py:halved", []),
    PL + "clip_cov_ratio": ("0.001", loss("clip_cov")),
    PL + "clip_cov_lb": ("0.5", loss("clip_cov")),
    PL + "clip_cov_ub": ("10.0", loss("clip_cov")),
    PL + "kl_cov_ratio": ("0.001", loss("kl_cov")),
    PL + "ppo_kl_coef": ("1.0", loss("kl_cov")),
    PL + "dro_beta": ("0.5", [*loss("dro"), PL + "dro_beta=0.1"]),
    "actor_rollout_ref.actor.tau_pos": ("2.0", loss("sapo")),
    "actor_rollout_ref.actor.tau_neg": ("2.0", loss("sapo")),
    "actor_rollout_ref.actor.optim.lr": ("1e-5", []),
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": ("0.5", RATIO),
    "actor_rollout_ref.actor.optim.lr_warmup_steps": ("3", []),
    "actor_rollout_ref.actor.optim.weight_decay": ("0.1", []),
    "actor_rollout_ref.actor.optim.betas": ("[0.9,0.95]", []),
    "actor_rollout_ref.actor.optim.warmup_style": ("cosine", []),
    "actor_rollout_ref.actor.optim.min_lr_ratio": ("0.1", COSINE),
    "actor_rollout_ref.actor.optim.num_cycles": ("1.0", COSINE),
    "actor_rollout_ref.actor.fsdp_config.reshard_after_forward": ("false", FSDP),
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": ("1", FSDP),
    "actor_rollout_ref.actor.fsdp_config.model_dtype": ("bf16", []),  # under every strategy
    "actor_rollout_ref.model.path": ("{data}/models/other", []),
    "actor_rollout_ref.model.enable_gradient_checkpointing": ("true", []),
    "actor_rollout_ref.model.enable_activation_offload": ("true", []),
    "actor_rollout_ref.model.trust_remote_code": ("true", []),
    "actor_rollout_ref.model.lora.rank": ("8", []),
    "actor_rollout_ref.model.lora.alpha": ("32", LORA),
    "actor_rollout_ref.model.lora.target_modules": ("[q_proj,v_proj]", LORA),
    "actor_rollout_ref.model.lora.merge": ("true", LORA),  # the weight sync sends merged weights
    "actor_rollout_ref.model.lora.export": ("adapter", LORA),  # what hf_actor/ holds
    "actor_rollout_ref.rollout.name": ("vllm", []),
    "actor_rollout_ref.rollout.temperature": ("0.7", []),
    "actor_rollout_ref.rollout.top_p": ("0.9", []),
    "actor_rollout_ref.rollout.top_k": ("20", []),
    "actor_rollout_ref.rollout.response_length": ("1024", []),
    "actor_rollout_ref.rollout.gpu_memory_utilization": ("0.8", VLLM),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": ("2", VLLM),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": ("2", []),
    "actor_rollout_ref.rollout.num_engines": ("1", []),
    "actor_rollout_ref.rollout.dtype": ("float16", []),
    "actor_rollout_ref.rollout.enforce_eager": ("true", VLLM),
    "actor_rollout_ref.rollout.enable_prefix_caching": ("false", []),
    "actor_rollout_ref.rollout.prefix_cache_max_gib": ("0.5", []),
    "actor_rollout_ref.rollout.val_kwargs.temperature": ("0.5", []),
    "actor_rollout_ref.rollout.val_kwargs.top_p": ("0.5", []),
    "actor_rollout_ref.rollout.val_kwargs.top_k": ("5", []),
    "actor_rollout_ref.rollout.val_kwargs.do_sample": ("false", []),
    "actor_rollout_ref.rollout.val_kwargs.n": ("3", []),
    "actor_rollout_ref.rollout.val_kwargs.also_greedy": ("true", []),
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": ("512", []),
    "actor_rollout_ref.ref.fsdp_config.param_offload": ("true", FSDP),
    "actor_rollout_ref.ref.fsdp_config.model_dtype": ("bf16", []),
    "actor_rollout_ref.ref.fsdp_config.reshard_after_forward": ("false", FSDP),
    "actor_rollout_ref.ref.fsdp_config.fsdp_size": ("1", FSDP),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": ("2", []),
    "critic.model.path": ("{data}/models/other", []),
    "critic.model.enable_gradient_checkpointing": ("false", []),
    "critic.model.enable_activation_offload": ("true", []),
    "critic.model.fsdp_config.reshard_after_forward": ("false", FSDP),
    "critic.model.fsdp_config.fsdp_size": ("1", FSDP),
    "critic.model.fsdp_config.model_dtype": ("bf16", []),
    "critic.optim.lr": ("1e-4", []),
    "critic.optim.lr_warmup_steps_ratio": ("0.5", CRITIC_RATIO),
    "critic.optim.lr_warmup_steps": ("3", []),
    "critic.optim.weight_decay": ("0.1", []),
    "critic.optim.betas": ("[0.9,0.95]", []),
    "critic.optim.warmup_style": ("cosine", []),
    "critic.optim.min_lr_ratio": ("0.1", CRITIC_COSINE),
    "critic.optim.num_cycles": ("1.0", CRITIC_COSINE),
    "critic.ppo_mini_batch_size": ("8", []),
    "critic.ppo_micro_batch_size_per_gpu": ("2", []),
    "critic.ppo_epochs": ("3", []),
    "critic.cliprange_value": ("0.2", []),
    "critic.grad_clip": ("0.5", []),
    "critic.loss_agg_mode": ("seq-mean-token-sum", []),
    "critic.loss_scale_factor": ("1024", ["critic.loss_agg_mode=seq-mean-token-sum-norm"]),
    "trainer.project_name": ("other", ["trainer.default_local_dir=/runs/x"]),
    "trainer.experiment_name": ("other", ["trainer.default_local_dir=/runs/x"]),
    "trainer.logger": ("[console,tensorboard]", []),
    "trainer.n_gpus_per_node": ("1", ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "critic.ppo_mini_batch_size=8"]),
    "trainer.nnodes": ("2", []),
    "trainer.device": ("cpu", []),
    "trainer.total_training_steps": ("20", []),
    "trainer.total_epochs": ("2", NO_STEPS),
    "trainer.save_freq": ("3", []),
    "trainer.test_freq": ("2", []),
    "trainer.val_before_train": ("false", []),
    "trainer.critic_warmup": ("2", []),
    "trainer.resume_mode": ("disable", []),
    "trainer.resume_from_path": ("/ckpt/b.ckpt", ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpt/a.ckpt"]),
    "trainer.resume_changed_config": ("true", []),
    "trainer.default_local_dir": ("/runs/other", []),
    "trainer.seed": ("7", []),
    "trainer.num_threads": ("1", []),
    "trainer.rollout_mode": ("one_step_off", []),
    "trainer.max_staleness": ("4", ["trainer.rollout_mode=async"]),
    "trainer.precision": ("bf16-mixed", []),
    "trainer.callbacks": ("[LearningRateMonitor]", []),
    OB + "enable": ("true", [OB + "len=64", OB + "penalty_factor=1.0"]),
    OB + "len": ("128", OVERLONG),
    OB + "penalty_factor": ("0.5", OVERLONG),
    OB + "log": ("true", OVERLONG),
}

# key -> the argument of the plan it must change (its own component's, not only that of a key that
# follows it: critic.* default to the actor's, and iteration counts feed the LR schedules).
RECEIVES = {
    "actor_rollout_ref.model.use_remove_padding": "module.model.remove_padding",
    "critic.model.use_remove_padding": "module.critic.remove_padding",
    "actor_rollout_ref.model.override_config.attn_implementation": "module.model.attn_implementation",
    "actor_rollout_ref.model.use_fused_kernels": "module.model.fused_logprobs",
    "critic.model.override_config.attn_implementation": "module.critic.attn_implementation",
    "actor_rollout_ref.actor.use_dynamic_bsz": "module.actor.max_token_len",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "module.actor.max_token_len",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": "module.actor.forward_max_token_len",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "module.actor.forward_max_token_len",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": "module.kl.reference_max_token_len",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": "module.kl.reference_max_token_len",
    "critic.use_dynamic_bsz": "module.critic.update.max_token_len",
    "critic.ppo_max_token_len_per_gpu": "module.critic.update.max_token_len",
    "critic.forward_max_token_len_per_gpu": "module.critic.update.forward_max_token_len",
    "actor_rollout_ref.actor.clip_ratio": "module.policy_loss.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_c": "module.policy_loss.clip_ratio_c",
    "actor_rollout_ref.actor.clip_ratio_high": "module.policy_loss.clip_ratio_high",
    "actor_rollout_ref.actor.clip_ratio_low": "module.policy_loss.clip_ratio_low",
    "actor_rollout_ref.actor.entropy_coeff": "module.policy_loss.entropy_coeff",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "module.policy_loss.loss_mode",
    PL + "clip_cov_ratio": "module.policy_loss.clip_cov_ratio",
    PL + "clip_cov_lb": "module.policy_loss.clip_cov_lb",
    PL + "clip_cov_ub": "module.policy_loss.clip_cov_ub",
    PL + "kl_cov_ratio": "module.policy_loss.kl_cov_ratio",
    PL + "ppo_kl_coef": "module.policy_loss.ppo_kl_coef",
    PL + "dro_beta": "module.policy_loss.dro_beta",
    "actor_rollout_ref.actor.tau_pos": "module.policy_loss.tau_pos",
    "actor_rollout_ref.actor.tau_neg": "module.policy_loss.tau_neg",
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": "module.fsdp.actor.size",
    "actor_rollout_ref.actor.fsdp_config.reshard_after_forward": "module.fsdp.actor.reshard_after_forward",
    "actor_rollout_ref.actor.grad_clip": "module.actor.grad_clip",
    "actor_rollout_ref.actor.kl_loss_coef": "module.kl.kl_loss_coef",
    "actor_rollout_ref.actor.kl_loss_type": "module.kl.kl_loss_type",
    "actor_rollout_ref.actor.loss_agg_mode": "module.actor.loss_agg_mode",
    "actor_rollout_ref.actor.loss_scale_factor": "module.actor.loss_scale_factor",
    "actor_rollout_ref.actor.optim.betas": "module.actor_optim.betas",
    "actor_rollout_ref.actor.optim.lr": "module.actor_optim.lr",
    "actor_rollout_ref.actor.optim.lr_warmup_steps": "module.actor_optim.warmup_steps",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "module.actor_optim.warmup_steps",
    "actor_rollout_ref.actor.optim.min_lr_ratio": "module.actor_optim.min_lr_ratio",
    "actor_rollout_ref.actor.optim.num_cycles": "module.actor_optim.num_cycles",
    "actor_rollout_ref.actor.optim.warmup_style": "module.actor_optim.warmup_style",
    "actor_rollout_ref.actor.optim.weight_decay": "module.actor_optim.weight_decay",
    "actor_rollout_ref.actor.ppo_epochs": "module.actor.epochs",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "module.actor.micro_batch_size",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "module.actor.mini_batch_size",
    "actor_rollout_ref.actor.shuffle": "module.actor.shuffle_seed",
    "actor_rollout_ref.actor.strategy": "trainer.strategy",
    "actor_rollout_ref.actor.use_kl_loss": "module.kl.use_kl_loss",
    "actor_rollout_ref.model.enable_activation_offload": "module.actor.activation_offload",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "module.actor.gradient_checkpointing",
    "actor_rollout_ref.model.path": "module.model.path",
    "actor_rollout_ref.model.trust_remote_code": "module.model.trust_remote_code",
    "actor_rollout_ref.ref.fsdp_config.fsdp_size": "module.fsdp.reference.size",
    "actor_rollout_ref.ref.fsdp_config.param_offload": "module.fsdp.reference.offload",
    "actor_rollout_ref.ref.fsdp_config.reshard_after_forward": "module.fsdp.reference.reshard_after_forward",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "module.kl.reference_micro_batch_size",
    "actor_rollout_ref.rollout.dtype": "rollout.engine_kwargs.dtype",
    "actor_rollout_ref.rollout.enforce_eager": "rollout.engine_kwargs.enforce_eager",
    "actor_rollout_ref.rollout.enable_prefix_caching": "rollout.engine_kwargs.enable_prefix_caching",
    "actor_rollout_ref.rollout.prefix_cache_max_gib": "rollout.engine_kwargs.prefix_cache_max_gib",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "rollout.engine_kwargs.gpu_memory_utilization",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "module.actor.forward_micro_batch_size",
    "actor_rollout_ref.rollout.name": "rollout.engine",
    "actor_rollout_ref.rollout.num_engines": "rollout.num_engines",
    "actor_rollout_ref.rollout.response_length": "rollout.loop.max_response_len",
    "actor_rollout_ref.rollout.temperature": "rollout.loop.temperature",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "rollout.engine_kwargs.tensor_parallel_size",
    "actor_rollout_ref.rollout.top_k": "rollout.loop.top_k",
    "actor_rollout_ref.rollout.top_p": "rollout.loop.top_p",
    "actor_rollout_ref.rollout.val_kwargs.also_greedy": "datamodule.val_also_greedy",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": "rollout.pool_kwargs.weight_bucket_mb",
    "actor_rollout_ref.actor.fsdp_config.model_dtype": "module.model.dtype",
    "actor_rollout_ref.ref.fsdp_config.model_dtype": "module.model.reference_dtype",
    "critic.model.fsdp_config.model_dtype": "module.critic.dtype",
    "actor_rollout_ref.rollout.val_kwargs.do_sample": "datamodule.val_temperature",
    "actor_rollout_ref.rollout.val_kwargs.n": "datamodule.val_n",
    "actor_rollout_ref.rollout.val_kwargs.temperature": "datamodule.val_temperature",
    "actor_rollout_ref.rollout.val_kwargs.top_k": "datamodule.val_top_k",
    "actor_rollout_ref.rollout.val_kwargs.top_p": "datamodule.val_top_p",
    "agent.init_config.agent_type": "rollout.agent_type",
    "agent.init_config.max_model_len": "rollout.loop.max_model_len",
    "agent.init_config.plugins": "rollout.plugins",
    "agent.init_config.reward_name": "rollout.reward",
    "agent.init_config.reward_timeout": "rollout.reward_timeout",
    "agent.init_config.reward_config": "rollout.reward_config.llm_as_judge_math_reward.model",
    "agent.run_config.workers.num_workers": "rollout.workers.num_workers",
    "agent.run_config.workers.memory_mb": "rollout.workers.memory_mb",
    "agent.run_config.workers.start_timeout": "rollout.workers.start_timeout",
    "agent.run_config.workers.queue_timeout": "rollout.workers.queue_timeout",
    "agent.run_config.workers.lend_after": "rollout.workers.lend_after",
    "agent.run_config.workers.max_lent": "rollout.workers.max_lent",
    "agent.run_config.workers.memory_budget_mb": "rollout.workers.memory_budget_mb",
    "agent.run_config.tool_breaker.first_calls": "rollout.loop.tool_breaker.first_calls",
    "agent.run_config.tool_breaker.window": "rollout.loop.tool_breaker.window",
    "agent.run_config.tool_breaker.failure_rate": "rollout.loop.tool_breaker.failure_rate",
    "agent.init_config.system_prompt": "rollout.system_prompt",
    "agent.init_config.template": "rollout.template",
    "agent.init_config.tool_config": "rollout.tool_config.calculator",
    "agent.init_config.tool_parser_name": "rollout.tool_parser",
    "agent.init_config.tools": "rollout.tools",
    "agent.run_config.context_config.resource_backend": "rollout.resource_backend",
    "agent.run_config.generation_config.max_tokens": "rollout.loop.max_tokens",
    "agent.run_config.max_concurrent_chains": "rollout.loop.max_concurrent_chains",
    "agent.run_config.max_turns": "rollout.loop.max_turns",
    "agent.run_config.num_chains": "rollout.loop.num_chains",
    "agent.train_on_last_turn": "rollout.loop.train_on_last_turn",
    "agent.harness.command": "rollout.harness",
    "agent.harness.function": "rollout.harness",
    "agent.harness.timeout": "rollout.harness.timeout",
    "agent.harness.request_timeout": "rollout.harness.request_timeout",
    "agent.harness.sandbox": "rollout.harness.sandbox",
    "agent.harness.failures": "rollout.harness.failures",
    "algorithm.adv_estimator": "callbacks",
    "algorithm.gamma": "callbacks",
    "algorithm.kl_ctrl.horizon": "callbacks",
    "algorithm.kl_ctrl.kl_coef": "callbacks",
    "algorithm.kl_ctrl.target_kl": "callbacks",
    "algorithm.kl_ctrl.type": "callbacks",
    "algorithm.kl_penalty": "callbacks",
    "algorithm.lam": "callbacks",
    "algorithm.norm_adv_by_std_in_grpo": "callbacks",
    "algorithm.use_turn_rewards": "callbacks",
    "algorithm.turn_reward_mode": "callbacks",
    "algorithm.gigpo.step_advantage_w": "callbacks",
    "algorithm.gigpo.mode": "callbacks",
    "algorithm.gigpo.enable_similarity": "datamodule.anchor_similarity",
    "algorithm.gigpo.similarity_thresh": "datamodule.anchor_similarity",
    "algorithm.use_kl_in_reward": "module.kl.use_kl_in_reward",
    RC + "rollout_is": "module.correction.rollout_is",
    RC + "rollout_is_threshold": "module.correction.rollout_is_threshold",
    RC + "rollout_rs": "module.correction.rollout_rs",
    RC + "rollout_rs_threshold": "module.correction.rollout_rs_threshold",
    RC + "bypass_mode": "module.correction.bypass_mode",
    RC + "loss_type": "module.correction.loss_type",
    "algorithm.failed_chains": "datamodule.failed_chains",
    "algorithm.max_resamples": "datamodule.max_resamples",
    "algorithm.resample_budget_s": "datamodule.resample_budget_s",
    "algorithm.filter_groups.enable": "datamodule.filter_groups_metric",
    "algorithm.filter_groups.metric": "datamodule.filter_groups_metric",
    "algorithm.filter_groups.max_num_gen_batches": "datamodule.max_num_gen_batches",
    "critic.cliprange_value": "module.critic.cliprange_value",
    "critic.grad_clip": "module.critic.update.grad_clip",
    "critic.loss_agg_mode": "module.critic.update.loss_agg_mode",
    "critic.loss_scale_factor": "module.critic.update.loss_scale_factor",
    "critic.model.enable_activation_offload": "module.critic.update.activation_offload",
    "critic.model.enable_gradient_checkpointing": "module.critic.update.gradient_checkpointing",
    "critic.model.fsdp_config.fsdp_size": "module.fsdp.critic.size",
    "critic.model.fsdp_config.reshard_after_forward": "module.fsdp.critic.reshard_after_forward",
    "critic.model.path": "module.critic.path",
    "critic.optim.betas": "module.critic.optim.betas",
    "critic.optim.lr": "module.critic.optim.lr",
    "critic.optim.lr_warmup_steps": "module.critic.optim.warmup_steps",
    "critic.optim.lr_warmup_steps_ratio": "module.critic.optim.warmup_steps",
    "critic.optim.min_lr_ratio": "module.critic.optim.min_lr_ratio",
    "critic.optim.num_cycles": "module.critic.optim.num_cycles",
    "critic.optim.warmup_style": "module.critic.optim.warmup_style",
    "critic.optim.weight_decay": "module.critic.optim.weight_decay",
    "critic.ppo_epochs": "module.critic.update.epochs",
    "critic.ppo_micro_batch_size_per_gpu": "module.critic.update.micro_batch_size",
    "critic.ppo_mini_batch_size": "module.critic.update.mini_batch_size",
    "data.prompt_key": "datamodule.prompt_key",
    "data.max_prompt_length": "datamodule.max_prompt_length",
    "data.filter_overlong_prompts": "datamodule.filter_overlong_prompts",
    "data.truncation": "datamodule.truncation",
    "data.seed": "datamodule.seed",
    "data.shuffle": "datamodule.shuffle",
    "data.train_batch_size": "datamodule.train_batch_size",
    "data.train_files": "datamodule.train_files",
    "data.val_batch_size": "datamodule.val_batch_size",
    "data.val_files": "datamodule.val_files",
    "trainer.callbacks": "user_callbacks",
    "trainer.critic_warmup": "module.critic.warmup_iterations",
    "trainer.rollout_mode": "datamodule.rollout_mode",
    "trainer.max_staleness": "datamodule.max_staleness",
    "trainer.default_local_dir": "run_dir",
    "trainer.device": "topology.accelerator",
    "trainer.experiment_name": "loggers",
    "trainer.precision": "trainer.precision",
    "trainer.logger": "loggers",
    "trainer.n_gpus_per_node": "topology.devices",
    "trainer.nnodes": "topology.nodes",
    "trainer.num_threads": "num_threads",
    "trainer.project_name": "loggers",
    "trainer.resume_from_path": "resume_from_path",
    "trainer.resume_mode": "resume_mode",
    "trainer.resume_changed_config": "resume_changed_config",
    "trainer.save_freq": "callbacks",
    "trainer.seed": "seed",
    "trainer.test_freq": "trainer.val_check_interval",
    "trainer.val_before_train": "val_before_train",
    "trainer.total_epochs": "iterations",
    "trainer.total_training_steps": "iterations",
    "actor_rollout_ref.model.lora.rank": "module.model.lora.rank",
    "actor_rollout_ref.model.lora.alpha": "module.model.lora.alpha",
    "actor_rollout_ref.model.lora.target_modules": "module.model.lora.target_modules",
    "actor_rollout_ref.model.lora.merge": "callbacks",
    "actor_rollout_ref.model.lora.export": "callbacks",
    OB + "enable": "rollout.loop.overlong_buffer",
    OB + "len": "rollout.loop.overlong_buffer.len",
    OB + "penalty_factor": "rollout.loop.overlong_buffer.penalty_factor",
    OB + "log": "rollout.loop.overlong_buffer.log",
}

# key -> (a value this build cannot honour, context): refused at compose time, naming the key.
REFUSED: dict[str, tuple[str, list[str]]] = {
    "agent.use_agent": ("false", []),
    "agent.init_config.backend": ("verl", []),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": ("2", []),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": ("2", []),
    "critic.ulysses_sequence_parallel_size": ("2", []),
    "critic.enable": ("false", []),  # the base's estimator is gae: it needs the critic
    "actor_rollout_ref.ref.fsdp_config.optimizer_offload": ("true", FSDP),
    # FSDP2 keeps the optimizer state with the parameters: the two offloads go together
    "actor_rollout_ref.actor.fsdp_config.param_offload": ("true", FSDP),
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": ("true", FSDP),
    "critic.model.fsdp_config.param_offload": ("true", FSDP),
    "critic.model.fsdp_config.optimizer_offload": ("true", FSDP),
    # in bypass mode the old policy is the engine's: its weight against the engine is 1
    RC + "rollout_is": ("token", BYPASS),
    RC + "rollout_rs": ("sequence", BYPASS),
    # DRO's penalty has no default coefficient (verl's neither)
    PL + "loss_mode": ("dro", []),
    # LoRA under FSDP2 is not built
    "actor_rollout_ref.model.lora.rank": ("8", FSDP),
    # ReMax's greedy baseline is an outcome reward alone
    "algorithm.use_turn_rewards": ("true", ["algorithm.adv_estimator=remax"]),
}

# Both offload keys together are honoured (the refusals above cover one without the other).
PAIRS: dict[str, tuple[list[str], list[str]]] = {
    "actor_rollout_ref.actor.fsdp_config": (
        ["actor_rollout_ref.actor.fsdp_config.param_offload=true", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"],
        FSDP,
    ),
    "critic.model.fsdp_config": (
        ["critic.model.fsdp_config.param_offload=true", "critic.model.fsdp_config.optimizer_offload=true"],
        FSDP,
    ),
}

# Machines other than TWO_GPUS for a case: two nodes' engines need a Ray cluster to join.
HARDWARE = {"trainer.nnodes": Hardware(gpus=2, cpus=8, ray_address="head:6379")}

# Read by the command line rather than handed to a component: checked apart.
ELSEWHERE = {"trainer.print_config"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_plan_data(tmp_path_factory.mktemp("every_key"))


def plan_of(args: list[str], hw: Hardware = TWO_GPUS) -> dict[str, Any]:
    plan = plan_run(compose(args), hw)
    out = dataclasses.asdict(plan)
    out.pop("notes")
    return out


def differences(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += differences(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


def test_every_key_has_a_case():
    leaves, _ = verl_key_table()
    # Lightning's own Trainer arguments are not verl keys; one case each for an argument and the
    # callbacks
    leaves = set(leaves) | {"trainer.precision", "trainer.callbacks"}
    covered = set(CHANGES) | set(REFUSED) | ELSEWHERE
    assert sorted(set(leaves) - covered) == [], "keys without a case: add them to CHANGES or REFUSED"
    assert sorted(covered - set(leaves)) == []
    assert set(RECEIVES) == set(CHANGES)


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_changing_the_key_changes_what_a_component_receives(data, key):
    value, context = CHANGES[key]
    args = [*base(data), *context]
    hw = HARDWARE.get(key, TWO_GPUS)
    before = plan_of(args, hw)
    after = plan_of([*args, f"{key}={value.replace('{data}', str(data))}"], hw)
    changed = differences(before, after)
    assert RECEIVES[key] in changed, f"{key}={value} did not change {RECEIVES[key]} ({changed})"


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_value_this_build_cannot_honour_is_refused_with_the_reason(data, key):
    value, context = REFUSED[key]
    with pytest.raises(ConfigError) as err:
        compose([*base(data), *context, f"{key}={value}"])
    assert key in str(err.value) and "not supported" in str(err.value)


@pytest.mark.parametrize("prefix", sorted(PAIRS))
def test_offloading_parameters_and_optimizer_together_reaches_the_module(data, prefix):
    both, context = PAIRS[prefix]
    changed = differences(plan_of([*base(data), *context]), plan_of([*base(data), *context, *both]))
    assert any(d.startswith("module.fsdp.") and d.endswith(".offload") for d in changed), changed


def test_print_config_prints_the_config(data, capsys, monkeypatch):
    from types import SimpleNamespace

    from agentfly import cli

    monkeypatch.setattr("agentfly.run.fit.begin_run", lambda *a, **k: (None, SimpleNamespace(fit=None), None, None, None))
    monkeypatch.setattr("agentfly.run.fit.run_stage", lambda *a, **k: {})
    assert cli.main(["fit", *base(data)]) == 0
    assert "adv_estimator: gae" not in capsys.readouterr().out
    assert cli.main(["fit", *base(data), "trainer.print_config=true"]) == 0
    assert "adv_estimator: gae" in capsys.readouterr().out


def test_val_before_train_decides_the_first_validation(data):
    from agentfly.run import fit

    calls: list[str] = []

    class Trainer:
        callback_metrics: dict[str, float] = {}  # noqa: RUF012
        limit_val_batches = 0

        def validate(self, *args, **kwargs):
            calls.append("validate")

        def fit(self, *args, **kwargs):
            calls.append("fit")

    class Module:
        iteration = 10

    for flag, expected in (("true", ["validate", "fit"]), ("false", ["fit"])):
        calls.clear()
        plan = plan_run(compose([*base(data), f"trainer.val_before_train={flag}"]), TWO_GPUS)
        fit._run(plan, "fit", Trainer(), Module(), None, None)
        assert calls == expected, flag


# ------------------------------------------------------------------- inactive keys are named


def _warning(args: list[str]) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(args)
    return " ".join(str(w.message) for w in caught)


# a context where each rule's reason holds, and a key it covers with a non-default value
INACTIVE = [
    ("agent.harness.timeout=30", []),
    ("algorithm.turn_reward_mode=add", []),  # use_turn_rewards=false
    ("agent.init_config.backend_config.backend=async_verl", []),
    ("agent.use_agent=true", []),
    ("critic.ppo_epochs=3", GRPO),
    ("trainer.critic_warmup=2", GRPO),
    ("trainer.max_staleness=3", ["trainer.rollout_mode=one_step_off"]),
    ("algorithm.kl_ctrl.kl_coef=0.01", ["algorithm.use_kl_in_reward=false"]),
    ("actor_rollout_ref.actor.kl_loss_coef=0.1", ["actor_rollout_ref.actor.use_kl_loss=false"]),
    ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
     ["actor_rollout_ref.actor.use_kl_loss=false", "algorithm.use_kl_in_reward=false"]),
    ("actor_rollout_ref.actor.fsdp_config.fsdp_size=1", []),
    ("actor_rollout_ref.rollout.gpu_memory_utilization=0.8", []),
    ("actor_rollout_ref.rollout.enforce_eager=true", ["actor_rollout_ref.rollout.name=scripted"]),
    ("actor_rollout_ref.rollout.enable_prefix_caching=false", ["actor_rollout_ref.rollout.name=scripted"]),
    ("actor_rollout_ref.rollout.prefix_cache_max_gib=0.5", VLLM),
    ("actor_rollout_ref.rollout.prefix_cache_max_gib=0.5",
     ["actor_rollout_ref.rollout.enable_prefix_caching=false"]),
    ("actor_rollout_ref.rollout.val_kwargs.top_p=0.5", ["actor_rollout_ref.rollout.val_kwargs.do_sample=false"]),
    ("data.val_batch_size=4", ["data.val_files=[]"]),
    ("trainer.total_epochs=2", []),
    ("trainer.resume_from_path=/ckpt", []),
    ("trainer.resume_changed_config=true", ["trainer.resume_mode=disable"]),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
     ["algorithm.use_kl_in_reward=false", "actor_rollout_ref.actor.ppo_mini_batch_size=32", "critic.ppo_mini_batch_size=32"]),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2", [*BYPASS, "algorithm.use_kl_in_reward=false"]),
    (RC + "rollout_is_threshold=5.0", []),
    (RC + "rollout_is_threshold=5.0", [RC + "rollout_rs=token", RC + "rollout_rs_threshold=3.0"]),
    (RC + "rollout_rs_threshold=5.0", [RC + "rollout_is=token"]),
    ("actor_rollout_ref.actor.optim.min_lr_ratio=0.1", []),
    ("critic.optim.num_cycles=1.0", []),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1", ["actor_rollout_ref.actor.optim.lr_warmup_steps=3"]),
    ("critic.optim.lr_warmup_steps_ratio=0.1", ["critic.optim.lr_warmup_steps=3"]),
    ("actor_rollout_ref.actor.clip_ratio=0.3",
     ["actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28"]),
    ("data.seed=3", ["data.shuffle=false"]),
    ("data.truncation=left", []),
    ("algorithm.norm_adv_by_std_in_grpo=false", []),
    ("algorithm.gamma=0.9", GRPO),
    ("algorithm.lam=0.9", GRPO),
    ("algorithm.gigpo.step_advantage_w=0.5", []),  # gae: no step-level advantage
    ("algorithm.gigpo.mode=mean_std_norm", GRPO),
    ("algorithm.gigpo.enable_similarity=true", GRPO),  # no step groups
    ("algorithm.gigpo.similarity_thresh=0.8", GIGPO),  # enable_similarity=false
    ("actor_rollout_ref.actor.loss_scale_factor=100", []),
    (PL + "clip_cov_lb=0.5", []),  # loss_mode=vanilla
    (PL + "ppo_kl_coef=1.0", loss("clip_cov")),
    (PL + "dro_beta=0.5", []),
    ("actor_rollout_ref.actor.tau_neg=2.0", loss("gspo")),
    (RC + "loss_type=reinforce", []),
    ("actor_rollout_ref.actor.clip_ratio_high=0.28", loss("sapo")),
    ("actor_rollout_ref.actor.clip_ratio_c=5.0", loss("cispo")),
    ("actor_rollout_ref.actor.clip_ratio_low=0.1", [*loss("bypass_mode"), RC + "loss_type=reinforce"]),
    ("critic.loss_scale_factor=100", []),
    ("algorithm.max_resamples=5", ["algorithm.failed_chains=keep"]),
    ("algorithm.resample_budget_s=5", ["algorithm.failed_chains=drop"]),
    ("algorithm.filter_groups.max_num_gen_batches=3", []),  # filter_groups.enable=false
    ("algorithm.filter_groups.enable=true", ["algorithm.filter_groups.metric=acc", "agent.run_config.num_chains=1",
     "actor_rollout_ref.actor.ppo_mini_batch_size=8", "critic.ppo_mini_batch_size=8"]),
    ("actor_rollout_ref.model.lora.alpha=32", []),  # lora.rank=0: no adapter
    ("actor_rollout_ref.ref.fsdp_config.model_dtype=bf16", LORA),  # the reference is the actor's base
    ("actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=512",
     ["actor_rollout_ref.rollout.num_engines=0"]),
    (OB + "len=64", []),  # overlong_buffer.enable=false
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096", []),  # use_dynamic_bsz=false
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", [AD]),
    ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096", []),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2", [AD]),
    ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=4096", [AD, "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=false"]),
    ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2", [AD]),
    ("critic.forward_max_token_len_per_gpu=4096", []),
    ("critic.ppo_micro_batch_size_per_gpu=2", ["critic.use_dynamic_bsz=true"]),
]


def test_every_rule_has_a_case():
    for rule in RULES:
        assert any(rule.covers(canonical_key(arg.split("=")[0])) for arg, _ in INACTIVE), rule.prefixes


@pytest.mark.parametrize(("arg", "context"), INACTIVE)
def test_a_key_another_setting_turns_off_is_named(data, arg, context):
    key = canonical_key(arg.split("=")[0])
    said = _warning([*base(data), *context, arg])
    assert f"{key} (" in said, said
    assert f"{key} (" not in _warning([*base(data), *context])  # only what the user set


def test_rejection_needs_the_rollout_time_log_prob_pass(data):
    """One update per rollout skips the pass, unless a rejection has to know the old policy."""
    one_update = ["algorithm.use_kl_in_reward=false", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
                  "critic.ppo_mini_batch_size=32"]
    key = "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"
    assert f"{key} (" in _warning([*base(data), *one_update, f"{key}=2"])
    assert f"{key} (" not in _warning([*base(data), *one_update, RC + "rollout_rs=token", f"{key}=2"])


def test_wandb_names_without_wandb_are_named(data):
    args = [*base(data), "trainer.logger=[console]", "trainer.default_local_dir=/runs/x", "trainer.project_name=p"]
    assert "trainer.project_name (" in _warning(args)
    assert "trainer.project_name (" not in _warning([*args[:-2], "trainer.project_name=p"])  # names the run dir


# -------------------------------------------------------------- what the machine cannot hold


@pytest.mark.parametrize(
    ("args", "hw", "named"),
    [
        (["trainer.device=cuda"], Hardware(gpus=0, cpus=2), "no CUDA device is visible"),
        (["trainer.n_gpus_per_node=8"], Hardware(gpus=2, cpus=8), "this machine shows 2 GPUs"),
        (["actor_rollout_ref.rollout.num_engines=3"], Hardware(gpus=0, cpus=2), "at most 2 such engine"),
        (["actor_rollout_ref.rollout.num_engines=3"], Hardware(gpus=2, cpus=8), "need 3 GPUs"),
        (["actor_rollout_ref.rollout.tensor_model_parallel_size=2"], Hardware(gpus=2, cpus=8), "runs on one device"),
        (["trainer.device=cpu", "actor_rollout_ref.model.enable_activation_offload=true"], Hardware(gpus=0, cpus=2), "has no GPU"),
    ],
)
def test_a_request_the_machine_cannot_meet_names_the_resource(data, args, hw, named):
    with pytest.raises(ConfigError) as err:
        plan_run(compose([*base(data), *args]), hw)
    assert named in str(err.value), str(err.value)


def test_dropping_failed_groups_is_refused_on_several_ranks_and_planned_on_one(data):
    drop = [*base(data), "algorithm.failed_chains=drop"]
    with pytest.raises(ConfigError) as err:
        plan_run(compose(drop), TWO_GPUS)
    said = str(err.value)
    assert "algorithm.failed_chains=drop" in said and "2 ranks" in said, said
    one = plan_run(compose([*drop, "trainer.n_gpus_per_node=1"]), TWO_GPUS)
    assert one.datamodule["failed_chains"] == "drop"


def test_the_bypass_mode_loss_turns_bypass_mode_on_and_weighs_in_it(data):
    """loss_mode=bypass_mode resolves bypass_mode=null to True and takes rollout_is/rollout_rs
    (it weighs π_θ/π_engine); with bypass_mode=false it is refused, as are the weights in bypass
    mode with any other loss."""
    plan = plan_of([*base(data), *loss("bypass_mode"), RC + "rollout_is=token", RC + "rollout_rs=sequence"])
    assert plan["module"]["correction"]["bypass_mode"] is True
    assert plan["module"]["correction"]["rollout_is"] == "token"
    for args in ([*loss("bypass_mode"), RC + "bypass_mode=false"], [*loss("gspo"), *BYPASS, RC + "rollout_is=token"]):
        with pytest.raises(ConfigError, match="not supported"):
            compose([*base(data), *args])


def test_off_sync_without_a_correction_the_engine_is_the_old_policy(data):
    """bypass_mode=null resolves per rollout mode: off `sync`, stale samples are clipped against
    the policy that sampled them, unless an importance weight or a rejection is chosen; an
    explicit value always wins."""
    def bypass(*args: str) -> bool:
        return plan_of(base(data) + list(args))["module"]["correction"]["bypass_mode"]

    assert bypass() is False
    assert bypass("trainer.rollout_mode=one_step_off") is True
    assert bypass("trainer.rollout_mode=async", "trainer.max_staleness=2") is True
    assert bypass("trainer.rollout_mode=async", RC + "rollout_is=token") is False
    assert bypass("trainer.rollout_mode=async", RC + "rollout_rs=token") is False
    assert bypass("trainer.rollout_mode=async", RC + "bypass_mode=false") is False
    assert bypass(RC + "bypass_mode=true") is True
