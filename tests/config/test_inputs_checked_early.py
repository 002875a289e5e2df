"""Inputs that cannot work fail when the run is planned, before any model, engine or Ray starts,
naming the key and the value: a model path that does not exist, a batch larger than the data, a
prompt budget that leaves no room to generate."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from agentfly.cli import load_config
from agentfly.config import ConfigError
from agentfly.run.topology import Hardware

CPU = Hardware(gpus=0, cpus=2)


@pytest.fixture
def task(tmp_path: Path) -> Path:
    rows = [{"question": f"What is {i}+1?", "answer": str(i + 1)} for i in range(6)]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    (tmp_path / "model").mkdir()
    return tmp_path


def args(task: Path, *extra: str) -> list[str]:
    return [
        f"data.train_files=[{task / 'train.json'}]",
        f"actor_rollout_ref.model.path={task / 'model'}",
        "agent.init_config.reward_name=math_equal_reward",
        "algorithm.adv_estimator=grpo",
        "agent.run_config.num_chains=2",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.num_engines=0",
        "trainer.n_gpus_per_node=1",
        f"trainer.default_local_dir={task / 'run'}",
        *extra,
    ]


@pytest.fixture
def nothing_may_start(monkeypatch):
    """Building an engine, a session or a model fails the test."""

    def started(*a, **k):
        raise AssertionError("something started before the bad input was refused")

    monkeypatch.setattr("agentfly.rollout.runner.build_rollout", started)
    monkeypatch.setattr("agentfly.run.fit.build_module", started)
    monkeypatch.setattr("agentfly.run.fit.build_datamodule", started)


def build(cfg):
    from agentfly.run.fit import build_trainer

    return build_trainer(cfg, hardware=CPU)


def test_a_model_path_that_does_not_exist_is_refused_by_key_and_path(task, nothing_may_start):
    missing = task / "no_such_model"
    cfg = load_config(args(task, f"actor_rollout_ref.model.path={missing}"))
    with pytest.raises(ConfigError) as err:
        build(cfg)
    assert f"actor_rollout_ref.model.path={str(missing)!r}" in str(err.value)


def test_the_critic_path_is_checked_when_a_critic_is_trained(task, nothing_may_start):
    bad = args(task, "algorithm.adv_estimator=gae", "critic.model.path=./no/critic")
    with pytest.raises(ConfigError, match=r"critic.model.path='./no/critic': no such file"):
        build(load_config(bad))
    # the same path with an estimator that trains no critic is not loaded, so not checked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # named as having no effect: grpo trains no critic
        cfg = load_config(args(task, "critic.model.path=./no/critic"))
    from agentfly.models.paths import check_model_paths

    check_model_paths(cfg, needs_critic=False)


def test_a_repo_id_offline_must_be_in_the_local_cache(task, monkeypatch):
    from agentfly.models.paths import model_path_problem

    monkeypatch.setenv("HF_HUB_CACHE", str(task / "hub"))  # empty: nothing cached
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    key = "actor_rollout_ref.model.path"
    assert model_path_problem(key, "Qwen/Qwen2.5-3B-Instruct") is None  # may be downloaded
    assert "no such file" in model_path_problem(key, "/models/Qwen2.5")  # looks local
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(task / "hub"))
    problem = model_path_problem(key, "Qwen/Qwen2.5-3B-Instruct")
    assert problem and "Qwen/Qwen2.5-3B-Instruct" in problem and "HF_HUB_OFFLINE" in problem
    # a cached repo (config.json in the hub's snapshot layout) is accepted offline
    snapshot = task / "hub" / "models--Qwen--Qwen2.5-3B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (task / "hub" / "models--Qwen--Qwen2.5-3B-Instruct" / "refs").mkdir()
    (task / "hub" / "models--Qwen--Qwen2.5-3B-Instruct" / "refs" / "main").write_text("abc")
    assert model_path_problem(key, "Qwen/Qwen2.5-3B-Instruct") is None


def test_a_batch_larger_than_the_rows_names_both_numbers(task, nothing_may_start):
    cfg = load_config(args(task, "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16"))
    with pytest.raises(ConfigError) as err:
        build(cfg)
    assert "data.train_batch_size=8 is larger than the 6 training rows" in str(err.value)


def test_a_prompt_budget_that_leaves_no_room_is_refused_when_composed(task):
    with pytest.raises(ConfigError, match=r"data.max_prompt_length=80 leaves no room"):
        load_config(args(task, "agent.init_config.max_model_len=80", "data.max_prompt_length=80"))
    with pytest.raises(ConfigError, match=r"data.truncation: Expected one of 'error', 'left', 'right', 'middle'. Got value: both"):
        load_config(args(task, "data.truncation=both"))
    load_config(args(task, "agent.init_config.max_model_len=80", "data.max_prompt_length=79"))


# ------------------------------------------------------- a model given as a Hub id, resolved once

REPO = "agentfly-test/no-such-model"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """Online mode with an empty cache, and a Hub at a local address (``hub.serve(status)``: a
    server answering every request with ``status``; else a closed port): no test reaches the
    network, which every name but the loopback's is kept from."""
    import http.server
    import socket
    import threading
    from types import SimpleNamespace

    import huggingface_hub.constants as constants

    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost"):
            raise socket.gaierror(f"{host}: the tests reach no network")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))

    def use(endpoint: str) -> None:
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")

    with socket.socket() as s:  # a port nothing listens on: connections are refused at once
        s.bind(("127.0.0.1", 0))
        use(f"http://127.0.0.1:{s.getsockname()[1]}")
    servers = []

    def serve(status: int, error_code: str) -> None:
        class Answer(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status)
                self.send_header("X-Error-Code", error_code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": "Repository Not Found"}')

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        use(f"http://127.0.0.1:{server.server_address[1]}")

    yield SimpleNamespace(serve=serve, cache=tmp_path / "hub")
    for server in servers:
        server.shutdown()


def cached(hub, repo: str, model: Path) -> Path:
    """``model``'s files as the Hub's cache holds a download of ``repo``: its snapshot folder."""
    import shutil

    folder = hub.cache / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / "0123abcd"
    shutil.copytree(model, snapshot)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abcd")
    return snapshot


@pytest.mark.parametrize("hub_answers", ["nothing (connection refused)", "404: repository not found"])
def test_a_hub_id_that_cannot_be_had_stops_within_seconds_naming_it_and_why(task, hub, tmp_path, capsys, monkeypatch,
                                                                           hub_answers):
    """Neither cached nor to be had from the Hub: ``agentfly fit`` stops as the run is planned,
    exit 2, naming the key, the id and why; no run folder, no traceback. The Hub is asked once,
    and that question is what is timed (the command's own start-up, imports included, takes
    half a minute on a loaded 2-core machine: the whole command has only a hang's bound)."""
    import time

    from huggingface_hub import HfApi

    from agentfly.cli import main
    from agentfly.models.paths import HUB_TIMEOUT_S

    if hub_answers.startswith("404"):
        hub.serve(404, "RepoNotFound")
    asked, real_info = [], HfApi.model_info

    def timed_info(self, *a, **kw):
        began = time.monotonic()
        try:
            return real_info(self, *a, **kw)
        finally:
            asked.append(time.monotonic() - began)

    monkeypatch.setattr(HfApi, "model_info", timed_info)
    started = time.monotonic()
    code = main(["fit", *args(task, f"actor_rollout_ref.model.path={REPO}", "trainer.logger=[csv]")])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(asked) == 1 and asked[0] < HUB_TIMEOUT_S + 2, asked  # once, within its deadline
    assert took < 120, took  # nothing waits on the Hub beyond that question
    assert f"actor_rollout_ref.model.path={REPO!r}" in err
    if hub_answers.startswith("404"):
        assert "no such model on the Hugging Face Hub" in err and "Repository Not Found" in err, err
    else:
        assert "is not in the local Hugging Face cache" in err and "the Hub cannot be reached" in err, err
    assert "Traceback" not in err
    assert not (task / "run").exists()


@pytest.mark.parametrize("mode", ["HF_HUB_OFFLINE=1", "the Hub unreachable"])
def test_a_cached_hub_id_is_resolved_to_its_snapshot_before_anything_starts(task, hub, tiny_model_dir, monkeypatch, caplog, mode):
    """The run loads the cached snapshot's folder: the module, the engines and the tokenizer are
    given that path, not the id (no process of the run asks the Hub again)."""
    import logging

    import huggingface_hub.constants as constants

    from agentfly.run.fit import make_plan

    snapshot = cached(hub, "agentfly-test/tiny", tiny_model_dir)
    if mode == "HF_HUB_OFFLINE=1":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cfg = load_config(args(task, "actor_rollout_ref.model.path=agentfly-test/tiny"))
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        plan = make_plan(cfg, CPU)
    assert plan.module["model"].path == str(snapshot)
    assert plan.rollout.engine_kwargs["model"] == str(snapshot)
    if mode == "the Hub unreachable":
        assert "the Hub cannot be reached (ConnectError" in caplog.text and str(snapshot) in caplog.text


def test_a_context_longer_than_the_models_is_refused_when_planned(task, nothing_may_start):
    """The engine serves no longer a sequence than the model's positions: a longer
    ``max_model_len`` would pass prompts no chain can continue (every chain an error)."""
    (task / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 512}))
    with pytest.raises(ConfigError) as err:
        build(load_config(args(task, "agent.init_config.max_model_len=2048")))
    assert "agent.init_config.max_model_len=2048 is longer than the model's context" in str(err.value)
    assert "max_position_embeddings=512; set it to at most 512" in str(err.value)
    from agentfly.run.plan import plan_run

    assert plan_run(load_config(args(task, "agent.init_config.max_model_len=512")), CPU)  # its own context: fine
