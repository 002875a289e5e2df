"""Resume's comparison of the checkpoint's config record with the config given now
(:func:`agentfly.run.resume.check_resume`), on checkpoints written by hand: every key either
record holds is compared, a key the record lacks at its default (or at the recorded value of the
key its default follows), a changed ``data.train_batch_size`` is refused unless
``trainer.resume_changed_config=true``, and a meaning key this run does not use (``critic.model.path``
under GRPO) is named, not refused.

The expected defaults are verl's (``data.train_batch_size`` 1024, ``algorithm.gamma`` 1.0)."""

from __future__ import annotations

import pytest
import torch

from agentfly.callbacks.config_record import RECORD_KEY
from agentfly.config import ConfigError
from agentfly.run.plan import plan_run
from agentfly.run.resume import check_resume, config_record
from agentfly.run.topology import Hardware
from tests.config.plans import base, compose, write_plan_data

TWO_GPUS = Hardware(gpus=2, cpus=8)
GRPO = ["algorithm.adv_estimator=grpo"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_plan_data(tmp_path_factory.mktemp("resume_config"))


def run_of(data, *extra: str):
    """(config, plan) of the every-key base run (GAE with a critic, KL on: three models) changed by ``extra``."""
    cfg = compose([*base(data), *extra])
    return cfg, plan_run(cfg, TWO_GPUS)


def write_checkpoint(path, record: dict | None, models=("actor", "reference", "critic")) -> str:
    """A checkpoint of iteration 1 holding ``models`` and ``record`` as its config record."""
    state = {f"{m}.weight": torch.zeros(1) for m in models}
    torch.save({"agentfly_iteration": 1, RECORD_KEY: record, "state_dict": state}, path)
    return str(path)


def resume(tmp_path, record: dict, cfg, plan, models=("actor", "reference", "critic")) -> list[str]:
    return check_resume(cfg, plan, write_checkpoint(tmp_path / "last.ckpt", record, models))


def test_the_config_a_checkpoint_was_written_with_resumes_with_nothing_named(data, tmp_path):
    cfg, plan = run_of(data)
    assert resume(tmp_path, config_record(cfg), cfg, plan) == []


def test_a_changed_train_batch_size_is_refused_unless_told(data, tmp_path):
    """Eight prompts per iteration, then sixteen: the resumed run would see other prompts."""
    batch_16 = ["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
                "critic.ppo_mini_batch_size=32"]
    written, _ = run_of(data)
    cfg, plan = run_of(data, *batch_16)
    with pytest.raises(ConfigError) as refused:
        resume(tmp_path, config_record(written), cfg, plan)
    assert "data.train_batch_size: 8 -> 16" in str(refused.value)
    assert "trainer.resume_changed_config=true" in str(refused.value)

    cfg, plan = run_of(data, *batch_16, "trainer.resume_changed_config=true")
    notes = resume(tmp_path, config_record(written), cfg, plan)
    assert "data.train_batch_size: 8 -> 16" in "\n".join(notes)


def test_a_meaning_key_an_older_record_lacks_is_compared_at_its_default(data, tmp_path):
    """The record of an agentfly before ``data.train_batch_size`` was recorded: its writer ran
    with the default, 1024 prompts; this config's 8 is a change of meaning."""
    cfg, plan = run_of(data)
    record = config_record(cfg)
    del record["data.train_batch_size"]
    with pytest.raises(ConfigError) as refused:
        resume(tmp_path, record, cfg, plan)
    assert "data.train_batch_size: 1024 -> 8 (the checkpoint's record lacks it: its default)" in str(refused.value)


def test_a_key_an_older_record_lacks_at_its_default_now_is_no_change(data, tmp_path):
    """``algorithm.gamma`` left at its default, ``agent.init_config.agent_type`` (a meaning key)
    too: a record without them is the same config."""
    cfg, plan = run_of(data)
    assert cfg.algorithm.gamma == 1.0 and cfg.agent.init_config.agent_type == "hermes"
    record = config_record(cfg)
    del record["algorithm.gamma"], record["agent.init_config.agent_type"]
    assert resume(tmp_path, record, cfg, plan) == []


def test_a_key_an_older_record_lacks_set_now_is_named_with_its_default(data, tmp_path):
    cfg, plan = run_of(data, "algorithm.gamma=0.9")
    record = config_record(cfg)
    del record["algorithm.gamma"]
    notes = resume(tmp_path, record, cfg, plan)
    assert len(notes) == 1, notes
    assert "algorithm.gamma: 1.0 -> 0.9 (the checkpoint's record lacks it: its default)" in notes[0]


def test_a_default_that_follows_another_key_is_compared_at_that_keys_recorded_value(data, tmp_path):
    """``data.seed`` follows ``trainer.seed`` (7 here), the critic's epochs the actor's (2): a
    record without them held 7 and 2, as this config does; its own ``None`` default is no value."""
    cfg, plan = run_of(data, "trainer.seed=7", "actor_rollout_ref.actor.ppo_epochs=2")
    assert cfg.data.seed == 7 and cfg.critic.ppo_epochs == 2
    record = config_record(cfg)
    del record["data.seed"], record["critic.ppo_epochs"]
    assert resume(tmp_path, record, cfg, plan) == []


def test_a_key_the_record_holds_and_this_config_lacks_is_named(data, tmp_path):
    """A key renamed since, and a Lightning argument the writer set (this config's
    ``trainer.lightning`` is an empty mapping): each named once, as not set, nothing refused."""
    cfg, plan = run_of(data)
    record = config_record(cfg)
    assert record.pop("trainer.lightning") == {}
    record |= {"agent.init_config.retired_key": 3, "trainer.lightning.precision": "bf16-mixed"}
    notes = resume(tmp_path, record, cfg, plan)
    assert len(notes) == 1, notes
    named = notes[0].split(": ", 1)[1].split("; ")
    assert named == [
        "agent.init_config.retired_key: 3 -> (not set)",
        "trainer.lightning.precision: 'bf16-mixed' -> (not set)",
    ], notes


def test_the_critic_path_under_grpo_is_named_not_refused(data, tmp_path):
    """verl's GRPO scripts pass ``critic.model.path``; GRPO trains no critic, so another path
    (or one an older record never held) changes nothing the checkpoint holds."""
    written, _ = run_of(data, *GRPO)
    cfg, plan = run_of(data, *GRPO, f"critic.model.path={data}/models/other")
    models = ("actor", "reference")
    notes = "\n".join(resume(tmp_path, config_record(written), cfg, plan, models))
    assert (
        f"critic.model.path: '{data}/models/critic' -> '{data}/models/other' "
        f"(no effect: algorithm.adv_estimator=grpo trains no critic)"
    ) in notes, notes

    record = config_record(written)
    del record["critic.model.path"]
    notes = "\n".join(resume(tmp_path, record, cfg, plan, models))
    assert f"critic.model.path: None -> '{data}/models/other'" in notes, notes


def test_the_critic_path_of_a_run_that_trains_a_critic_is_refused(data, tmp_path):
    written, _ = run_of(data)
    cfg, plan = run_of(data, f"critic.model.path={data}/models/other")
    with pytest.raises(ConfigError) as refused:
        resume(tmp_path, config_record(written), cfg, plan)
    assert f"critic.model.path: '{data}/models/critic' -> '{data}/models/other'" in str(refused.value)
