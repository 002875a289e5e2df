"""The environments' rewards, AgentFly's names: ``webshop_reward``, ``scienceworld_reward``,
``alfworld_episode_reward``, ``chess_puzzle_reward``, ``chess_puzzle_reward_simple``; and
``textworld_reward`` and ``textworld_progress_reward`` (AgentFly has no TextWorld).

Each scores the episode the chain played (``trajectory.environments[<environment>]``, recorded
by :meth:`agentfly.rollout.tools.environment.EnvSession.record`: every step's action, reward,
end flags and info) instead of asking the live environment afterwards as AgentFly's do. A chain
without that environment's episode (its tools not in ``agent.init_config.tools``) is a failed
reward call, whose message says so.
"""

from __future__ import annotations

from typing import Any

from agentfly.rollout.rewards.base import reward


def episode(trajectory: Any, environment: str, reward_name: str, tools: str) -> dict[str, Any]:
    """The chain's episode of ``environment``; raises naming the tools that play it."""
    found = getattr(trajectory, "environments", {}).get(environment)
    if found is None:
        raise ValueError(
            f"{reward_name} scores a {environment} episode and this chain played none: "
            f"agent.init_config.tools needs {tools}"
        )
    return found


@reward(name="webshop_reward", runs_in="thread")
def webshop_reward(trajectory: Any) -> dict[str, Any]:
    """WebShop's reward of the purchase (Yao et al., 2022), 0 without one; its parts as extras."""
    steps = episode(trajectory, "webshop", "webshop_reward", "webshop_browser_action or webshop_browser")["steps"]
    bought = next((s for s in steps if "reward_parts" in s["info"]), None)
    if bought is None:
        return {"reward": 0.0, "purchased": 0.0}
    parts = bought["info"]["reward_parts"]
    return {"reward": bought["reward"], "purchased": 1.0, **{k: float(v) for k, v in parts.items()}}


@reward(name="scienceworld_reward", runs_in="thread")
def scienceworld_reward(trajectory: Any) -> dict[str, Any]:
    """AgentFly's: ``acc`` is 1 when the task's best score of the episode reaches 100, and the
    reward is ``10 * acc``; ``score`` is that best score over 100 (0 with no step taken)."""
    steps = episode(trajectory, "scienceworld", "scienceworld_reward", "scienceworld_explorer")["steps"]
    score = max((s["info"].get("score", 0.0) for s in steps), default=0.0)
    acc = 1.0 if score >= 1.0 else 0.0
    return {"reward": 10.0 * acc, "acc": acc, "score": float(score)}


@reward(name="alfworld_episode_reward", runs_in="thread")
def alfworld_episode_reward(trajectory: Any) -> dict[str, Any]:
    """1.0 when the episode's game was won, else 0."""
    steps = episode(trajectory, "alfworld", "alfworld_episode_reward", "alfworld_step")["steps"]
    return {"reward": 1.0 if steps and steps[-1]["info"].get("won") else 0.0}


@reward(name="textworld_reward", runs_in="thread")
def textworld_reward(trajectory: Any) -> dict[str, Any]:
    """The game's final score over its ``max_score`` (1.0 for a won game); ``won`` as an extra."""
    played = episode(trajectory, "textworld", "textworld_reward", "textworld_step")
    steps, max_score = played["steps"], played["reset_info"].get("max_score") or 0
    won = bool(steps and steps[-1]["info"].get("won"))
    score = steps[-1]["info"].get("score", 0) if steps else 0
    return {"reward": score / max_score if max_score > 0 else float(won), "won": float(won), "score": float(score)}


@reward(name="textworld_progress_reward", runs_in="thread")
def textworld_progress_reward(trajectory: Any, walkthrough: list[str] | None = None) -> dict[str, Any]:
    """1.0 for a game won; else half the share of the row's ``walkthrough`` (the commands of a
    winning play, which :func:`agentfly.envs.textworld.make_game` puts in the row) that the chain
    played in order, so a chain that got further along the way scores more than one that did not.
    Extras: ``won`` and ``progress`` (that share; 1.0 for a game won).

    ``turn_rewards`` spread that reward over the turns that earned it (they add up to it): a turn
    whose step played the walkthrough's next command gets ``0.5 / len(walkthrough)``, the turn
    that won the rest up to 1.0; they enter training with ``algorithm.use_turn_rewards``."""
    if not walkthrough:
        raise ValueError("textworld_progress_reward needs the row's walkthrough (make_game writes it)")
    steps = episode(trajectory, "textworld", "textworld_progress_reward", "textworld_step")["steps"]
    earned = [0.0] * len(steps)  # each step's share of the reward
    done = 0
    for k, step in enumerate(steps):  # the walkthrough's longest prefix played as a subsequence of the actions
        if done < len(walkthrough) and _command(step["action"]) == _command(walkthrough[done]):
            done += 1
            earned[k] = 0.5 / len(walkthrough)
    won = bool(steps and steps[-1]["info"].get("won"))
    if won:
        earned[-1] += 1.0 - sum(earned)
    result = {"reward": 1.0, "won": 1.0, "progress": 1.0} if won else \
        {"reward": 0.5 * done / len(walkthrough), "won": 0.0, "progress": done / len(walkthrough)}
    if trajectory.num_turns:
        turn_rewards = [0.0] * trajectory.num_turns
        for turn, share in zip(_step_turns(trajectory, "textworld_step", steps), earned, strict=True):
            turn_rewards[turn] += share
        result["turn_rewards"] = turn_rewards
    return result


def _step_turns(trajectory: Any, tool: str, steps: list[dict[str, Any]]) -> list[int]:
    """The assistant turn of each step of an episode: that of the ``tool`` call that played its
    action, matched in order (a call the environment did not take, a malformed one, is skipped);
    the chain's last turn for a step no call matches."""
    calls = [c for c in trajectory.tool_calls if c.name == tool and isinstance(c.arguments, dict)]
    last, turns, i = max(trajectory.num_turns - 1, 0), [], 0
    for step in steps:
        while i < len(calls) and _command(calls[i].arguments.get("action", "")) != _command(step["action"]):
            i += 1
        turns.append(min(calls[i].turn, last) if i < len(calls) else last)
        i += 1
    return turns


def _command(text: str) -> str:
    return " ".join(str(text).lower().split())


def _chess_moves(trajectory: Any, reward_name: str) -> tuple[list[dict[str, Any]], bool]:
    """The player's moves the puzzle took (legal ones: queries and refused moves left out), and
    whether it was solved."""
    steps = episode(trajectory, "chess_puzzle", reward_name, "chess_move")["steps"]
    moves = [s for s in steps if "solved" in s["info"]]
    return moves, bool(moves and moves[-1]["info"]["solved"])


@reward(name="chess_puzzle_reward", runs_in="thread")
def chess_puzzle_reward(trajectory: Any, moves: str | list[str] = "") -> dict[str, Any]:
    """AgentFly's dense puzzle reward: ``0.6 * solve + 0.4 * quality / 100``.

    ``solve`` is 1.0 for a solved puzzle; else, for a solution of n > 1 moves (the opponent's
    setup move first), 0.5 * (plies of the solution played after the setup) / (n - 1): the
    player's correct moves and the replies that followed each, ``2 * found / (n - 1) * 0.5``;
    0 for a one-move puzzle. ``quality`` averages each move's: 100 for Stockfish's best move, else
    ``100 - centipawns lost / 3`` within [0, 100]; 0 for a move nothing judged (no engine), as
    AgentFly's average does; 50 with no move made.

    Departure: AgentFly judges every move on the final board (a bug); each move here is judged
    on the board it was played on.
    """
    played, solved = _chess_moves(trajectory, "chess_puzzle_reward")
    solution = moves.split() if isinstance(moves, str) else list(moves)
    # a move off the solution ends the puzzle unsolved: every other move played was correct
    found = sum(1 for m in played if not (m["terminated"] and not m["info"]["solved"]))
    if solved:
        solve = 1.0
    elif len(solution) > 1:
        solve = 0.5 * 2 * found / (len(solution) - 1)
    else:
        solve = 0.0
    qualities = [_move_quality(m["info"]) for m in played]
    quality = sum(qualities) / len(qualities) if qualities else 50.0
    best = sum(1 for m in played if m["info"].get("cp_loss") == 0 and "best_move" in m["info"])
    return {"reward": 0.6 * solve + 0.4 * quality / 100, "is_solved": float(solved),
            "moves_made": float(len(played)), "best_move_matches": float(best), "centipawn_score": quality}


def _move_quality(info: dict[str, Any]) -> float:
    if info.get("cp_loss") is None:
        return 0.0
    return 100.0 if info["cp_loss"] == 0 else min(100.0, max(0.0, 100.0 - info["cp_loss"] / 3))


@reward(name="chess_puzzle_reward_simple", runs_in="thread")
def chess_puzzle_reward_simple(trajectory: Any) -> dict[str, Any]:
    """1.0 for a solved puzzle, else 0."""
    _, solved = _chess_moves(trajectory, "chess_puzzle_reward_simple")
    return {"reward": 1.0 if solved else 0.0, "is_solved": float(solved)}
