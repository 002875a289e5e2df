"""`agentfly fit` on environments, with AgentFly's tool and reward names, 2 iterations each on the
tiny model: TextWorld, ScienceWorld and chess with scripted turns (tests/envs/env_script.py: in
every group of two chains one plays the gold path and one a wrong sequence), so each iteration
scores both; and the key reference's WebShop command on the generated catalog. The gold paths
score the environment's full reward, the wrong ones less, and no chain is failed by the
infrastructure. Each fit runs in this process; no environment process outlives it.
"""

from __future__ import annotations

import json
import time

import psutil
import pytest

from agentfly.cli import main
from agentfly.models.tiny import build_tiny_model
from tests.envs.conftest import needs, requires_java, requires_stockfish
from tests.envs.env_script import SCRIPTS_FILE, action, env_fit, write_scripts
from tests.fit_runs import rows as metrics_rows

ITERATIONS = 2  # env_fit's


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # long enough for a few environment observations (the tiny tokenizer: ~1.4 characters a token)
    return build_tiny_model(
        tmp_path_factory.mktemp("env_fits") / "model", max_position_embeddings=4096
    )


def rollout_records(run) -> list[dict]:
    return [
        json.loads(line)
        for line in (run / "trajectories" / "rollouts_rank0.jsonl").read_text().splitlines()
    ]


def env_processes_left(within: float = 10.0) -> list[str]:
    """This process's environment processes (and theirs) still running after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        left = []
        for proc in psutil.Process().children(recursive=True):
            try:
                line = " ".join(proc.cmdline())
                if proc.status() != psutil.STATUS_ZOMBIE and (
                    "agentfly.envs.process" in line or "java" in line or "stockfish" in line
                ):
                    left.append(f"{proc.pid} {line[:120]}")
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def trains_gold_and_wrong(
    tmp_path, monkeypatch, model, row, gold, wrong, tools, reward, full, **kw
) -> list[dict]:
    """Fits ``ITERATIONS`` iterations on ``row`` (one group of two chains each: the gold script's
    and the wrong one's); checks both rewards of every iteration and returns the records."""
    data = tmp_path / "rows.json"
    data.write_text(json.dumps([row]))
    monkeypatch.setenv(
        SCRIPTS_FILE,
        str(write_scripts(tmp_path / "scripts.json", {row["question"]: [gold, wrong]})),
    )
    run = tmp_path / "run"
    assert main(env_fit(run, model, data, tools, reward, **kw)) == 0
    metrics = [r for r in metrics_rows(run) if r.get("training/iteration")]
    assert [float(r["training/iteration"]) for r in metrics] == [1.0, 2.0]
    assert all(float(r["rollout/failed_chains"]) == 0 for r in metrics)
    records = rollout_records(run)
    assert len(records) == ITERATIONS
    for record in records:
        best, worst = max(record["rewards"]), min(record["rewards"])
        assert best == pytest.approx(full) and worst < full, record
    assert not env_processes_left()
    return records


def test_textworld_trains_on_a_gold_and_a_wrong_play(tmp_path, monkeypatch, model, textworld_game):
    from agentfly.envs.textworld import TextWorldEnv

    env = TextWorldEnv()
    walkthrough = env.reset(textworld_game)[1]["walkthrough"]
    env.close()
    gold = [action(c) for c in walkthrough]
    # 3 of 7 points, then stops
    wrong = [action(c) for c in walkthrough[:3]] + [action("look"), "I give up."]
    records = trains_gold_and_wrong(
        tmp_path,
        monkeypatch,
        model,
        textworld_game,
        gold,
        wrong,
        ["textworld_step"],
        "textworld_reward",
        1.0,
        max_turns=10,
    )
    # the game gives a point on some steps: each on the turn that took it, the wrong play's 3 of 7
    for record in records:
        sums = sorted(sum(t) for t in record["turn_rewards"])
        assert sums == [3, 7] and sorted(record["rewards"]) == pytest.approx([3 / 7, 1.0])


@requires_java
def test_scienceworld_trains_on_a_gold_and_a_wrong_play(tmp_path, monkeypatch, model):
    needs("scienceworld")
    # the gold path of lifespan-longest-lived, variation 0, no simplification (ScienceWorld's own)
    gold = [
        action(a)
        for a in (
            "open door to greenhouse",
            "go to greenhouse",
            "open door to outside",
            "go to outside",
            "focus on baby baby brown bear",
            "wait1",
        )
    ]
    wrong = [action("look around"), action("inventory"), "I am done."]
    row = {
        "question": "Find the animal that lives longest, then focus on it.",
        "task_name": "lifespan-longest-lived",
        "variation_idx": 0,
    }
    records = trains_gold_and_wrong(
        tmp_path,
        monkeypatch,
        model,
        row,
        gold,
        wrong,
        ["scienceworld_explorer"],
        "scienceworld_reward",
        10.0,
    )
    for record in records:  # the completed task's score reached 1.0 over the gold play's turns
        assert sorted(sum(t) for t in record["turn_rewards"])[-1] == pytest.approx(1.0)


@requires_stockfish
def test_chess_trains_on_a_mate_and_a_miss_as_agentfly_runs_it(tmp_path, monkeypatch, model):
    needs("chess")
    from agentfly.envs.chess import DEMO_PUZZLES, puzzle_rows

    (row,) = puzzle_rows(DEMO_PUZZLES[:1])  # back-rank mate after the opponent's rook move: d1d8#

    def move(uci):
        return f'Thought: the back rank.\nAction: chess_move\nInput: {{"move": "{uci}"}}'

    # AgentFly's chess run: the react agent, qwen2.5, the three tools; a miss ends the puzzle
    gold = ["Thought: look first.\nAction: chess_get_state\nInput: {}", move("d1d8")]
    wrong = [move("d1d7")]
    records = trains_gold_and_wrong(
        tmp_path,
        monkeypatch,
        model,
        row,
        gold,
        wrong,
        ["chess_move", "chess_get_state", "chess_get_legal_moves"],
        "chess_puzzle_reward",
        1.0,
        agent="react",
        template="qwen2.5",
    )
    for record in records:  # the miss gives away the mate: move quality 0, solving 0
        assert sorted(record["rewards"]) == pytest.approx([0.0, 1.0])


def test_the_key_reference_webshop_command_trains_on_the_generated_catalog(tmp_path, monkeypatch):
    """AgentFly's WebShop command, its values kept but the model (tiny), the data (a goal of the
    generated catalog, `python -m agentfly.envs.webshop make-data`), the batch (1 prompt x its 8
    chains), the scripted engine for vLLM and 2 iterations (as tests/test_verl_commands.py's
    local_args change AgentFly's other commands). Every chain gets its WebShop environment,
    reset to its goal, and none fails; in every group half the chains play the goal's
    walkthrough (reward 1) and half buy its product without choosing the options, which WebShop's
    formula scores (attributes + price) / (attributes + options + 1)."""
    needs("rapidfuzz")
    from agentfly.envs.webshop import WebShopEnv, make_data
    from tests.config.verl_commands import KEY_REFERENCE_WEBSHOP

    model = build_tiny_model(tmp_path / "model", max_position_embeddings=16384)  # the command's context
    rows = make_data(tmp_path / "data", val=19)  # the generated catalog's first goal to train on
    env = WebShopEnv()  # the tool's catalog: the default settings
    walkthrough = env.reset({"task_id": 0})[1]["walkthrough"]
    target = env.goal
    option_clicks = {f"click[{o}]" for o in target["goal_options"]}
    gold = [action(a) for a in walkthrough]
    wrong = [action(a) for a in walkthrough if a not in option_clicks]
    n_attr, n_option = len(target["attributes"]), len(target["goal_options"])
    assert n_option >= 1 and len(wrong) < len(gold)
    skipped = (n_attr + 1) / (n_attr + n_option + 1)
    question = rows["train"][0]["question"]
    scripts = write_scripts(tmp_path / "scripts.json", {question: [gold, wrong]})
    monkeypatch.setenv(SCRIPTS_FILE, str(scripts))
    run = tmp_path / "run"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    replace = {
        "agent.init_config.model_name_or_path": model,
        "actor_rollout_ref.model.path": model,
        "critic.model.path": model,
        "data.train_files": tmp_path / "data" / "webshop_goals_train.json",
        "data.val_files": tmp_path / "data" / "webshop_goals_train.json",
        "data.train_batch_size": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "critic.ppo_mini_batch_size": 8,
        "actor_rollout_ref.rollout.name": "env_script",
        "trainer.total_training_steps": ITERATIONS,
        "trainer.save_freq": ITERATIONS,
        "trainer.test_freq": ITERATIONS,
    }
    args = [
        f"{a.split('=', 1)[0]}={replace[a.split('=', 1)[0]]}"
        if a.split("=", 1)[0] in replace
        else a
        for a in KEY_REFERENCE_WEBSHOP
    ]
    scripted = [
        "agent.init_config.plugins=[tests.envs.env_script]",
        "actor_rollout_ref.rollout.num_engines=0",
        "actor_rollout_ref.rollout.response_length=3500",
    ]
    command = ["train", *args, *scripted, "actor_rollout_ref.actor.optim.lr=1e-3"]
    assert main([*command, f"trainer.default_local_dir={run}"]) == 0
    metrics = [r for r in metrics_rows(run) if r.get("training/iteration")]
    assert [float(r["training/iteration"]) for r in metrics] == [1.0, 2.0]
    assert all(float(r["rollout/failed_chains"]) == 0 for r in metrics)
    records = rollout_records(run)
    assert [len(r["rewards"]) for r in records] == [8, 8]
    for record in records:  # every chain played its goal's episode and bought
        assert sorted(record["rewards"]) == pytest.approx([skipped] * 4 + [1.0] * 4)
        assert sorted(r["webshop"] for r in record["returns"]) == pytest.approx(
            sorted(record["rewards"])
        )
    (validation,) = [
        json.loads(line)
        for line in next((run / "trajectories").glob("val_trajectories_iter*.jsonl"))
        .read_text()
        .splitlines()
    ]
    goal = validation["environments"]["webshop"]["goal"]
    assert goal.startswith("i ") and validation["row"]["question"].split(" [SEP] ")[2] == goal
    assert not env_processes_left()
