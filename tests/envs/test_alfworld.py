"""ALFWorld without its game files stops before anything starts, naming where it looked and how
to get them; games are found by task id and split."""

from __future__ import annotations

import pytest

from agentfly.envs import EnvUnavailable, EnvUsageError
from agentfly.envs.alfworld import ALFWorldEnv, alfworld_data_dir, find_game


def test_no_game_files_names_the_path_and_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "alfworld"))
    with pytest.raises(EnvUnavailable, match=r"no game files at .*alfworld/json_2.1.1.*alfworld-download"):
        ALFWorldEnv()
    with pytest.raises(EnvUnavailable, match=r"no game files at .*elsewhere/json_2.1.1"):
        alfworld_data_dir(tmp_path / "elsewhere")


def test_games_are_found_by_task_id_and_split(tmp_path):
    game = tmp_path / "json_2.1.1" / "valid_seen" / "pick_and_place_simple-Mug-None-Desk-308" / "trial_T1"
    game.mkdir(parents=True)
    (game / "game.tw-pddl").write_text("{}")
    assert alfworld_data_dir(tmp_path) == tmp_path
    assert find_game(tmp_path, "trial_T1", "valid_seen") == game / "game.tw-pddl"
    with pytest.raises(EnvUsageError, match=r"no game 'trial_T1' in .*train"):
        find_game(tmp_path, "trial_T1", "train")
    with pytest.raises(EnvUsageError, match="split must be one of"):
        find_game(tmp_path, "trial_T1", "test")


def test_with_game_files_but_no_alfworld_package_it_says_how_to_install(tmp_path):
    pytest.importorskip("textworld")
    try:
        import alfworld  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the alfworld package is installed here")
    (tmp_path / "json_2.1.1").mkdir()
    with pytest.raises(EnvUnavailable, match=r"alfworld package is not installed.*agentfly\[alfworld\]"):
        ALFWorldEnv(data_dir=str(tmp_path))
