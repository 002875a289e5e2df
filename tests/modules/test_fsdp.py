"""FSDP (FSDP2 through Lightning's ModelParallelStrategy) on two CPU ranks over gloo: actor,
reference and critic sharded per transformer block; after each update the engine serves the
gathered weights; one update equals DDP's on the same rollout; the Hugging Face export and
checkpoints hold full weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from safetensors.torch import load_file

from agentfly.rollout.engines.caller_thread import run_sync
from tests.fit_runs import rows, write_task

PROMPT = "<|im_start|>user\nWhat is 7*7?<|im_end|>\n<|im_start|>assistant\n"


class SyncProbe(pl.Callback):
    """After each update (and the weight sync before it in the callback list), every rank compares
    its engine's greedy log-probabilities of a fixed prompt with the (sharded) actor's own."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        from agentfly.modules.fsdp import is_sharded
        from agentfly.rollout.engines import SamplingParams

        session = trainer.datamodule.session
        prompt = session.tokenizer.encode(PROMPT, add_special_tokens=False)
        params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
        (out,) = run_sync(session.pool, session.pool.generate([prompt], params))[0]
        seq, n = prompt + list(out.token_ids), len(out.token_ids)
        with torch.no_grad():  # a collective under FSDP: every rank runs it
            logits = pl_module.actor(torch.tensor([seq])).logits.float()
        logp = logits.log_softmax(-1)[0, :-1].gather(-1, torch.tensor(seq[1:]).unsqueeze(-1)).squeeze(-1)[-n:]
        gap = (torch.tensor(out.logprobs) - logp).abs().max().item()
        record = {"rank": trainer.global_rank, "iteration": pl_module.iteration, "gap": gap,
                  "sharded": is_sharded(pl_module.actor) and (pl_module.critic is None or is_sharded(pl_module.critic))}
        with open(f"{self.path}.rank{trainer.global_rank}", "a") as f:
            f.write(json.dumps(record) + "\n")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    # head_dim 32: the same model would also run on vLLM's CPU build
    return write_task(tmp_path_factory.mktemp("fsdp"), [(1, 2), (3, 4), (5, 6), (7, 8)], hidden_size=128, head_dim=32)


def _fit(root, model, run, strategy, probe=None, steps=2):
    args = [
        "fit", f"data.train_files={root / 'train.json'}", "data.train_batch_size=4",
        f"actor_rollout_ref.model.path={model}", "agent.init_config.tools=[calculator,answer]",
        "agent.init_config.template=qwen2.5", "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.init_config.max_model_len=1024", "agent.run_config.num_chains=2", "agent.run_config.max_turns=1",
        "agent.run_config.generation_config.max_tokens=8",
        "algorithm.adv_estimator=gae", f"critic.model.path={model}", "critic.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.optim.lr=2e-2",
        "actor_rollout_ref.actor.entropy_coeff=0.01",  # a gradient whatever the (tiny model's) rewards
        "actor_rollout_ref.actor.use_kl_loss=true",  # a reference model, sharded too
        f"actor_rollout_ref.actor.strategy={strategy}", "actor_rollout_ref.rollout.num_engines=0",
        "trainer.device=cpu", "trainer.n_gpus_per_node=2", "trainer.logger=[csv]",
        f"trainer.total_training_steps={steps}", "trainer.save_freq=1", "trainer.val_before_train=false",
        f"trainer.default_local_dir={run}",
        *(["--trainer.callbacks+=tests.modules.test_fsdp.SyncProbe", "--trainer.callbacks.path", str(probe)] if probe else []),
    ]
    proc = subprocess.run([sys.executable, "-m", "agentfly.cli", *args], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _actor(ckpt: Path) -> dict[str, torch.Tensor]:
    """The actor's full weights in a checkpoint, under the Hugging Face names."""
    state = torch.load(ckpt, weights_only=False)["state_dict"]
    return {k.removeprefix("actor."): v for k, v in state.items() if k.startswith("actor.")}


def test_fsdp_on_two_cpu_ranks_syncs_and_matches_ddp(task, tmp_path):
    root, model = task
    probe = tmp_path / "probe.jsonl"
    _fit(root, model, tmp_path / "fsdp", "fsdp", probe)
    _fit(root, model, tmp_path / "ddp", "ddp", steps=1)
    for rank in (0, 1):
        records = [json.loads(line) for line in Path(f"{probe}.rank{rank}").read_text().splitlines()]
        assert [r["iteration"] for r in records] == [1, 2]
        assert all(r["sharded"] for r in records)  # actor and critic were FSDP modules
        assert max(r["gap"] for r in records) < 1e-4, records  # the engine serves the updated actor
    start = load_file(model / "model.safetensors")
    export = load_file(tmp_path / "fsdp" / "hf_actor" / "model.safetensors")
    assert set(start) <= set(export)  # the export holds every weight, gathered in full
    # One update from the same weights on the same rollout (iteration 1: both runs sampled the
    # same seeded chains from the initial model) equals DDP's up to reduction-order rounding.
    # Later iterations are not compared: a rounding-level difference can flip a sampled token,
    # and from then on the two runs train on different chains.
    fsdp, ddp = (_actor(tmp_path / run / "checkpoints" / "iter_000001.ckpt") for run in ("fsdp", "ddp"))
    assert set(start) <= set(fsdp) & set(ddp)
    update = torch.cat([(fsdp[k] - start[k]).abs().flatten() for k in start])
    apart = torch.cat([(fsdp[k] - ddp[k]).abs().flatten() for k in start])
    assert update.mean() > 1e-3  # it trained
    assert apart.mean() < 0.01 * update.mean(), (apart.mean(), update.mean())
    ckpt = torch.load(tmp_path / "fsdp" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["agentfly_iteration"] == 2
    assert ckpt["state_dict"]["actor.model.embed_tokens.weight"].shape == start["model.embed_tokens.weight"].shape
    vf = [float(r["critic/vf_loss"]) for r in rows(tmp_path / "fsdp") if r.get("critic/vf_loss")]
    assert len(vf) == 2  # the critic trained under FSDP too
