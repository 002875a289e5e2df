"""`agentfly fit`'s update does not depend on how a mini-batch is laid out: padded, packed
without padding (``use_remove_padding``, actor and critic), or split by a token budget
(``use_dynamic_bsz``), under agentfly's sdpa and under eager attention, nor on whether the
log-probabilities come from the logits or from the hidden states in chunks
(``use_fused_kernels``, padded and packed): one iteration from the
same rollout gives the same losses, gradient norms, entropies and values, and so every logged
metric of the iteration (timings aside) agrees within float32 rounding.

The rollout: one row, two scripted chains of different lengths on a real environment process
(tests/envs/env_script.py: three steps and one), so rows are of mixed lengths and their rewards
(3 and 1) give GAE something to learn; the token budget puts each chain in a micro-batch of its
own, where a metric averaged over micro-batch means would differ from the token mean."""

from __future__ import annotations

import json
import math

import pytest

from agentfly.cli import main
from agentfly.models.tiny import build_tiny_model
from tests.envs.env_script import SCRIPTS_FILE, action, env_fit, write_scripts
from tests.fit_runs import rows as metrics_rows

PACKED = ["actor_rollout_ref.model.use_remove_padding=true", "critic.model.use_remove_padding=true"]
BUDGET = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=96",
          "critic.use_dynamic_bsz=true", "critic.ppo_max_token_len_per_gpu=96"]
EAGER = ["actor_rollout_ref.model.override_config.attn_implementation=eager",
         "critic.model.override_config.attn_implementation=eager"]
FUSED = ["actor_rollout_ref.model.use_fused_kernels=true"]
LAYOUTS = {"padded": [], "packed": PACKED, "token_budget": BUDGET, "eager_padded": EAGER,
           "eager_packed": [*EAGER, *PACKED], "fused": FUSED, "fused_packed": [*FUSED, *PACKED]}


@pytest.fixture(scope="module")
def iterations(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed_fit")
    model = build_tiny_model(root / "model", max_position_embeddings=4096, initializer_range=0.2)
    row = {"question": "Count the steps."}
    data = root / "rows.json"
    data.write_text(json.dumps([row]))
    scripts = write_scripts(root / "scripts.json", {row["question"]: [[action("a")] * 3 + ["done"], [action("a"), "done"]]})
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SCRIPTS_FILE, str(scripts))
        for name, extra in LAYOUTS.items():
            run = root / name
            args = env_fit(run, model, data, ["counting_step"], "counting_return", max_turns=5, iterations=1,
                           extra=["algorithm.adv_estimator=gae", f"critic.model.path={model}",
                                  "critic.ppo_mini_batch_size=2", *extra])
            assert main(args) == 0
            [out[name]] = [r for r in metrics_rows(run) if r.get("training/iteration")]
    return out


def numbers(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if v not in ("", None) and not k.startswith("timing/") and "tokens_per_s" not in k}


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if k != "padded"])
def test_every_metric_of_the_iteration_is_the_padded_one(iterations, layout):
    padded, other = numbers(iterations["padded"]), numbers(iterations[layout])
    assert set(other) == set(padded)
    assert padded["critic/rewards/mean"] == pytest.approx(2.0)  # the rollout: rewards 3 and 1
    assert padded["actor/pg_loss"] != 0.0 and padded["critic/vf_loss"] > 0.0
    assert padded["actor/entropy"] > 0.0
    different = {k: (padded[k], other[k]) for k in padded
                 if not math.isclose(padded[k], other[k], rel_tol=1e-5, abs_tol=1e-5)}
    assert not different
