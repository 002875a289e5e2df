"""AgentFly's judge rewards when the config is composed: an LLM judge is accepted with its server
(``agent.init_config.reward_config.<reward>.base_url`` and ``.model``) and refused without,
naming those keys; a VLM judge is refused naming the service it needs, and, where VLM_MODELS /
VLM_SERVER_IPS configure it, saying why it is refused anyway."""

from __future__ import annotations

import pytest

from tests.config.cases import BASE, error_of, load_quiet, select

VLM = ("vlm_as_judge_pass_reward", "vlm_as_judge_pass_reward_multi_model")
LLM = ("llm_as_judge_math_reward", "llm_as_judge_reward")
KEY = "agent.init_config.reward_config"


def with_reward(name: str) -> list[str]:
    return [a for a in BASE if "reward_name" not in a] + [f"agent.init_config.reward_name={name}"]


@pytest.mark.parametrize("name", VLM)
def test_a_vlm_judge_without_its_servers_names_the_variables(monkeypatch, name):
    monkeypatch.delenv("VLM_MODELS", raising=False)
    monkeypatch.delenv("VLM_SERVER_IPS", raising=False)
    msg = error_of(with_reward(name))
    assert f"agent.init_config.reward_name={name!r} is not supported" in msg
    assert "VLM_MODELS and VLM_SERVER_IPS not set" in msg and "unknown reward" not in msg


def test_a_vlm_judge_with_servers_of_another_count_names_both_counts(monkeypatch):
    monkeypatch.setenv("VLM_MODELS", "a/vlm,b/vlm")
    monkeypatch.setenv("VLM_SERVER_IPS", "10.0.0.1")
    msg = error_of(with_reward(VLM[1]))
    assert "VLM_MODELS names 2 models but VLM_SERVER_IPS 1 servers" in msg


def test_a_configured_vlm_judge_is_refused_for_want_of_a_client(monkeypatch):
    monkeypatch.setenv("VLM_MODELS", "a/vlm, b/vlm")
    monkeypatch.setenv("VLM_SERVER_IPS", "10.0.0.1,10.0.0.2")
    msg = error_of(with_reward(VLM[1]))
    assert "VLM_MODELS and VLM_SERVER_IPS are set (2 judge server(s))" in msg
    assert "agentfly has no client for a judge service" in msg and "refused all the same" in msg


def settings(name: str, **values: str) -> list[str]:
    return [f"{KEY}.{name}.{k}={v}" for k, v in values.items()]


@pytest.mark.parametrize("name", LLM)
def test_an_llm_judge_without_its_server_is_refused_naming_the_keys(name):
    msg = error_of(with_reward(name))
    assert f"agent.init_config.reward_name={name!r} needs an LLM judge service" in msg
    assert f"set {KEY}.{name}.base_url (" in msg and f" and {KEY}.{name}.model (" in msg
    assert "Qwen/Qwen2.5-72B-Instruct" in msg  # AgentFly's judge, for reference


def test_an_llm_judge_given_only_its_url_names_the_model_key():
    name = LLM[0]
    msg = error_of([*with_reward(name), *settings(name, base_url="http://127.0.0.1:8000/v1")])
    assert f"set {KEY}.{name}.model (" in msg and f"{KEY}.{name}.base_url" not in msg


@pytest.mark.parametrize("name", LLM)
def test_an_llm_judge_with_its_server_is_accepted(name):
    server = settings(name, base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-72B-Instruct")
    cfg = load_quiet([*with_reward(name), *server, f"{KEY}.{name}.timeout=5"])
    assert select(cfg, KEY)[name] == {
        "base_url": "http://127.0.0.1:8000/v1", "model": "Qwen/Qwen2.5-72B-Instruct", "timeout": 5
    }


SERVER = settings(LLM[0], base_url="http://127.0.0.1:8000/v1", model="judge")


@pytest.mark.parametrize(
    "args, fragment",
    [
        ([*SERVER, f"{KEY}.{LLM[0]}.modle=x"], "reward_config.llm_as_judge_math_reward.modle: reward 'llm_as_judge_math_reward' has no such setting; did you mean 'model'?"),
        ([*SERVER, f"{KEY}.{LLM[0]}.timeout=0"], "timeout must be positive"),
        ([*SERVER, f"{KEY}.{LLM[0]}.api_key_env=AGENTFLY_TEST_NO_SUCH_KEY"], "the variable AGENTFLY_TEST_NO_SUCH_KEY holding the judge's API key is not set"),
        ([*SERVER, f"{KEY}.math_equal_reward.base_url=x"], "reward_config.math_equal_reward: reward 'math_equal_reward' takes no settings"),
        ([*SERVER, *settings(LLM[1], base_url="x", model="y")], "reward 'llm_as_judge_reward' is not agent.init_config.reward_name ('llm_as_judge_math_reward')"),
    ],
)
def test_a_bad_judge_setting_is_refused_naming_its_key(args, fragment):
    assert fragment in error_of([*with_reward(LLM[0]), *args])
