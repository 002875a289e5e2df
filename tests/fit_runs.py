"""Runs of `agentfly fit` on a tiny model (CPU), as the end-to-end tests launch them: the task
files, the arguments, the metrics they log."""

from __future__ import annotations

import csv
import json
import os

import psutil

from agentfly.models.tiny import build_tiny_model

#: what Lightning, torch and Ray say that an agentfly user can do nothing about (a fit shows none)
UNACTIONABLE = (
    "module(s) in eval mode at the start of training",  # the frozen reference
    "The `srun` command is available on your system but is not used",
    "`isinstance(treespec, LeafSpec)` is deprecated",
    "`weights_only` was not set",
    "Token authentication is enabled for this Ray cluster",
    "💡 Tip: For seamless cloud logging",  # an offer of a hosted service
)


def write_task(root, pairs, n_val=2, **model_kwargs):
    """A tiny model and train/val files of `a+b` questions under ``root``: ``(root, model)``."""
    model = build_tiny_model(root / "model", initializer_range=0.2, **model_kwargs)
    data = [{"question": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in pairs]
    (root / "train.json").write_text(json.dumps(data))
    (root / "val.json").write_text(json.dumps(data[:n_val]))
    return root, model


def fit_args(root, model, run, steps, extra=()):
    return [
        "fit",
        f"data.train_files={root / 'train.json'}",
        f"data.val_files={root / 'val.json'}",
        "data.train_batch_size=2",
        f"agent.init_config.model_name_or_path={model}",
        "agent.init_config.tools=[calculator,answer]",
        "agent.init_config.template=qwen2.5",
        "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.run_config.num_chains=2",
        "agent.run_config.max_turns=2",
        "agent.run_config.generation_config.max_tokens=12",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # two optimizer steps per iteration
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.num_engines=0",
        "trainer.n_gpus_per_node=1",
        "trainer.logger=[csv]",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        f"trainer.default_local_dir={run}",
        *extra,
    ]


def rows(run):
    """Every launch's metrics, in launch order (a resumed fit continues the run's file; a fresh
    launch into the folder writes a new version folder)."""
    out = []
    for path in sorted((run / "metrics").glob("version_*/metrics.csv")):
        with open(path) as f:
            out += list(csv.DictReader(f))
    return out


def iterations_by_launch(run) -> dict[str, list[float]]:
    """``{launch: its training iterations}`` of the run's one metrics file (the ``launch``
    column: 1 for the first launch, 2 for the first resume...); fails if there is more than one."""
    files = sorted((run / "metrics").glob("version_*/metrics.csv"))
    assert len(files) == 1, files  # a resumed fit continues the run's file
    out: dict[str, list[float]] = {}
    with open(files[0]) as f:
        for r in csv.DictReader(f):
            if r.get("training/iteration"):
                out.setdefault(r["launch"], []).append(float(r["training/iteration"]))
    return out


def probe_args(probe) -> list[str]:
    """Adds :class:`tests.probes.UpdateProbe` (writing ``probe.rank{r}``) to the fit's callbacks;
    ``tests.rewards`` is a plug-in of the run, so the probe's reward is known in every rank's
    process (and each worker process imports that light module, not ``tests.probes``)."""
    return ["agent.init_config.plugins=[tests.rewards]",
            "--trainer.callbacks+=tests.probes.UpdateProbe", "--trainer.callbacks.path", str(probe)]


def processes_of(marker: str) -> list[psutil.Process]:
    """Every process on the machine whose environment holds ``marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and marker in "\0".join(f"{k}={v}" for k, v in proc.environ().items()):
                found.append(proc)
        except psutil.Error:
            continue
    return found
