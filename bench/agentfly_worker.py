"""One agentfly system (an engine) on one workload, one gated iteration at a time.

    python bench/agentfly_worker.py --workload w1 --engine hf

Builds the trainer exactly as ``agentfly fit`` does (``load_config`` + ``build_trainer``), then
runs ``trainer.fit``; a callback holds the loop between iterations until ``bench/run.py`` says
``go``, so an iteration's wall time covers rollout (generation, tools, reward), the update and the
weight sync into the engine, and nothing of the other systems.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _worker import PeakRSS, cuda_sync, emit, wait_go
from workloads import REPO, WORKLOADS, model_path


def overrides(
    w,
    engine: str,
    run_dir: Path,
    iterations: int,
    num_engines: int | None,
    device: str = "cpu",
    mode: str = "sync",
    staleness: int = 1,
    enforce_eager: bool | None = None,
) -> list[str]:
    model = model_path(w)
    tools = "[" + ",".join(w.tools) + "]"
    out = [
        f"data.train_files=[{REPO / w.data}]",
        "data.val_files=[]",
        f"data.train_batch_size={w.prompts}",
        "data.shuffle=false",
        f"agent.init_config.model_name_or_path={model}",
        f"actor_rollout_ref.model.path={model}",
        f"agent.init_config.tools={tools}",
        f"agent.init_config.template={w.template}",
        f"agent.init_config.reward_name={w.reward}",
        f"agent.init_config.max_model_len={w.max_model_len}",
        f"actor_rollout_ref.rollout.response_length={w.max_model_len}",  # only the context binds, as for TRL
        f"agent.run_config.max_turns={w.max_turns}",
        f"agent.run_config.num_chains={w.group}",
        f"agent.run_config.generation_config.max_tokens={w.max_new_tokens}",
        f"agent.run_config.generation_config.temperature={w.temperature}",
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={w.mini}",  # w.mini_batches optimizer steps
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={w.micro}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=false",  # beta = 0, no reference model
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        f"actor_rollout_ref.actor.optim.lr={w.lr}",
        "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.grad_clip=1.0",
        f"actor_rollout_ref.rollout.name={engine}",
        # fp32 workloads: the engine too (GPU engines default to bf16); bf16 ones: Lightning's
        # bf16-mixed (fp32 master weights, bf16 autocast), as verl's FSDP mixed precision
        f"actor_rollout_ref.rollout.dtype={'bfloat16' if w.precision == 'bf16' else 'float32'}",
        f"trainer.rollout_mode={mode}",
        "trainer.n_gpus_per_node=1",
        f"trainer.device={device}",
        "trainer.logger=[csv]",
        f"trainer.total_training_steps={iterations + 1}",  # the end-of-fit save is never timed
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={run_dir}",
    ]
    if num_engines is not None:
        out.append(f"actor_rollout_ref.rollout.num_engines={num_engines}")
    if mode == "async":
        out.append(f"trainer.max_staleness={staleness}")
    if w.precision == "bf16":
        out.append("trainer.precision=bf16-mixed")
    if enforce_eager is not None:  # None: the engine's default (the transformers engine: its dynamic cache)
        out.append(f"actor_rollout_ref.rollout.enforce_eager={enforce_eager}")
    if w.system_prompt:
        out.append(f"agent.init_config.system_prompt='{w.system_prompt}'")
    return out


class IterationProfile:
    """``BENCH_PROFILE=K:path``: torch.profiler over iteration K (1-based, rollout included) and
    every engine call of it (rows, seconds), written to ``path``: where an iteration's time goes.

    The in-process engine generates on the training thread (``run_sync``), so its operators are
    in the table with the update's; the engine calls' wall times are listed beside it. An
    engine on another thread or in another process is not in the table: py-spy (``--native``)
    sees it.
    """

    def __init__(self, spec: str) -> None:
        from agentfly.rollout.engines.host import EngineHost

        k, self.path = spec.split(":", 1)
        self.k, self.prof, self.calls = int(k), None, []
        real = EngineHost.generate

        def generate(host, prompts, sampling):
            start = time.perf_counter()
            out = real(host, prompts, sampling)
            self.calls.append((sum(len(o) for o in out), round(time.perf_counter() - start, 4)))
            return out

        EngineHost.generate = generate

    def start(self, iteration: int) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.calls.clear()
        if iteration == self.k:
            acts = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
            self.prof = profile(activities=acts)
            self.prof.__enter__()

    def stop(self) -> None:
        import torch

        if self.prof is None:
            return
        self.prof.__exit__(None, None, None)
        table = self.prof.key_averages()
        with open(self.path, "w") as f:
            f.write(f"engine calls (rows, s): {self.calls}\n")
            f.write(
                table.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70)
            )
            if torch.cuda.is_available():
                f.write(
                    table.table(
                        sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=70
                    )
                )
        self.prof = None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument(
        "--num-engines",
        type=int,
        default=None,
        help="None: agentfly fit's default; 0: in-process engine; N: a Ray pool of N",
    )
    ap.add_argument("--mode", default="sync", choices=["sync", "one_step_off", "async"])
    ap.add_argument("--staleness", type=int, default=1, help="trainer.max_staleness (async)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--enforce-eager",
        default=None,
        choices=["true", "false"],
        help="actor_rollout_ref.rollout.enforce_eager; unset: the engine's default",
    )
    ap.add_argument("--run-dir", default=None)
    args = ap.parse_args()
    w = WORKLOADS[args.workload]
    eager = None if args.enforce_eager is None else args.enforce_eager == "true"
    suffix = "" if args.device == "cpu" else f"-{args.device}"
    suffix += "" if args.num_engines is None else f"-engines{args.num_engines}"
    suffix += "" if eager is None else f"-eager{int(eager)}"
    suffix += {"sync": "", "one_step_off": "-1off"}.get(args.mode, f"-async{args.staleness}")
    run_dir = Path(
        args.run_dir or REPO / "bench" / "runs" / f"{w.name}-agentfly-{args.engine}{suffix}"
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("VLLM_CACHE_ROOT", str(run_dir / "vllm-cache"))
    # Ray's socket paths must stay under 107 bytes: a short folder of its own
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="afbench-ray-"))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    import lightning.pytorch as pl

    from agentfly.cli import load_config
    from agentfly.run.fit import build_trainer

    started = time.perf_counter()
    cfg = load_config(
        overrides(
            w,
            args.engine,
            run_dir,
            args.iterations,
            args.num_engines,
            args.device,
            args.mode,
            args.staleness,
            eager,
        )
    )
    trainer, module, datamodule, _ = build_trainer(cfg)
    memory = PeakRSS()
    spec = os.environ.get("BENCH_PROFILE")
    profiler = IterationProfile(spec) if spec else None

    class Gate(pl.Callback):
        """Waits for ``go`` before each iteration and reports the one that just ended."""

        def __init__(self) -> None:
            self.t0 = 0.0
            self.done = 0

        def _wait(self) -> None:
            if not wait_go(before_trim=datamodule.wait_rollouts_idle):
                raise SystemExit(0)
            memory.reset()
            if profiler is not None:
                profiler.start(self.done + 1)
            self.t0 = time.perf_counter()

        def on_train_start(self, trainer, pl_module) -> None:
            emit("ready", startup_s=round(time.perf_counter() - started, 2))
            self._wait()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            cuda_sync()
            wall = time.perf_counter() - self.t0
            if profiler is not None:
                profiler.stop()
            m = {k: float(v) for k, v in trainer.callback_metrics.items()}
            loop = datamodule.session.loop
            lt = dict(getattr(loop, "last_timing", {}) or {})
            rollout = m.get("timing/rollout_s", 0.0)
            gen = lt.get("generation_s", rollout)
            phases = {
                "generation": gen,
                "tools": lt.get("tools_s", 0.0),
                "reward": lt.get("reward_s", 0.0),
                "rollout_other": max(
                    0.0, rollout - gen - lt.get("tools_s", 0.0) - lt.get("reward_s", 0.0)
                ),
                "logprob": m.get("timing/old_log_prob_s", 0.0) + m.get("timing/reference_s", 0.0),
                "update": m.get("timing/update_s", 0.0),
                "weight_sync": m.get("timing/weight_sync_s", 0.0),
            }
            phases["other"] = max(0.0, wall - sum(phases.values()))
            mask = batch.response_mask
            sampled = int(mask.sum())
            att = batch.attention_mask
            p = int(batch.prompt_length)
            emit(
                "iter",
                wall_s=wall,
                samples=len(batch.index),
                gen_tokens=sampled,
                prompt_tokens=int(att[:, :p].sum()),
                seq_tokens=int(att.sum()),
                response_tokens=int(att[:, p:].sum()),
                turns=m.get("rollout/turns/mean"),
                tool_calls=m.get("rollout/tool_calls/mean"),
                reward=m.get("rollout/reward/mean"),
                phases=phases,
                peak_rss_gib=memory.gib(),
                peak_gpu_gib=memory.gpu_gib(),
            )
            self.done += 1
            self._wait()  # the parent says quit after the last one

    trainer.callbacks.append(Gate())
    try:
        trainer.fit(module, datamodule=datamodule)
    finally:
        datamodule.close()
    emit("done")


if __name__ == "__main__":
    main()
