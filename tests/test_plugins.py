"""One plug-in path: a user's file outside the package, named in the config, trains by `agentfly fit`.

The plug-in files are written into a temporary folder (never inside the package) and reach the
run only through ``agent.init_config.plugins`` or ``module:attr`` names. Their tool, reward and
estimator append what they see to the JSON-lines file named by ``$PLUGTEST_LOG``, so each test
checks that the run called them, and with which settings. The tiny random model never writes a
tool call by itself: the plug-in agent type turns every turn into a call of the plug-in tool.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from agentfly.cli import load_config, main
from agentfly.config import ConfigError
from agentfly.core.plugins import import_plugin
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.rewards import get_reward
from agentfly.rollout.runner import configure_tools
from agentfly.rollout.tools import TOOLS, get_tool, run_tool_call

# Registers, on import: tool `plugtest_stamp` (settings: stamp, repeat), reward
# `plugtest_reward`, agent type `plugtest_caller`, estimator `plugtest_centered`, engine
# `plugtest_engine`. Also holds undecorated objects for the `module:attr` spelling.
PLUGIN = '''
import json
import os
from dataclasses import dataclass

from agentfly.estimators import register_estimator
from agentfly.rollout.agents import Agent, ParsedTurn, ToolCallRequest, register_agent
from agentfly.rollout.engines import Engine, register_engine
from agentfly.rollout.rewards import reward
from agentfly.rollout.tools import tool


def log(event, **data):
    with open(os.environ["PLUGTEST_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **data}) + "\\n")


@dataclass(frozen=True)
class StampSettings:
    stamp: str = "unset"
    repeat: int = 1

    def __post_init__(self):
        if self.repeat < 1:
            raise ValueError(f"repeat must be at least 1, got {self.repeat}")


@tool(name="plugtest_stamp", settings=StampSettings)
def stamp(text: str, settings: StampSettings) -> str:
    """Stamp a text.

    Args:
        text: the text.
    """
    log("tool", stamp=settings.stamp, repeat=settings.repeat)
    return settings.stamp * settings.repeat


def shout(text: str) -> str:
    """Shout a text back (a plain function: a tool only when named as module:attr).

    Args:
        text: the text.
    """
    log("tool", name="shout")
    return "SHOUT"


class Caller(Agent):
    """Calls its first tool on every turn, whatever the model wrote."""

    def parse(self, text):
        return ParsedTurn(calls=[ToolCallRequest(self.tools[0].name, {"text": text[:20]})])


register_agent("plugtest_caller")(type("RegisteredCaller", (Caller,), {}))


def scored(prediction, trajectory):
    observations = [c.observation for c in trajectory.tool_calls]
    log("reward", observations=observations)
    return 1.0 if observations and all(c.ok for c in trajectory.tool_calls) else 0.0


reward(name="plugtest_reward")(lambda prediction, trajectory: scored(prediction, trajectory))


def centered(x):
    scores = x.token_level_rewards.sum(-1)  # (B,)
    log("estimator", rows=int(scores.shape[0]))
    advantages = (scores - scores.mean())[:, None] * x.response_mask  # (B, T)
    return advantages, advantages


register_estimator("plugtest_centered")(lambda x: centered(x))


class StubEngine(Engine):
    """Generates nothing; reports the process it lives in."""

    max_model_len = 16

    def __init__(self, **_):
        pass

    @property
    def tokenizer(self):
        return None

    def generate(self, prompts, sampling):
        return [[] for _ in prompts]

    def load_weights(self, weights):
        pass


register_engine("plugtest_engine")(type("RegisteredStub", (StubEngine,), {}))
'''


@pytest.fixture(scope="module")
def plugin_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plug-in file, one per test module: a second copy would register its names again."""
    path = tmp_path_factory.mktemp("user_code") / "my_plugins.py"
    path.write_text(PLUGIN)
    return path


@pytest.fixture
def events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Reads back what the plug-ins logged in this test."""
    log = tmp_path / "plugin_log.jsonl"
    monkeypatch.setenv("PLUGTEST_LOG", str(log))

    def read(kind: str) -> list[dict]:
        if not log.exists():
            return []
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        return [r for r in rows if r["event"] == kind]

    return read


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("plugtest_task")
    model = build_tiny_model(root / "model")
    rows = [{"question": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in [(1, 2), (3, 4)]]
    (root / "train.json").write_text(json.dumps(rows))
    return root, model


def fit_args(root: Path, model: Path, run: Path, extra: list[str]) -> list[str]:
    return [
        "fit",
        f"data.train_files={root / 'train.json'}",
        "data.train_batch_size=2",
        f"agent.init_config.model_name_or_path={model}",
        "agent.init_config.template=qwen2.5",
        "agent.run_config.num_chains=2",
        "agent.run_config.max_turns=2",
        "agent.run_config.generation_config.max_tokens=6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.num_engines=0",
        "trainer.n_gpus_per_node=1",
        "trainer.logger=[csv]",
        "trainer.total_training_steps=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        f"trainer.default_local_dir={run}",
        *extra,
    ]


def iteration_metrics(run: Path) -> list[dict]:
    out = []
    for path in sorted((run / "metrics").glob("version_*/metrics.csv")):
        with open(path) as f:
            out += [r for r in csv.DictReader(f) if r.get("training/iteration")]
    return out


def test_plugins_list_registers_a_tool_reward_agent_and_estimator_used_by_fit(
    task, plugin_file, events, tmp_path
):
    root, model = task
    run = tmp_path / "run"
    extra = [
        f"agent.init_config.plugins=[{plugin_file}]",
        "agent.init_config.agent_type=plugtest_caller",
        "agent.init_config.tools=[plugtest_stamp]",
        "agent.init_config.tool_config.plugtest_stamp.stamp=ok!",
        "agent.init_config.tool_config.plugtest_stamp.repeat=2",
        "agent.init_config.reward_name=plugtest_reward",
        "algorithm.adv_estimator=plugtest_centered",
    ]
    assert main(fit_args(root, model, run, extra)) == 0
    # 2 prompts x 2 chains x 2 turns, each turn one call made by the plug-in agent type, each
    # seeing the settings of tool_config ("ok!" twice)
    assert [(e["stamp"], e["repeat"]) for e in events("tool")] == [("ok!", 2)] * 8
    assert [e["observations"] for e in events("reward")] == [["ok!ok!", "ok!ok!"]] * 4
    assert [e["rows"] for e in events("estimator")] == [4]  # one iteration of 4 chains
    (metrics,) = iteration_metrics(run)
    assert float(metrics["rollout/reward/mean"]) == 1.0  # the plug-in reward's score


def test_module_attr_names_are_imported_and_used_by_fit(task, plugin_file, events, tmp_path):
    """No plugins list: each name is a ``file.py:attr`` of plain, unregistered objects."""
    root, model = task
    run = tmp_path / "run"
    extra = [
        f"agent.init_config.agent_type={plugin_file}:Caller",
        f"agent.init_config.tools=[{plugin_file}:shout]",
        f"agent.init_config.reward_name={plugin_file}:scored",
        f"algorithm.adv_estimator={plugin_file}:centered",
    ]
    assert main(fit_args(root, model, run, extra)) == 0
    assert [e["name"] for e in events("tool")] == ["shout"] * 8
    assert [e["observations"] for e in events("reward")] == [["SHOUT", "SHOUT"]] * 4
    assert [e["rows"] for e in events("estimator")] == [4]
    assert float(iteration_metrics(run)[0]["rollout/reward/mean"]) == 1.0


def test_a_dotted_plugin_module_and_module_attr(plugin_file, monkeypatch):
    """The same file by path and by dotted name is one module: its names register once."""
    by_path = import_plugin(str(plugin_file))
    shout = get_tool(f"{plugin_file}:shout")  # a plain function made a tool, under the path spec
    monkeypatch.syspath_prepend(str(plugin_file.parent))
    monkeypatch.delitem(sys.modules, "my_plugins", raising=False)
    init = load_config(
        [
            *BASE,
            "agent.init_config.plugins=[my_plugins]",
            "agent.init_config.tools=[my_plugins:shout,plugtest_stamp]",
            "agent.init_config.reward_name=my_plugins:scored",
        ]
    ).agent.init_config
    assert sys.modules["my_plugins"] is by_path
    assert [t.name for t in configure_tools(init.tools, {})] == ["shout", "plugtest_stamp"]
    assert get_tool("my_plugins:shout") is shout  # the same tool under both spellings
    assert get_reward("my_plugins:scored") is by_path.scored


BASE = [
    "actor_rollout_ref.model.path=/m",
    "agent.init_config.tools=[calculator,search]",
    "algorithm.adv_estimator=grpo",
    "agent.run_config.num_chains=2",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.n_gpus_per_node=1",
    "agent.init_config.reward_name=math_equal_reward",
]


def bound_tools(extra: list[str]) -> dict:
    """The run's tools after composing ``extra``, bound as build_rollout binds them."""
    init = load_config([*BASE, *extra]).agent.init_config
    return {t.name: t for t in configure_tools(init.tools, init.tool_config)}


def calculate(tool, expression: str):
    return asyncio.run(run_tool_call(tool, {"expression": expression}))


def test_calculator_max_digits_bounds_every_number():
    tools = bound_tools(["agent.init_config.tool_config.calculator.max_digits=8"])
    calc = tools["calculator"]
    # 10**7 = 10000000 has 8 digits, 10**8 has 9; 99999999 + 1 = 10**8 (a result too large);
    # 123456789 is an input with 9 digits; 1/123456789 a denominator with 9
    assert calculate(calc, "10**7").observation == "10000000"
    assert calculate(calc, "99999998 + 1").observation == "99999999"
    for too_big in ("10**8", "99999999 + 1", "123456789 - 1", "1/123456789", "factorial(12)"):
        result = calculate(calc, too_big)
        assert not result.ok and "more than 8 digits" in result.observation, too_big
    assert calculate(calc, "factorial(11)").observation == "39916800"  # 8 digits
    # the registered calculator keeps its defaults: the setting belongs to this run only
    assert calculate(get_tool("calculator"), "10**8").observation == "100000000"


def test_search_settings_reach_the_builtin_search(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("red apples\nred cherries\nred roses\n")
    setting = "agent.init_config.tool_config.search"
    top2 = bound_tools([f"{setting}.corpus_path={corpus}", f"{setting}.top_k=2"])["search"]
    lines = asyncio.run(run_tool_call(top2, {"query": "red"})).observation.splitlines()
    assert [line[:6] for line in lines] == ["Doc 1 ", "Doc 2 "]  # every passage matches: 2 of 3
    short = bound_tools([f"{setting}.corpus_path={corpus}", f"{setting}.max_output_chars=8"])
    observation = asyncio.run(run_tool_call(short["search"], {"query": "red"})).observation
    assert observation.startswith("Doc 1 re\n... [output truncated")


def test_code_interpreter_settings_reach_each_chains_session():
    setting = "agent.init_config.tool_config.python_executor"  # an alias names the same tool
    tools = bound_tools(
        [
            "agent.init_config.tools=[python_executor]",
            f"{setting}.cell_timeout=1.5",
            f"{setting}.memory_mb=512",
            f"{setting}.isolation=unsafe_rlimits_only",
        ]
    )
    session = tools["code_interpreter"].new_resource()
    try:
        assert (session.timeout, session.memory_mb) == (1.5, 512)
    finally:
        session.close()


def test_timeout_override_reaches_any_tool():
    tools = bound_tools(["agent.init_config.tool_config.calculator.timeout=0.001"])
    assert tools["calculator"].timeout == 0.001 and get_tool("calculator").timeout == 10.0


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["agent.init_config.tools=[calculater]"], ["agent.init_config.tools", "'calculator'"]),
        (
            ["agent.init_config.tool_config.calculator.max_digit=8"],
            ["agent.init_config.tool_config.calculator", "'max_digits'", "max_chars, max_degree"],
        ),
        (
            ["agent.init_config.tool_config.calculator.max_digits=many"],
            ["tool_config.calculator", "max_digits='many': expected int, got str"],
        ),
        (
            ["agent.init_config.tool_config.calculator.max_digits=0"],
            ["max_digits must be at least 1"],
        ),
        (
            ["agent.init_config.tool_config.calculater.max_digits=8"],
            ["tool_config.calculater", "'calculator'"],
        ),
        (
            ["agent.init_config.tool_config.answer.timeout=3"],
            ["'answer' is not in agent.init_config.tools"],
        ),
        (
            ["agent.init_config.reward_name=math_equal_rewrd"],
            ["agent.init_config.reward_name", "'math_equal_reward'"],
        ),
        (["agent.init_config.agent_type=reactt"], ["agent.init_config.agent_type", "'react'"]),
        (["agent.init_config.template=qwen2.6"], ["agent.init_config.template", "'qwen2.5'"]),
        (["algorithm.adv_estimator=grp"], ["algorithm.adv_estimator", "'grpo'"]),
        (["actor_rollout_ref.rollout.name=vlm"], ["actor_rollout_ref.rollout.name", "'vllm'"]),
        (
            ["agent.init_config.plugins=[no_such_pkg.tools]"],
            ["agent.init_config.plugins", "'no_such_pkg.tools' not found"],
        ),
        (
            ["agent.init_config.plugins=[./nowhere/tools.py]"],
            ["agent.init_config.plugins", "not found"],
        ),
        (
            ["agent.init_config.reward_name=agentfly.rollout.rewards:no_such"],
            ["agent.init_config.reward_name", "has no attribute 'no_such'"],
        ),
        (
            ["algorithm.adv_estimator=agentfly.rollout.tools:TOOLS"],
            ["algorithm.adv_estimator", "does not name a valid advantage estimator"],
        ),
    ],
)
def test_bad_names_and_settings_are_refused_at_compose_time(extra, needles):
    with pytest.raises(ConfigError) as info:
        load_config([*BASE, *extra])
    for needle in needles:
        assert needle in str(info.value)


def test_a_tool_name_from_the_model_never_imports_a_module():
    result = asyncio.run(run_tool_call("os.path:exists", {"path": "/"}))
    assert not result.ok and result.error == "unknown_tool"
    assert "os.path:exists" not in TOOLS


def test_every_registered_engine_passes_validation():
    for name, registered in (("hf", "transformers"), ("transformers", "transformers"), ("vllm", "vllm"),
                             ("scripted", "scripted")):
        cfg = load_config([*BASE, f"actor_rollout_ref.rollout.name={name}"])  # no ConfigError
        assert cfg.actor_rollout_ref.rollout.name == registered


def test_a_name_registered_twice_to_different_objects_is_refused(tmp_path):
    other = tmp_path / "copy_of_plugins.py"
    other.write_text(
        "from agentfly.rollout.tools import tool\n\n"
        "@tool(name='calculator')\n"
        "def calc(x: str) -> str:\n"
        '    """Echo.\n\n    Args:\n        x: text.\n    """\n'
        "    return x\n"
    )
    with pytest.raises(
        ConfigError, match=r"agent.init_config.plugins: .*'calculator' is already registered"
    ):
        load_config([*BASE, f"agent.init_config.plugins=[{other}]"])


def test_ray_engine_actors_import_the_plugins(plugin_file, tmp_path):
    """An engine registered by a plug-in is built in a Ray actor, which imports the plug-in itself."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    from agentfly.rollout.engines import EnginePool

    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    pool = EnginePool(
        "plugtest_engine",
        num_engines=1,
        plugins=[str(plugin_file)],
        ray_init={"num_cpus": 1, "temp_dir": temp_dir, "log_to_driver": False},
    )
    try:
        (stats,) = pool.stats()
        assert stats["pid"] != os.getpid() and stats["max_model_len"] == 16
    finally:
        pool.shutdown()
