"""The environments' rewards (AgentFly's names) on hand-made episode records, each expected value
derived by hand from AgentFly's formula."""

from __future__ import annotations

import pytest

from agentfly.core.trajectory import Trajectory
from agentfly.rollout.rewards import compute_reward


def played(env: str, steps: list[tuple[str, float, bool, dict]], **reset_info) -> Trajectory:
    """A chain whose ``env`` episode took ``steps`` (action, reward, terminated, info)."""
    record = {"env": env, "goal": "", "reset_info": reset_info, "over": bool(steps and steps[-1][2]), "resets": 1,
              "steps": [{"action": a, "reward": r, "terminated": t, "truncated": False, "info": i} for a, r, t, i in steps],
              "return": sum(s[1] for s in steps)}
    return Trajectory(prompt_ids=[0], environments={env: record})


def score(name: str, traj: Trajectory, **row):
    result = compute_reward(name, "", traj, row)
    assert not result.failed, result.error
    return result.reward, result.extras


def test_webshop_reward_is_the_purchase_or_nothing():
    parts = {"r_type": 1.0, "attributes_matched": 1, "options_matched": 2, "price_ok": True}
    traj = played("webshop", [("search[boots]", 0.0, False, {}), ("click[Buy Now]", 0.8, True, {"reward_parts": parts})])
    reward, extras = score("webshop_reward", traj, task_id=0)
    assert reward == 0.8 and extras["purchased"] == 1.0 and extras["attributes_matched"] == 1.0
    assert score("webshop_reward", played("webshop", [("search[boots]", 0.0, False, {})]))[0] == 0.0


def test_scienceworld_reward_is_ten_for_a_completed_task_only():
    # the best score of the episode, over 100: 0.5 then 1.0 then (a later mistake) 0.6
    done = played("scienceworld", [("a", 0.5, False, {"score": 0.5}), ("b", 0.5, False, {"score": 1.0}),
                                   ("c", -0.4, False, {"score": 0.6})])
    assert score("scienceworld_reward", done) == (10.0, {"acc": 1.0, "score": 1.0})
    half = played("scienceworld", [("a", 0.5, False, {"score": 0.5})])
    assert score("scienceworld_reward", half) == (0.0, {"acc": 0.0, "score": 0.5})
    assert score("scienceworld_reward", played("scienceworld", []))[0] == 0.0


def test_alfworld_and_textworld_rewards():
    assert score("alfworld_episode_reward", played("alfworld", [("go", 0.0, False, {"won": False}),
                                                                ("take", 1.0, True, {"won": True})]))[0] == 1.0
    assert score("alfworld_episode_reward", played("alfworld", [("go", 0.0, False, {"won": False})]))[0] == 0.0
    # 3 of 7 points
    reward, extras = score("textworld_reward", played("textworld", [("open", 1, False, {"score": 1, "won": False}),
                                                                    ("take", 2, False, {"score": 3, "won": False})],
                                                      max_score=7))
    assert reward == pytest.approx(3 / 7) and extras["won"] == 0.0


def test_textworld_progress_reward_counts_the_walkthrough_played_in_order():
    route = ["go south", "go east", "take coin"]

    def step(action: str, won: bool = False) -> tuple:
        return action, float(won), won, {"won": won}

    # south, back north, south again, then the coin where it is not: of the walkthrough only
    # "go south" was played in order (east never came), 1 of 3 -> 0.5 * 1/3
    loop = played("textworld", [step("go south"), step("go north"), step("Go  South"), step("take coin")])
    reward, extras = score("textworld_progress_reward", loop, walkthrough=route)
    assert reward == pytest.approx(1 / 6) and extras == {"won": 0.0, "progress": pytest.approx(1 / 3)}
    # east before south does not count: the order is the walkthrough's; south, east: 2 of 3
    late = played("textworld", [step("go east"), step("go south"), step("go west"), step("go east")])
    assert score("textworld_progress_reward", late, walkthrough=route)[0] == pytest.approx(1 / 3)
    won = played("textworld", [step("go south"), step("go east"), step("take coin", won=True)])
    assert score("textworld_progress_reward", won, walkthrough=route) == (1.0, {"won": 1.0, "progress": 1.0})
    assert score("textworld_progress_reward", played("textworld", []), walkthrough=route)[0] == 0.0
    failed = compute_reward("textworld_progress_reward", "", loop, {})
    assert failed.failed and "walkthrough" in failed.error


def test_textworld_progress_reward_gives_each_turn_the_share_its_step_earned():
    from agentfly.core.trajectory import ToolCallRecord

    route = ["go south", "go east", "take coin"]

    def chain(turns: list[list[str]], taken: list[str], won: bool) -> Trajectory:
        """``turns``: each turn's textworld_step actions; ``taken``: the actions the game took."""
        traj = played("textworld", [(a, float(won and k == len(taken) - 1), won and k == len(taken) - 1,
                                     {"won": won and k == len(taken) - 1}) for k, a in enumerate(taken)])
        traj.num_turns = len(turns)
        traj.tool_calls = [ToolCallRecord("textworld_step", {"action": a}, "", True, None, t)
                           for t, actions in enumerate(turns) for a in actions]
        return traj

    # turn 0: south (1/3 of the route: 0.5/3), turn 1: west (nothing), turn 2: east (0.5/3),
    # turn 3: a malformed call the game never took, then the coin, which won: the rest up to 1.0
    won = chain([["go south"], ["go west"], ["go east"], ["take coin"]],
                ["go south", "go west", "go east", "take coin"], won=True)
    won.tool_calls.insert(3, ToolCallRecord("textworld_step", "{not json", "", False, "invalid_arguments", 3))
    result = compute_reward("textworld_progress_reward", "", won, {"walkthrough": route})
    assert result.reward == 1.0
    assert result.turn_rewards == pytest.approx([1 / 6, 0.0, 1 / 6, 2 / 3])
    # lost: south twice (the second is not the route's next command) and east in one turn: 2 of 3
    # played in order, 0.5 * 2/3, all of it earned by turns 0 and 1, none by the last turn
    lost = chain([["go south"], ["go south", "go east"], ["look"]], ["go south", "go south", "go east", "look"],
                 won=False)
    result = compute_reward("textworld_progress_reward", "", lost, {"walkthrough": route})
    assert result.reward == pytest.approx(1 / 3)
    assert result.turn_rewards == pytest.approx([1 / 6, 1 / 6, 0.0])
    assert sum(result.turn_rewards) == pytest.approx(result.reward)


def test_chess_puzzle_reward_weighs_solving_and_move_quality():
    # a solution of 4 moves: the opponent's setup move, then player, opponent, player
    moves = "e2e4 e7e5 g1f3 b8c6"
    correct = ("e7e5", 0.0, False, {"solved": False, "best_move": "e7e5", "cp_loss": 0})
    # solved, both moves Stockfish's best: 0.6 * 1 + 0.4 * 100 / 100 = 1.0
    solved = played("chess_puzzle", [correct, ("b8c6", 1.0, True, {"solved": True, "best_move": "b8c6", "cp_loss": 0})])
    assert score("chess_puzzle_reward", solved, moves=moves)[0] == pytest.approx(1.0)
    # one correct move (and its reply: 2 plies of the 3 after the setup), then a move losing 150
    # centipawns: solve 0.5 * 2 / 3 = 1/3; quality (100 + (100 - 150 / 3)) / 2 = 75
    wrong = ("a7a6", 0.0, True, {"solved": False, "best_move": "b8c6", "cp_loss": 150})
    query = ("get_state", 0.0, False, {"fen": "..."})  # not a move
    reward, extras = score("chess_puzzle_reward", played("chess_puzzle", [query, correct, wrong]), moves=moves)
    assert reward == pytest.approx(0.6 / 3 + 0.4 * 0.75)
    assert extras == {"is_solved": 0.0, "moves_made": 2.0, "best_move_matches": 1.0, "centipawn_score": 75.0}
    # a one-move puzzle missed by a move losing 600 centipawns (quality 0): nothing
    blunder = ("d2d4", 0.0, True, {"solved": False, "best_move": "e2e4", "cp_loss": 600})
    assert score("chess_puzzle_reward", played("chess_puzzle", [blunder]), moves="e2e4")[0] == 0.0
    # no move made: quality 50 -> 0.4 * 0.5
    assert score("chess_puzzle_reward", played("chess_puzzle", [query]), moves=moves)[0] == pytest.approx(0.2)
    assert score("chess_puzzle_reward_simple", solved)[0] == 1.0
    assert score("chess_puzzle_reward_simple", played("chess_puzzle", [correct, wrong]))[0] == 0.0


def test_a_chain_without_the_environment_fails_the_reward_naming_the_tool():
    result = compute_reward("webshop_reward", "", Trajectory(prompt_ids=[0]), {})
    assert result.failed and "needs webshop_browser_action or webshop_browser" in result.error
