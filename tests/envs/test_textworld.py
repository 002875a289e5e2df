"""TextWorld: a generated game's winning commands score its full score; other commands less;
datasets keep train and held-out seeds apart."""

from __future__ import annotations

import json

import pytest

from agentfly.envs import EnvUsageError
from agentfly.envs import textworld as tw
from agentfly.envs.process import ProcessEnv


def play(env, task, actions):
    _, info = env.reset(task)
    results = [env.step(a) for a in actions]
    return info, results


def test_the_walkthrough_wins_with_the_full_score(textworld_game):
    with ProcessEnv.named("textworld", {"max_steps": 50}) as env:
        _, info = env.reset(textworld_game)
        assert info["goal"] == textworld_game["objective"] and info["max_score"] == textworld_game["max_score"] > 0
        # the row's question is the opening text without the banner: the objective, then the room
        assert textworld_game["question"].startswith(info["goal"]) and "$$" not in textworld_game["question"]
        assert "\n\n-= Bedroom =-\nYou are in a bedroom." in textworld_game["question"]
        assert set(info["walkthrough"][:1]) <= set(info["admissible_actions"])
        assert textworld_game["walkthrough"] == info["walkthrough"]  # the row carries it too
        results = [env.step(a) for a in info["walkthrough"]]
    assert sum(r.reward for r in results) == textworld_game["max_score"]
    assert results[-1].terminated and results[-1].info["won"]
    assert not any(r.terminated for r in results[:-1])


def test_commands_that_skip_the_last_step_score_less_and_do_not_win(textworld_game):
    env = tw.TextWorldEnv(max_steps=10)
    try:
        _, info = env.reset(textworld_game)
        actions = info["walkthrough"][:-1] + ["look"] * 3
        results = [env.step(a) for a in actions]
        assert sum(r.reward for r in results) < textworld_game["max_score"]
        assert not any(r.info["won"] for r in results)
        # max_steps cuts the episode: 7 + 3 = 10 steps
        assert results[-1].truncated and not results[-1].terminated
        # a second episode of the same game starts again from no score
        env.reset(textworld_game)
        assert env.step(info["walkthrough"][0]).reward == 1
    finally:
        env.close()


def textworld_states(game_file: str, commands: list[str]) -> list:
    """TextWorld's own states of the game (its API, not agentfly's env): at the start, then after
    each of ``commands``."""
    import textworld

    infos = textworld.EnvInfos(admissible_commands=True, policy_commands=True, score=True, max_score=True, won=True)
    game = textworld.start(game_file, request_infos=infos)
    try:
        return [game.reset()] + [game.step(c)[0] for c in commands]
    finally:
        game.close()


def test_the_env_reports_textworlds_own_commands_and_score_after_every_step(textworld_game):
    walkthrough = textworld_game["walkthrough"]
    states = textworld_states(textworld_game["game_file"], walkthrough)
    env = tw.TextWorldEnv(max_steps=None)
    try:
        _, start = env.reset(textworld_game)
        infos = [start] + [env.step(c).info for c in walkthrough]
        # the key lies in the drawer, closed at the start (the opening says so): not takeable yet
        assert walkthrough[1] == "take old key from chest drawer" and walkthrough[1] not in start["admissible_actions"]
        # at the start and after each step, what TextWorld itself says of the same game
        assert [sorted(i["admissible_actions"]) for i in infos] == [sorted(s["admissible_commands"]) for s in states]
        assert [(i["score"], i["won"]) for i in infos] == [(s["score"], s["won"]) for s in states]
        assert all(c in i["admissible_actions"] for c, i in zip(walkthrough, infos, strict=False))
        assert infos[-1]["won"] and infos[-1]["score"] == start["max_score"] == states[0]["max_score"]
        assert start["walkthrough"] == walkthrough == states[0]["policy_commands"]
        # a second episode of the game starts again from the start's commands
        assert env.reset(textworld_game)[1]["admissible_actions"] == start["admissible_actions"]
    finally:
        env.close()


def test_a_walkthrough_becomes_a_chat_in_the_action_agents_format(textworld_game):
    (chat,) = tw.walkthrough_conversations([textworld_game])
    messages = chat["messages"]
    actions = [m["content"] for m in messages if m["role"] == "assistant"]
    commands = [a.removeprefix("<action>").removesuffix("</action>") for a in actions]
    assert actions == [f"<action>{c}</action>" for c in commands]
    states = textworld_states(textworld_game["game_file"], commands)
    # the chat plays TextWorld's own winning commands of the game (the eight steps its objective
    # states), each admissible where it is played, the last one winning with the full score
    assert commands == states[0]["policy_commands"] and len(commands) == 8
    assert all(c in s["admissible_commands"] for c, s in zip(commands, states, strict=False))
    assert states[-1]["won"] and not any(s["won"] for s in states[:-1])
    assert chat["score"] == chat["max_score"] == states[-1]["score"] == states[0]["max_score"]
    assert [m["role"] for m in messages[:2]] == ["system", "user"] and messages[1]["content"] == textworld_game["question"]
    # each action but the winning last one is answered by the game's own text, as a tool message
    assert [m["role"] for m in messages[2:]] == ["assistant", "tool"] * 7 + ["assistant"]
    assert [m["content"] for m in messages if m["role"] == "tool"] == [s.feedback for s in states[1:-1]]


def play_walkthrough(textworld_game, tiny_model_dir, reward):
    """The game's walkthrough played through the agent loop by the action agent (scripted turns,
    the textworld_step tool), scored by ``reward``: (its chat, the loop, the chain)."""
    from agentfly.rollout.agent_loop import AgentLoop
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools import get_tool
    from tests.envs.env_script import EnvScript  # noqa: F401  (registers env_script)

    (chat,) = tw.walkthrough_conversations([textworld_game])
    actions = [m["content"] for m in chat["messages"] if m["role"] == "assistant"]
    pool = EnginePool("env_script", 0, engine_kwargs={"model": str(tiny_model_dir),
                                                      "scripts": {textworld_game["question"]: [actions]}})
    agent = get_agent("action", [get_tool("textworld_step")], system_prompt=tw.SYSTEM_PROMPT)
    loop = AgentLoop(engine=pool, tokenizer=pool.tokenizer, template=get_template("action-agent"), agent=agent,
                     reward=reward, max_turns=10, max_model_len=4096)
    (chain,) = loop.run([textworld_game])
    return chat, loop, chain


def test_a_walkthrough_chat_is_the_chain_the_action_agent_plays(textworld_game, tiny_model_dir):
    """``agentfly sft`` lays the chat out token for token as the agent loop plays the same actions
    with the textworld_step tool: the actions trained on, the game's answers not."""
    from agentfly.sft.conversations import ConversationRenderer

    chat, loop, chain = play_walkthrough(textworld_game, tiny_model_dir, "textworld_reward")
    assert chain.reward == 1.0 and chain.finish_reason == "episode_over"
    example = ConversationRenderer(loop.agent, loop.template, loop.tokenizer).render(chat["messages"])
    assert example.prompt_ids == chain.prompt_ids and example.response_ids == chain.response_ids
    assert example.loss_mask == chain.loss_mask and 0 in chain.loss_mask


def test_a_task_without_a_game_file_is_refused():
    pytest.importorskip("textworld")
    env = tw.TextWorldEnv()
    with pytest.raises(EnvUsageError, match="needs a 'game_file'"):
        env.reset({"question": "?"})
    with pytest.raises(EnvUsageError, match="no game file at"):
        env.reset({"game_file": "/nonexistent.z8"})


def test_train_and_heldout_games_never_share_a_seed(tmp_path):
    with pytest.raises(ValueError, match=r"must not share a seed; both have \[3, 4\]"):
        tw.make_dataset(tmp_path, "tw-simple", 1, train_seeds=range(5), heldout_seeds=[3, 4, 9])


def test_make_dataset_writes_one_row_per_seed_in_each_split(tmp_path, monkeypatch):
    made = []

    def fake_make_game(out_dir, kind, difficulty, seed):
        made.append(seed)
        return {"question": f"game {seed}", "game_file": f"{out_dir}/{seed}.z8", "seed": seed}

    monkeypatch.setattr(tw, "make_game", fake_make_game)
    tw.make_dataset(tmp_path, "tw-coin_collector", 5, train_seeds=[0, 1], heldout_seeds=[100])
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    heldout = [json.loads(line) for line in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in train] == [0, 1] and [r["seed"] for r in heldout] == [100]
    assert made == [0, 1, 100]


@pytest.mark.parametrize(("kind", "difficulty"), [("tw-simple", 4), ("tw-treasure_hunter", 31), ("tw-cooking", 1)])
def test_unknown_kinds_and_difficulties_are_refused(kind, difficulty):
    with pytest.raises(ValueError, match=r"unknown TextWorld game kind|difficulty must be within"):
        tw._settings(kind, difficulty)


def test_seed_ranges_parse():
    assert tw._seeds("0-2,7") == [0, 1, 2, 7]


@pytest.mark.parametrize("reward", ["textworld_progress_reward", "textworld_reward"])
def test_a_won_chains_token_rewards_add_up_to_its_reward_with_turn_rewards(textworld_game, tiny_model_dir, reward):
    """A won game played through the agent loop: the game's dense step rewards ride on its tool
    calls, ``textworld_progress_reward`` splits its reward over the turns as well. With
    ``use_turn_rewards`` (``decompose``, the default) the row's token rewards still add up to the
    reward, once; ``add`` puts the turn rewards beside it."""
    from agentfly.callbacks import TurnRewardCallback
    from agentfly.rollout.collate import collate_trajectories

    _, _, chain = play_walkthrough(textworld_game, tiny_model_dir, reward)
    assert chain.reward == 1.0 and chain.reward_extras["won"] == 1.0
    assert sum(1 for r in chain.turn_rewards if r > 0) >= 2  # rewards on several turns, not only the last
    if reward == "textworld_progress_reward":  # its turn shares replace the game's step rewards
        assert sum(chain.turn_rewards) == pytest.approx(1.0)
    batch = collate_trajectories([chain], pad_id=0)
    TurnRewardCallback().on_rollout_batch(None, None, batch)
    assert batch.token_level_rewards.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert batch.token_level_rewards.sum().item() == pytest.approx(batch.token_level_scores.sum().item(), abs=1e-6)
    added = collate_trajectories([chain], pad_id=0)
    TurnRewardCallback(mode="add").on_rollout_batch(None, None, added)
    assert added.token_level_rewards.sum().item() == pytest.approx(1.0 + sum(chain.turn_rewards), abs=1e-6)
