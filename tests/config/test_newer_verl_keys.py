"""Keys of newer verl configs that AgentFly's training scripts set, each with verl's meaning:

- ``critic.enable`` (verl's ``trainer/ppo/utils.py:need_critic``): ``None`` lets the estimator
  decide; a value against it is refused, naming why.
- ``{actor,ref}.fsdp_config.model_dtype`` and ``critic.fsdp.model_dtype`` (verl's
  ``engine/fsdp.yaml``; ``fsdp_workers.py`` loads the model in it): the parameters' dtype.
- ``rollout.prompt_length`` (verl's ``rollout/rollout.yaml``: ``${oc.select:data.max_prompt_length,512}``)
  and ``rollout.n`` (samples per prompt): spellings of ``data.max_prompt_length`` and
  ``agent.run_config.num_chains``; two spellings with two values are refused.
- ``rollout.checkpoint_engine.update_weights_bucket_megabytes`` (verl's
  ``checkpoint_engine/base.py``: ``<< 20`` bytes per bucket): the most one weight update request
  to the engines carries.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from agentfly.cli import load_config
from agentfly.config import ConfigError
from agentfly.run.plan import plan_run
from agentfly.run.topology import Hardware
from tests.config.plans import base, compose, write_plan_data

TWO_GPUS = Hardware(gpus=2, cpus=8)
GRPO = ["algorithm.adv_estimator=grpo"]
A = "actor_rollout_ref."
BUCKET = A + "rollout.checkpoint_engine.update_weights_bucket_megabytes"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_plan_data(tmp_path_factory.mktemp("newer_verl"))


def refusal(args: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        compose(args)
    return str(err.value)


def said(args: list[str]) -> str:
    """The warnings composing ``args`` gives (settings with no effect)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(args)
    return " ".join(str(w.message) for w in caught)


# ------------------------------------------------------------------------------ critic.enable


def test_critic_enable_null_or_agreeing_leaves_the_estimator_to_decide(data):
    def critic(*args: str) -> Any:
        return plan_run(compose([*base(data), *args]), TWO_GPUS).module["critic"]

    assert critic() is not None  # the base's gae
    assert critic("critic.enable=true") == critic()
    assert critic(*GRPO) is None
    assert critic(*GRPO, "critic.enable=false") is None
    assert "critic.enable (" not in said([*base(data), *GRPO, "critic.enable=false"])


def test_critic_enable_false_under_gae_is_refused_naming_why(data):
    msg = refusal([*base(data), "critic.enable=false"])
    assert "critic.enable=False is not supported" in msg and "needs the critic's values" in msg


def test_critic_enable_true_under_grpo_is_refused_naming_why(data):
    msg = refusal([*base(data), *GRPO, "critic.enable=true"])
    assert "critic.enable=True is not supported" in msg and "nothing would read it" in msg


# -------------------------------------------------------------------------------- model_dtype


def _dtypes(module: Any) -> dict[str, set[torch.dtype]]:
    return {
        name: {p.dtype for p in getattr(module, name).parameters()}
        for name in ("actor", "reference", "critic")
    }


def _built(data: Path, model: Path, *args: str) -> Any:
    from agentfly.modules.rl_module import AgentRLModule

    plan = plan_run(compose([
        *base(data), f"{A}model.path={model}", f"critic.model.path={model}", *args,
    ]), TWO_GPUS)
    module = AgentRLModule(**plan.module)
    module.configure_model()
    return module


def test_model_dtype_is_the_dtype_each_model_is_loaded_in(data, tiny_model_dir):
    f32 = {torch.float32}
    assert _dtypes(_built(data, tiny_model_dir)) == {"actor": f32, "reference": f32, "critic": f32}
    module = _built(
        data, tiny_model_dir,
        f"{A}actor.fsdp_config.model_dtype=bf16",
        f"{A}ref.fsdp_config.model_dtype=fp16",
        "critic.fsdp.model_dtype=float16",  # AgentFly's verl's spelling of critic.model.fsdp_config
    )
    assert _dtypes(module) == {"actor": {torch.bfloat16}, "reference": {torch.float16}, "critic": {torch.float16}}
    # each model its own: the critic's is not the actor's
    module = _built(data, tiny_model_dir, f"{A}actor.fsdp_config.model_dtype=fp16", "critic.fsdp.model_dtype=bf16")
    assert _dtypes(module) == {"actor": {torch.float16}, "reference": f32, "critic": {torch.bfloat16}}


def test_model_dtype_acts_under_every_strategy(data):
    """Not named as having no effect without FSDP (the strategy's own FSDP keys are)."""
    warned = said([*base(data), f"{A}actor.fsdp_config.model_dtype=bf16", f"{A}actor.fsdp_config.fsdp_size=1"])
    assert f"{A}actor.fsdp_config.fsdp_size (" in warned
    assert "model_dtype (" not in warned


def test_two_spellings_of_the_critics_dtype_with_two_values_are_refused(data):
    msg = refusal([*base(data), "critic.fsdp.model_dtype=bf16", "critic.model.fsdp_config.model_dtype=fp32"])
    assert "critic.fsdp.model_dtype" in msg and "critic.model.fsdp_config.model_dtype" in msg


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        # a *-true precision converts every model after loading: only its own dtype stays
        ([f"{A}actor.fsdp_config.model_dtype=fp32", "trainer.precision=bf16-true"], True),
        ([f"{A}actor.fsdp_config.model_dtype=bf16", "trainer.precision=bf16-true"], False),
        ([f"{A}ref.fsdp_config.model_dtype=bf16", "trainer.precision=16-true"], True),
        ([f"{A}actor.fsdp_config.model_dtype=bf16", "trainer.precision=bf16-mixed"], False),
        # 16-mixed's gradient scaler cannot unscale fp16 gradients; the reference has none
        ([f"{A}actor.fsdp_config.model_dtype=fp16", "trainer.precision=16-mixed"], True),
        (["critic.model.fsdp_config.model_dtype=fp16", "trainer.precision=16-mixed"], True),
        ([f"{A}ref.fsdp_config.model_dtype=fp16", "trainer.precision=16-mixed"], False),
    ],
)
def test_model_dtype_beside_lightnings_precision(data, args, refused):
    if not refused:
        compose([*base(data), *args])
        return
    msg = refusal([*base(data), *args])
    key = args[0].split("=")[0]
    assert f"{key}=" in msg and "not supported" in msg and "trainer.precision=" in msg, msg


# ------------------------------------------------------------------- rollout.prompt_length, n


def test_rollout_prompt_length_is_the_prompt_limit(data):
    def limit(*args: str) -> Any:
        return plan_run(compose([*base(data), *args]), TWO_GPUS).datamodule["max_prompt_length"]

    assert limit() is None  # the context less one token
    assert limit(f"{A}rollout.prompt_length=100") == 100
    assert limit(f"{A}rollout.prompt_length=100", "data.max_prompt_length=100") == 100


def test_rollout_prompt_length_and_data_max_prompt_length_apart_are_refused(data):
    msg = refusal([*base(data), "data.max_prompt_length=200", f"{A}rollout.prompt_length=100"])
    assert "data.max_prompt_length=200" in msg and f"{A}rollout.prompt_length=100" in msg


def test_rollout_n_is_the_chains_per_prompt(data):
    without = [a for a in base(data) if not a.startswith("agent.run_config.num_chains")]
    plan = plan_run(compose([*without, f"{A}rollout.n=2", f"{A}actor.ppo_mini_batch_size=8",
                             "critic.ppo_mini_batch_size=8"]), TWO_GPUS)
    assert plan.rollout.loop["num_chains"] == 2
    # the same value under both spellings is one setting
    compose([*without, f"{A}rollout.n=4", "agent.run_config.num_chains=4"])


def test_rollout_n_and_num_chains_apart_are_refused_naming_both(data):
    without = [a for a in base(data) if not a.startswith("agent.run_config.num_chains")]
    msg = refusal([*without, "agent.run_config.num_chains=4", f"{A}rollout.n=8"])
    assert "agent.run_config.num_chains=4" in msg and f"{A}rollout.n=8" in msg


# -------------------------------------------------------------- the weight sync's bucket size

MIB = 1 << 20


def _state(sizes_mib: list[float]) -> dict[str, torch.Tensor]:
    """Float32 tensors of the given sizes in MiB."""
    return {f"w{i}": torch.full((int(mib * MIB) // 4,), float(i)) for i, mib in enumerate(sizes_mib)}


def test_weight_buckets_hold_at_most_the_bucket_size():
    from agentfly.rollout.engines.weights import weight_buckets

    buckets = weight_buckets(_state([1, 1, 1, 1, 1]), 2 * MIB)
    assert [list(b) for b in buckets] == [["w0", "w1"], ["w2", "w3"], ["w4"]]  # 2 + 2 + 1 MiB
    # a tensor larger than a bucket goes alone; the others fill around it in order
    assert [list(b) for b in weight_buckets(_state([0.5, 3, 0.5, 0.5]), 2 * MIB)] == [["w0"], ["w1"], ["w2", "w3"]]


def test_the_key_reaches_the_pool(data, tiny_model_dir):
    from agentfly.rollout.engines.pool import EnginePool

    plan = plan_run(compose([*base(data), f"{BUCKET}=512"]), TWO_GPUS)
    assert plan.rollout.pool_kwargs["weight_bucket_mb"] == 512
    scripted = {"model": str(tiny_model_dir), "script": ["x"]}
    pool = EnginePool("scripted", 0, engine_kwargs=scripted, **plan.rollout.pool_kwargs)
    try:
        assert pool.weight_bucket_bytes == 512 * MIB
    finally:
        pool.shutdown()


class _Ray:
    """The pool's Ray side, in this process: each engine call runs on an :class:`EngineHost`."""

    def __init__(self, hosts: list[Any]) -> None:
        self.hosts, self.calls = hosts, []

    def call_all(self, method: str, *args: Any) -> list[Any]:
        self.calls.append((method, args))
        return [getattr(h, method)(*args) for h in self.hosts]

    def live(self) -> list[int]:
        return list(range(len(self.hosts)))


def _pool_over(monkeypatch, hosts: list[Any], bucket_bytes: int) -> tuple[Any, _Ray]:
    import ray

    from agentfly.rollout.engines.pool import EnginePool

    monkeypatch.setattr(ray, "put", lambda value: value)  # the object store, skipped
    pool = object.__new__(EnginePool)
    pool._ray, pool._hosts, pool.weight_bucket_bytes = _Ray(hosts), hosts, bucket_bytes  # type: ignore[assignment]
    return pool, pool._ray  # type: ignore[return-value]


def test_a_push_sends_one_request_per_bucket_and_loads_once(monkeypatch, tiny_model_dir):
    from agentfly.rollout.engines.host import EngineHost

    host = EngineHost("scripted", {"model": str(tiny_model_dir), "script": ["x"]})
    loads: list[dict[str, torch.Tensor]] = []
    monkeypatch.setattr(host.engine, "load_weights", lambda w: loads.append(dict(w)))
    state = _state([1, 1, 1, 1, 1])
    for mib, requests in ((2, 3), (1, 5), (5, 1)):  # by hand: ceil(5 MiB / bucket)
        loads.clear()
        pool, ray_side = _pool_over(monkeypatch, [host], mib * MIB)
        pool.update_weights(state, version=7)
        sent = [args[0] for method, args in ray_side.calls if method == "load_weights_bucket"]
        assert len(sent) == requests, mib
        assert all(sum(t.numel() * 4 for t in b.values()) <= mib * MIB for b in sent)
        assert [args[2] for _, args in ray_side.calls] == [False] * (requests - 1) + [True]
        assert len(loads) == 1 and loads[0].keys() == state.keys()  # one load, the whole state
        assert host.weights_version == 7


def test_the_engine_serves_the_new_weights_after_the_last_bucket_only(monkeypatch, tiny_model_dir):
    from agentfly.rollout.engines.host import EngineHost

    host = EngineHost("transformers", {"model": str(tiny_model_dir), "device": "cpu", "enable_prefix_caching": False})
    served = host.engine.model.state_dict()
    new = {k: v + 1.0 for k, v in served.items() if v.is_floating_point()}
    before = {k: v.clone() for k, v in served.items()}
    biggest = max(t.numel() * t.element_size() for t in new.values())
    pool, _ = _pool_over(monkeypatch, [host], biggest)
    buckets_seen: list[bool] = []
    real = host.load_weights_bucket

    def watched(bucket: Any, version: Any, last: bool) -> Any:
        out = real(bucket, version, last)
        unchanged = all(torch.equal(served[k], before[k]) for k in new)
        buckets_seen.append(unchanged)
        return out

    monkeypatch.setattr(host, "load_weights_bucket", watched)
    pool.update_weights(new, version=1)
    assert len(buckets_seen) > 1  # several buckets
    assert buckets_seen[:-1] == [True] * (len(buckets_seen) - 1)  # nothing served before the last
    assert all(torch.equal(served[k], new[k]) for k in new)


def test_the_bucket_size_has_no_effect_on_an_engine_in_the_training_process(data):
    warned = said([*base(data), f"{A}rollout.num_engines=0", f"{BUCKET}=512"])
    assert f"{BUCKET} (" in warned
    assert f"{BUCKET} (" not in said([*base(data), f"{BUCKET}=512"])
