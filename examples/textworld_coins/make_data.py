"""Write the TextWorld example's data: coin-collector games, their walkthroughs as chats, held out.

    python examples/textworld_coins/make_data.py [--out runs/textworld_coins/data]

TextWorld's ``tw-coin_collector`` games state their route in the objective ("head west. Then
travel north. Then take the coin"); the level sets the route's length (level L: L - 1 moves, then
``take coin``). Games are generated offline by :func:`agentfly.envs.textworld.make_game`, on seeds
no other file shares:

- ``sft_train.jsonl`` / ``sft_val.jsonl``: walkthroughs of short routes (levels of ``SFT_LEVELS``:
  one to three moves) as chats in the ``action`` agent's format (:func:`walkthrough_chats`;
  ``--wrong-turns F`` puts a wrong turn and its way back before a share F of the moves);
- ``rl_train.jsonl``: games of the levels of ``RL_LEVELS``, routes of two to four moves;
- ``held_out.jsonl``: games of the same levels, for evaluation.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from agentfly.envs.textworld import TextWorldEnv, make_game, played_chat

#: the system prompt of both stages (agent.init_config.system_prompt in sft.yaml and rl.yaml)
SYSTEM = (
    "Play the text game: follow the route its goal gives, one command per turn, written as "
    "<action>go west</action> or <action>take coin</action>."
)
KIND = "tw-coin_collector"
SFT_LEVELS = (2, 3, 4)
RL_LEVELS = (3, 4, 5)
BACK = {"north": "south", "south": "north", "east": "west", "west": "east"}
#: (file, levels, first seed, games per level); seed ranges never overlap
SPLITS = (
    ("sft_train", SFT_LEVELS, 0, 20),
    ("sft_val", SFT_LEVELS, 200, 2),
    ("rl_train", RL_LEVELS, 300, 16),
    ("held_out", RL_LEVELS, 1000, 10),
)


def _game(job: tuple[str, int, int]) -> dict:
    games, level, seed = job
    return make_game(games, KIND, level, seed)


def walkthrough_chats(rows: list[dict], rng: random.Random, wrong_turns: float = 0.0) -> list[dict]:
    """Each game's walkthrough played as a chat of the ``action`` agent (system prompt, the
    game's opening, ``<action>`` turns, the game's answers as ``tool`` messages), with a wrong turn
    before a share ``wrong_turns`` of its moves: through another exit of the room and straight
    back, as a player who notices the mistake would. The chat ends with the winning ``take coin``.
    """
    env = TextWorldEnv(max_steps=None)
    try:
        return [_walkthrough_chat(env, row, rng, wrong_turns) for row in rows]
    finally:
        env.close()


def _walkthrough_chat(env: TextWorldEnv, row: dict, rng: random.Random, wrong_turns: float) -> dict:
    _, info = env.reset(row)
    commands = []
    exits = info["admissible_actions"]
    for command in info["walkthrough"]:
        others = [a for a in exits if a.startswith("go ") and a != command]
        if command.startswith("go ") and others and rng.random() < wrong_turns:
            wrong = rng.choice(others)
            commands += [wrong, "go " + BACK[wrong.split()[1]]]
        commands.append(command)
        exits = env.step(command).info["admissible_actions"] if command.startswith("go ") else []
    env.reset(row)  # from the start again: the wrong turns' rooms answer in the chat
    return {"messages": played_chat(env, row, commands, SYSTEM)["messages"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "runs" / "textworld_coins" / "data"))
    ap.add_argument("--workers", type=int, default=2, help="processes generating games")
    ap.add_argument("--games", type=int, default=None, help="games per level in every file (a short run)")
    ap.add_argument("--wrong-turns", type=float, default=0.0,
                    help="share of the walkthroughs' moves preceded by a wrong turn and the way back")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = {name: [(str(out / "games"), level, first + i) for level in levels for i in range(args.games or n)]
            for name, levels, first, n in SPLITS}
    with ProcessPoolExecutor(args.workers) as pool:
        rows = {name: list(pool.map(_game, js)) for name, js in jobs.items()}
    for name, split in rows.items():
        if name.startswith("sft"):
            split = walkthrough_chats(split, random.Random(name), args.wrong_turns)
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in split)
        print(f"{name}: {len(split)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
