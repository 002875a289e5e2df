"""Every stage config of every example (``examples/*/*.yaml``: ``sft.yaml`` for ``agentfly
sft``, the others for ``agentfly fit``) composes and validates as its driver hands it over: keys,
types, tools, rewards, agent types and templates are known. The examples' end-to-end runs are in
`make test-examples`; this is their guard inside `make test`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfly.config import ConfigError, config_to_yaml
from agentfly.config.sft import load_sft_config, view_yaml
from tests.config.cases import load_quiet

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
STAGES = sorted(EXAMPLES.glob("*/*.yaml"))


def compose(path: Path) -> str:
    """The config as its command composes it (as tests/config/test_config.py composes conf/'s)."""
    if path.name == "sft.yaml":
        return view_yaml(load_sft_config(config_file=path))
    return config_to_yaml(load_quiet(config_file=path))


def test_the_examples_with_stages_are_all_here():
    names = {p.relative_to(EXAMPLES).as_posix() for p in STAGES}
    for example in ("smollm2_calculator", "textworld_coins", "gui_clicks"):
        assert {f"{example}/sft.yaml", f"{example}/rl.yaml"} <= names, names


@pytest.mark.parametrize("path", STAGES, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_every_stage_config_composes_and_validates(path: Path):
    assert compose(path)


def test_a_misspelt_tool_or_reward_in_a_stage_config_is_refused(tmp_path):
    """The check above is not vacuous: the TextWorld example's RL stage with its tool's or its
    reward's name misspelt is refused, naming the key."""
    text = (EXAMPLES / "textworld_coins" / "rl.yaml").read_text()
    for right, wrong, key in (("[textworld_step]", "[textworld_stp]", "agent.init_config.tools"),
                              ("textworld_progress_reward ", "textworld_progres_reward ", "agent.init_config.reward_name")):
        assert right in text
        bad = tmp_path / "rl.yaml"
        bad.write_text(text.replace(right, wrong))
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            compose(bad)
