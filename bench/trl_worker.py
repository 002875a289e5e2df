"""TRL's ``GRPOTrainer`` on one workload, one gated iteration (one generation batch) at a time.

    bench/.venv/bin/python bench/trl_worker.py --workload w1

The same prompts as agentfly (agentfly's rendering, passed as text so the token ids match), the
same group size, limits, temperature, optimizer, precision and reward. W4's 4 mini-batches are
4 optimizer steps on one generation batch (``steps_per_generation``); an iteration here is all 4.
W2 uses TRL's own tool calling (``tools=[calculator]``,
``max_tool_calling_iterations=max_turns - 1``) with conversational prompts rendered by the
Qwen2.5 chat template (the one agentfly's ``qwen2.5`` template mirrors).
TRL's default ``gradient_checkpointing=True`` is turned off (``--gradient-checkpointing`` turns it
back on): agentfly does not checkpoint either, memory is ample, and off is TRL's faster setting.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _worker import PeakRSS, PhaseClock, cuda_sync, emit, wait_go
from workloads import REPO, WORKLOADS, iteration_rows, model_path, render_prompts


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly, or solve an equation in one unknown.

    Args:
        expression: the expression or equation, e.g. "(3 + 4) * 12" or "x**2 - 5*x + 6 = 0".

    Returns:
        The result, or an error message.
    """
    from agentfly.rollout.tools.calculator import CalculatorError, calculate

    try:
        return str(calculate(expression))
    except CalculatorError as e:
        return f"Error: {e}"


def _text(completion) -> tuple[str, bool]:
    """(final text, whether a tool was called) of a TRL completion (text or messages)."""
    if isinstance(completion, str):
        return completion, False
    used = any(m.get("role") == "tool" or m.get("tool_calls") for m in completion)
    texts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return (texts[-1] if texts else ""), used


def make_reward(tool_gated: bool):
    from agentfly.rollout.rewards.math_rewards import is_correct

    def math_reward(completions, answer, **_):
        out = []
        for c, a in zip(completions, answer, strict=True):
            text, used = _text(c)
            acc = float(is_correct(text, a))
            out.append(((1.0 if acc else 0.1) if used else 0.0) if tool_gated else acc)
        return out

    return math_reward


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--run-dir", default=None)
    ap.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="TRL's default; off here (agentfly does not checkpoint either, and memory is ample)",
    )
    args = ap.parse_args()
    w = WORKLOADS[args.workload]
    suffix = "" if args.device == "cpu" else f"-{args.device}"
    run_dir = Path(args.run_dir or REPO / "bench" / "runs" / f"{w.name}-trl{suffix}")
    run_dir.mkdir(parents=True, exist_ok=True)

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    started = time.perf_counter()
    path = model_path(w)
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = w.rows()
    # the prompts of iterations 0..n, in order (TRL then reads the dataset without shuffling)
    order = [i for k in range(args.iterations + 1) for i in iteration_rows(w, k)]
    tools = [calculator] if w.tools else None
    if tools:
        tokenizer.chat_template = (REPO / "agentfly/demo/model/chat_template.jinja").read_text()
        prompts = [
            [
                {"role": "system", "content": w.system_prompt},
                {"role": "user", "content": rows[i]["question"]},
            ]
            for i in order
        ]
    else:
        texts = render_prompts(w, tokenizer)
        prompts = [texts[i] for i in order]
    dataset = Dataset.from_dict(
        {"prompt": prompts, "answer": [str(rows[i]["answer"]) for i in order]}
    )

    import trl.trainer.utils as trl_utils

    # TRL scores every position in tiles of 32768 rows on CPU: a (32768, 49152) fp32 tile is
    # 6.4 GB, more than W2's machine holds; smaller tiles give the same numbers
    trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = 4096
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)  # bf16 too: fp32 master
    config = GRPOConfig(
        output_dir=str(run_dir),
        # w.mini_batches optimizer steps per iteration, each over w.mini completions in
        # w.mini // w.micro forward/backward passes; TRL generates for all w.samples at once
        per_device_train_batch_size=w.micro,
        gradient_accumulation_steps=w.mini // w.micro,
        steps_per_generation=(w.mini // w.micro) * w.mini_batches,
        num_generations=w.group,
        max_completion_length=w.max_new_tokens,
        temperature=w.temperature,
        top_p=1.0,
        learning_rate=w.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        max_grad_norm=1.0,
        beta=0.0,  # no reference model
        num_iterations=1,  # one PPO epoch
        epsilon=0.2,
        loss_type="dapo",  # token mean over the batch = agentfly's token-mean
        scale_rewards="group",
        use_cpu=args.device == "cpu",
        gradient_checkpointing=args.gradient_checkpointing,
        bf16=w.precision == "bf16",  # fp32 master weights, bf16 autocast (generation included)
        fp16=False,
        max_steps=(args.iterations + 1) * w.mini_batches,
        shuffle_dataset=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=42,
        max_tool_calling_iterations=(w.max_turns - 1) if tools else None,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=make_reward(tool_gated=bool(tools)),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        tools=tools,
    )

    clock = PhaseClock()

    def timed(name, fn, when=None):
        def wrapper(*a, **kw):
            if when is not None and not when():
                return fn(*a, **kw)
            with clock(name):
                return fn(*a, **kw)

        return wrapper

    trainer._generate_single_turn = timed("generation", trainer._generate_single_turn)
    trainer._generate = timed("generate_all", trainer._generate)
    trainer._calculate_rewards = timed("reward", trainer._calculate_rewards)
    trainer._generate_and_score_completions = timed(
        "rollout", trainer._generate_and_score_completions
    )
    trainer._get_per_token_logps_and_entropies = timed(
        "logprob",
        trainer._get_per_token_logps_and_entropies,
        when=lambda: not torch.is_grad_enabled(),
    )
    memory = PeakRSS()
    last: dict = {}

    def capture(fn):
        def wrapper(*a, **kw):
            out = fn(*a, **kw)
            last.update(out)
            return out

        return wrapper

    trainer._generate_and_score_completions = capture(trainer._generate_and_score_completions)
    state = {"t0": 0.0, "done": 0, "steps": 0}

    def wait() -> None:
        if not wait_go():
            raise SystemExit(0)
        memory.reset()
        clock.take()
        state["t0"] = time.perf_counter()

    class Gate(TrainerCallback):
        def on_train_begin(self, args_, st, control, **kw):
            emit("ready", startup_s=round(time.perf_counter() - started, 2))
            wait()

        def on_step_end(self, args_, st, control, **kw):
            state["steps"] += 1
            if state["steps"] % w.mini_batches:  # an iteration is w.mini_batches optimizer steps
                return
            cuda_sync()
            wall = time.perf_counter() - state["t0"]
            t = clock.take()
            gen = t.get("generation", 0.0)
            tools_s = max(0.0, t.get("generate_all", gen) - gen)
            rollout = t.get("rollout", 0.0)
            phases = {
                "generation": gen,
                "tools": tools_s,
                "reward": t.get("reward", 0.0),
                "logprob": t.get("logprob", 0.0),
            }
            phases["rollout_other"] = max(0.0, rollout - sum(phases.values()))
            phases["update"] = max(0.0, wall - rollout)
            phases["weight_sync"] = 0.0
            phases["other"] = 0.0
            cmask = last.get("completion_mask")
            pmask = last.get("prompt_mask")
            tool_mask = last.get("tool_mask")
            sampled = cmask if tool_mask is None else cmask * tool_mask
            emit(
                "iter",
                wall_s=wall,
                samples=int(cmask.shape[0]),
                gen_tokens=int(sampled.sum()),
                prompt_tokens=int(pmask.sum()),
                response_tokens=int(cmask.sum()),
                seq_tokens=int(pmask.sum() + cmask.sum()),
                phases=phases,
                peak_rss_gib=memory.gib(),
                peak_gpu_gib=memory.gpu_gib(),
            )
            state["done"] += 1
            wait()

    trainer.add_callback(Gate())
    trainer.train()
    emit("done")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
