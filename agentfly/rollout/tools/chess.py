"""Chess puzzle tools, AgentFly's names: ``chess_move``, ``chess_get_state``, ``chess_get_legal_moves``.

The three act on the chain's one ``chess_puzzle`` environment (:mod:`agentfly.envs.chess`,
Stockfish in the environment's process group), reset with the chain's row (``fen``, ``moves``,
``puzzle_id``). A wrong move ends the puzzle (and the chain) unsolved, as Lichess scores it
(AgentFly's puzzle goes on); ``chess_puzzle_reward`` and ``chess_puzzle_reward_simple`` score it.
The two queries count toward ``max_steps`` as the moves do.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from agentfly.rollout.tools.base import ToolResult
from agentfly.rollout.tools.environment import EnvSettings, act, env_tool


@dataclasses.dataclass(frozen=True)
class ChessSettings(EnvSettings):
    """The ``chess_puzzle`` environment's settings.

    Attributes:
        stockfish_path: the Stockfish binary (None: found on PATH or in the usual places).
        use_engine: judge moves with Stockfish (``chess_puzzle_reward``'s move quality).
        analysis_time: seconds of Stockfish analysis per position.
    """

    max_steps: int | None = 20
    stockfish_path: str | None = None
    use_engine: bool = True
    analysis_time: float = 0.05

    def environment_problem(self) -> str | None:
        if importlib.util.find_spec("chess") is None:
            return "the chess_puzzle environment needs python-chess: pip install 'agentfly[envs]'"
        if self.use_engine:
            from agentfly.envs.chess import find_stockfish

            if (self.stockfish_path or find_stockfish()) is None:
                return ("the chess_puzzle environment judges moves with Stockfish and found none "
                        "(Debian: apt-get install stockfish); or set use_engine=false")
        return None


def _chess_tool(name: str, description: str):
    return env_tool(name=name, environment="chess_puzzle", settings=ChessSettings,
                    description=description, max_resources=16)


@_chess_tool("chess_move", "Make a chess move in the current puzzle. The move can be in UCI format "
             "(e.g., 'e2e4', 'g1f3', 'e7e8q' for promotion) or standard algebraic notation (e.g., "
             "'e4', 'Nf3', 'O-O' for castling, 'Qxf7#' for checkmate). Returns whether the move was "
             "correct and the new board state.")
def chess_move(move: str, resource) -> ToolResult:
    """Make a move in the puzzle.

    Args:
        move: the move, in UCI (``e2e4``) or SAN (``Nf3``).
    """
    return act(resource, move)


@_chess_tool("chess_get_state", "Get the current chess board state including FEN notation, visual "
             "board representation and whose turn it is. Use this to understand the current "
             "position before making a move.")
def chess_get_state(resource) -> ToolResult:
    """The board, its FEN and whose turn it is."""
    return act(resource, "get_state")


@_chess_tool("chess_get_legal_moves", "Get all legal moves in the current position. Each move is "
             "shown in both UCI format (e.g., 'e2e4') and standard algebraic notation (e.g., "
             "'e4'). Use this when you need to know what moves are available.")
def chess_get_legal_moves(resource) -> ToolResult:
    """The legal moves, ``uci (san)``, sorted."""
    result = act(resource, "get_legal_moves")
    if result.ok and not result.observation:
        result.observation = "No legal moves"
    return result
