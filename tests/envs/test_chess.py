"""Chess puzzles: the solution's moves solve the puzzle (reward 1.0), a wrong move ends it
unsolved (0); Stockfish judges each move; the engine process dies with the environment."""

from __future__ import annotations

import psutil
import pytest

from agentfly.envs import EnvUsageError
from agentfly.envs.process import ProcessEnv
from tests.envs.conftest import requires_stockfish, wait_gone

pytest.importorskip("chess", reason="needs python-chess (pip install 'agentfly[envs]')")

# Lichess style: the first move is the opponent's, then the player's moves and the replies.
BACK_RANK = {"puzzle_id": "back_rank", "fen": "6k1/5ppp/8/8/8/8/5PPP/3R2K1 b - - 0 1", "moves": "g8h8 d1d8"}
DOUBLE_ROOKS = {"puzzle_id": "rooks", "fen": "r5k1/1p3ppp/8/8/8/8/4RPPP/4R1K1 b - - 0 1",
                "moves": "b7b6 e2e8 a8e8 e1e8"}
SCHOLARS_MATE = {"fen": "r1bqkb1r/pppp1ppp/2n2n2/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR w KQkq - 4 4", "moves": "h5f7"}


@pytest.fixture
def board_env():
    from agentfly.envs.chess import ChessPuzzleEnv

    env = ChessPuzzleEnv(use_engine=False)
    yield env
    env.close()


def test_the_solution_solves_a_two_move_puzzle(board_env):
    _, info = board_env.reset(DOUBLE_ROOKS)
    assert info["walkthrough"] == ["e2e8", "e1e8"] and "White" in info["goal"]
    first = board_env.step("Re8+")  # SAN is read too
    assert (first.reward, first.terminated, first.info["progress"]) == (0.0, False, 0.5)
    assert "Opponent played: Rxe8" in first.observation
    last = board_env.step("e1e8")
    assert (last.reward, last.terminated, last.info["progress"]) == (1.0, True, 1.0)


def test_a_one_move_puzzle_has_no_opponent_move(board_env):
    _, info = board_env.reset(SCHOLARS_MATE)
    assert info["walkthrough"] == ["h5f7"]
    assert board_env.step("Qxf7#").reward == 1.0


def test_a_legal_move_off_the_solution_fails_the_puzzle(board_env):
    board_env.reset(DOUBLE_ROOKS)
    result = board_env.step("g2g3")
    assert (result.reward, result.terminated, result.info["solved"]) == (0.0, True, False)


def test_queries_and_illegal_moves_change_nothing(board_env):
    board_env.reset(BACK_RANK)
    # the opponent has played Kh8 (g8h8)
    assert board_env.step("get_state").observation.startswith("FEN: 7k/5ppp/8/8/8/8/5PPP/3R2K1 w")
    legal = board_env.step("get_legal_moves").observation
    assert "d1d8 (Rd8#)" in legal
    illegal = board_env.step("d1d9")
    assert illegal.info["invalid"] and "Invalid move format" in illegal.observation
    assert board_env.step("e2e4").info["invalid"]  # no piece there
    assert board_env.step("d1d8").reward == 1.0


def test_a_bad_fen_or_no_solution_is_refused(board_env):
    with pytest.raises(EnvUsageError, match="bad FEN"):
        board_env.reset({"fen": "not a position", "moves": "e2e4"})
    with pytest.raises(EnvUsageError, match="'moves' is empty"):
        board_env.reset({"fen": BACK_RANK["fen"], "moves": ""})


@requires_stockfish
def test_stockfish_judges_moves_and_dies_with_the_environment():
    with ProcessEnv.named("chess_puzzle", {"analysis_time": 0.05}) as env:
        engines = [p.pid for p in psutil.Process(env.pid).children(recursive=True) if "stockfish" in p.name()]
        assert engines, "the environment runs Stockfish"
        env.reset(DOUBLE_ROOKS)
        best = env.step("e2e8")
        assert best.info["best_move"] == "e2e8" and best.info["cp_loss"] == 0
        env.reset(DOUBLE_ROOKS)
        blunder = env.step("g2g3")  # misses a forced mate
        assert blunder.info["best_move"] == "e2e8" and blunder.info["cp_loss"] > 1000
    assert wait_gone(*engines)
