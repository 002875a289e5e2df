"""Chess puzzles: find the solution's moves (python-chess for the rules, Stockfish to judge moves).

A task row is a puzzle: ``fen`` (the position) and ``moves`` (the solution, UCI, space-separated),
as in Lichess's puzzle database, optionally ``puzzle_id``. As in AgentFly, when the solution has
more than one move its first move is the opponent's (played at ``reset``); the player then plays
every other move and the opponent's replies are played for them.

Actions: a move in UCI (``h5f7``) or SAN (``Qxf7#``), ``get_state`` (the board again) or
``get_legal_moves`` (``uci (san)`` pairs); the two queries do not count as moves. A solution move
is accepted, as is any move that mates when the solution's move mates (Lichess's rule). A legal
move off the solution ends the episode unsolved; an illegal or unreadable move changes nothing.

Reward: 1.0 on the step that solves the puzzle, 0 otherwise. Each move's info has ``progress``
(player moves found / player moves of the solution) and, with Stockfish, the engine's
``best_move`` before the move and the move's ``cp_loss`` (centipawns lost against it, 0 for the
best move), for AgentFly's move-quality reward.

:func:`puzzle_rows` makes task rows (``question``: the goal and the board after the setup move)
from Lichess's puzzle database (its CSV: ``PuzzleId,FEN,Moves,...``) or from a few built-in
mate-in-one puzzles::

    python -m agentfly.envs.chess make-data --out data/chess/puzzles.json \
        [--csv lichess_db_puzzle.csv --limit 1000]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentfly.envs.base import Env, EnvUnavailable, EnvUsageError, StepResult, register_env, require

STOCKFISH_PATHS = ("/usr/games/stockfish", "/usr/bin/stockfish", "/usr/local/bin/stockfish",
                   "/opt/homebrew/bin/stockfish")
MATE_SCORE = 10000

DEMO_PUZZLES = [
    {"puzzle_id": "backrank", "fen": "r5k1/5ppp/8/8/8/8/5PPP/3R2K1 b - - 0 1", "moves": "a8a2 d1d8"},
    {"puzzle_id": "scholar", "fen": "r1bqkbnr/pppp1ppp/2n5/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR b KQkq - 3 3",
     "moves": "g8f6 h5f7"},
    {"puzzle_id": "fool", "fen": "rnbqkbnr/pppp1ppp/8/4p3/8/5P2/PPPPP1PP/RNBQKBNR w KQkq - 0 2",
     "moves": "g2g4 d8h4"},
]
"""Mate-in-one puzzles in Lichess's form (the opponent's setup move first), each with one mate."""


def find_stockfish() -> str | None:
    """The Stockfish binary on PATH or in a usual place, or None."""
    found = shutil.which("stockfish")
    return found or next((p for p in STOCKFISH_PATHS if Path(p).is_file()), None)


def _import_chess() -> Any:
    try:
        import chess
        import chess.engine
    except ImportError as e:
        raise EnvUnavailable(
            f"the chess_puzzle environment needs python-chess ({e}); install agentfly's envs "
            "extra: pip install 'agentfly[envs]'"
        ) from e
    return chess


@register_env("chess_puzzle")
class ChessPuzzleEnv(Env):
    """One puzzle per episode.

    Args:
        stockfish_path: the Stockfish binary (None: :func:`find_stockfish`).
        use_engine: judge moves with Stockfish (False: no engine, no ``best_move``/``cp_loss``).
        analysis_time: seconds of Stockfish analysis per position.
        max_steps: steps (queries included) after which the episode is truncated.
    """

    def __init__(self, stockfish_path: str | None = None, use_engine: bool = True,
                 analysis_time: float = 0.05, max_steps: int | None = 20) -> None:
        super().__init__(max_steps=max_steps)
        self._chess = _import_chess()
        self.analysis_time = analysis_time
        self._engine: Any = None
        if use_engine:
            path = stockfish_path or find_stockfish()
            if path is None or not Path(path).is_file():
                raise EnvUnavailable(
                    f"the chess_puzzle environment needs Stockfish and found none ({path or 'not on PATH'}); "
                    "install it (Debian: apt-get install stockfish, or bash scripts/install_system_packages.sh) "
                    "or pass use_engine=False"
                )
            self._engine = self._chess.engine.SimpleEngine.popen_uci(path)
        self.board: Any = None
        self.solution: list[str] = []
        self.index = 0  # the next solution move

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        chess = self._chess
        try:
            self.board = chess.Board(str(require(task, "fen", self.name)))
        except ValueError as e:
            raise EnvUsageError(f"chess_puzzle: bad FEN {task['fen']!r}: {e}") from e
        moves = require(task, "moves", self.name)
        self.solution = moves.split() if isinstance(moves, str) else list(moves)
        if not self.solution:
            raise EnvUsageError("chess_puzzle: the puzzle's 'moves' is empty")
        self.index = 0
        if len(self.solution) > 1:
            self._push_solution_move()
        side = "White" if self.board.turn else "Black"
        goal = f"Find the best move for {side} (puzzle {task.get('puzzle_id', '?')})."
        return self._state(), {"goal": goal, "admissible_actions": self._legal(), "walkthrough": self.solution[self.index::2],
                               "fen": self.board.fen()}

    def _push_solution_move(self) -> str:
        move = self._chess.Move.from_uci(self.solution[self.index])
        if move not in self.board.legal_moves:
            raise EnvUsageError(f"chess_puzzle: solution move {self.solution[self.index]} is illegal in {self.board.fen()}")
        san = self.board.san(move)
        self.board.push(move)
        self.index += 1
        return san

    def _step(self, action: str) -> StepResult:
        text = action.strip()
        if text.lower() == "get_state":
            return StepResult(self._state(), info=self._info())
        if text.lower() == "get_legal_moves":
            return StepResult(", ".join(self._legal()), info=self._info())
        move = self._parse(text)
        if move is None or move not in self.board.legal_moves:
            kind = "Invalid move format" if move is None else "Illegal move"
            return StepResult(f"{kind}: {text!r}. Legal moves: {', '.join(self._legal())}",
                              info={**self._info(), "invalid": True})
        judged = self._judge(move)
        expected = self._chess.Move.from_uci(self.solution[self.index])
        san = self.board.san(move)
        self.board.push(move)
        correct = move == expected or (self.board.is_checkmate() and self._mates(expected))
        if not correct:
            return StepResult(f"{san} is not the solution; the puzzle is failed.\n\n{self._state()}",
                              terminated=True, info={**self._info(), **judged, "solved": False})
        self.index += 1
        lines = [f"Correct! {san}"]
        if self.index < len(self.solution):
            lines.append(f"Opponent played: {self._push_solution_move()}")
        solved = self.index >= len(self.solution) or self.board.is_checkmate()
        lines.append("Puzzle solved!" if solved else "Your move.")
        return StepResult("\n".join(lines) + f"\n\n{self._state()}", 1.0 if solved else 0.0, terminated=solved,
                          info={**self._info(), **judged, "solved": solved})

    def _mates(self, move: Any) -> bool:
        board = self.board.copy()
        board.pop()
        board.push(move)
        return board.is_checkmate()

    def _parse(self, text: str) -> Any:
        try:
            return self._chess.Move.from_uci(text.lower())
        except ValueError:
            pass
        try:
            return self.board.parse_san(text)
        except ValueError:
            return None

    def _judge(self, move: Any) -> dict[str, Any]:
        """Stockfish's best move here and the centipawns ``move`` loses against it."""
        if self._engine is None:
            return {}
        limit = self._chess.engine.Limit(time=self.analysis_time)
        mover = self.board.turn
        best = self._engine.analyse(self.board, limit)
        best_cp = best["score"].pov(mover).score(mate_score=MATE_SCORE)
        best_move = best["pv"][0] if best.get("pv") else None
        if move == best_move:
            return {"best_move": move.uci(), "cp_loss": 0}
        after = self._engine.analyse(self.board, limit, root_moves=[move])
        cp = after["score"].pov(mover).score(mate_score=MATE_SCORE)
        return {"best_move": best_move.uci() if best_move else None, "cp_loss": max(0, best_cp - cp)}

    def _player_moves(self) -> int:
        return len(self.solution) // 2 if len(self.solution) > 1 else 1

    def _info(self) -> dict[str, Any]:
        found = self.index // 2 if len(self.solution) > 1 else self.index
        return {"fen": self.board.fen(), "progress": found / self._player_moves(),
                "admissible_actions": self._legal()}

    def _legal(self) -> list[str]:
        return sorted(f"{m.uci()} ({self.board.san(m)})" for m in self.board.legal_moves)

    def _state(self) -> str:
        board = self.board
        lines = [f"FEN: {board.fen()}", "", str(board), "", f"Turn: {'White' if board.turn else 'Black'}"]
        if board.is_checkmate():
            lines.append("Status: CHECKMATE")
        elif board.is_check():
            lines.append("Status: CHECK")
        return "\n".join(lines)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.quit()
            self._engine = None


def puzzle_rows(puzzles: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Task rows of ``puzzles`` (``puzzle_id``, ``fen``, ``moves``): the ``question`` is the
    goal, then the board the player sees (after the setup move)."""
    env = ChessPuzzleEnv(use_engine=False)
    rows = []
    for puzzle in puzzles:
        state, info = env.reset(puzzle)
        rows.append({**puzzle, "question": f"{info['goal']}\n\n{state}"})
    return rows


def read_lichess_csv(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` puzzles of Lichess's puzzle database CSV (``PuzzleId``, ``FEN``,
    ``Moves``, ``Rating``, ``Themes`` kept)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{"puzzle_id": r["PuzzleId"], "fen": r["FEN"], "moves": r["Moves"],
                 "rating": int(r.get("Rating") or 0), "themes": r.get("Themes", "")}
                for r in itertools.islice(csv.DictReader(f), limit)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Chess puzzle task rows.")
    commands = parser.add_subparsers(dest="command", required=True)
    rows = commands.add_parser("make-data", help="rows from Lichess's CSV, or the built-in puzzles")
    rows.add_argument("--out", required=True, help="a JSON file")
    rows.add_argument("--csv", default=None, help="Lichess's lichess_db_puzzle.csv (default: the built-in puzzles)")
    rows.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    puzzles = read_lichess_csv(args.csv, args.limit) if args.csv else DEMO_PUZZLES[: args.limit]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(puzzle_rows(puzzles), indent=1))
    print(f"{len(puzzles)} puzzles in {out}")


if __name__ == "__main__":
    main()
