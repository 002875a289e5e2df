"""`actor_rollout_ref.rollout.name=vllm` where vLLM cannot start stops `agentfly fit` with one line
that names the key and the `transformers` engine as the alternative."""

from __future__ import annotations

import json
import sys

import pytest

from agentfly.cli import main
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines import vllm as vllm_engine
from tests.fit_runs import fit_args


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("novllm")
    model = build_tiny_model(root / "model")
    data = [{"question": "What is 1+2?", "answer": "3"}, {"question": "What is 2+2?", "answer": "4"}]
    (root / "train.json").write_text(json.dumps(data))
    (root / "val.json").write_text(json.dumps(data))
    return root, model


@pytest.mark.parametrize("engines", [0, 1])  # in this process / in a Ray actor (never started here)
def test_vllm_that_does_not_import(task, tmp_path, monkeypatch, capsys, engines):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    root, model = task
    extra = ["actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.rollout.num_engines={engines}"]
    assert main(fit_args(root, model, tmp_path / "run", 1, extra)) == 2
    err = capsys.readouterr().err
    assert "actor_rollout_ref.rollout.name=vllm" in err and "rollout.name=transformers" in err
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before training


def test_vllm_whose_engine_does_not_start(task, tmp_path, monkeypatch, capsys):
    def no_engine(self, *args, **kwargs):
        raise vllm_engine.VLLMUnavailableError(f"the vLLM engine did not start (RuntimeError: no device); {vllm_engine.HINT}")

    monkeypatch.setattr(vllm_engine, "import_vllm", lambda: object())  # imports fine...
    monkeypatch.setattr(vllm_engine.VLLMEngine, "__init__", no_engine)  # ...but cannot start
    root, model = task
    assert main(fit_args(root, model, tmp_path / "run", 1, ["actor_rollout_ref.rollout.name=vllm"])) == 2
    err = capsys.readouterr().err
    assert "actor_rollout_ref.rollout.name=vllm" in err and "rollout.name=transformers" in err
