"""Before/after of each optimisation, in one process, alternating, on the workloads' shapes.

    bench/.venv/bin/python bench/micro.py --what update --model smollm2 --reps 3
    bench/.venv/bin/python bench/micro.py --what generate --model demo --reps 5

``update``: one forward + backward of the policy loss on a W1-shaped batch (8 prompts x 4
chains, the workload's prompt lengths, 64 response tokens): full logits with the entropy in the
graph against :func:`agentfly.modules.response_logits.response_logits` (LM head on response
positions only, each prompt encoded once, entropy without gradient).
``generate``: the transformers engine at revision ``--rev`` (``git show
<rev>:agentfly/rollout/engines/hf.py``, its file name there) against the current one, on 8
prompts x 4 chains sent as 32 separate seeded requests (as the agent loop sends them).
``gqa``: transformers' ``sdpa`` attention (grouped K/V copied to every head under a mask) against
:mod:`agentfly.models.attention`'s ``agentfly_sdpa`` (kept grouped), with the current engine and
update path: generation of the workload's 32 requests, then the update's forward + backward.
``kvcache``: the engine with transformers' ``DynamicCache`` (a ``torch.cat`` of the whole cache
per layer per step) against its growing cache (one column written in place), same requests.
``prefix``: the transformers engine without and with its prefix cache on multi-turn chains: the
workload's first 8 prompts x 3 chains, 5 turns of 20 sampled tokens, each next prompt the last
one + its tokens + a ~65-token observation (a whole sequence of calls timed).
``thread``: an in-process engine pool generating on a daemon thread (``asyncio.run``) against
generating on the calling thread (``run_sync``), each generation right after an update step on
the calling thread, as in training; the generation is timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workloads import REPO, WORKLOADS, iteration_rows, model_path, render_prompts  # noqa: E402


def old_module(rev: str, rel: str, name: str, edits: dict[str, str] | None = None):
    """Import ``rel`` as it was at ``rev`` (e.g. the engine before the optimisations)."""
    source = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout
    for old, new in (edits or {}).items():
        source = source.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def update_step(model, batch, new: bool) -> float:
    import torch

    from agentfly.modules.losses import entropy_from_logits, logprobs_from_logits
    from agentfly.modules.response_logits import response_logits

    ids, att, pos, p, t = batch
    start = time.perf_counter()
    if new:
        logits = response_logits(model, ids, att, pos, p, t)
        logp = logprobs_from_logits(logits, ids[:, p:])
        with torch.no_grad():
            entropy_from_logits(logits.detach())
    else:
        logits = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits
        logits = logits[:, p - 1 : p - 1 + t].float() / 1.0
        logp = logprobs_from_logits(logits, ids[:, p:])
        entropy_from_logits(logits)  # in the graph
    mask = att[:, p:].float()
    loss = -(logp * mask).sum() / mask.sum()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def make_batch(w, tokenizer, t: int = 64):
    import torch

    texts = render_prompts(w, tokenizer)
    prompts = [tokenizer(texts[i])["input_ids"] for i in iteration_rows(w, 0)]
    p = max(len(x) for x in prompts)
    g = torch.Generator().manual_seed(0)
    rows_ids, rows_mask = [], []
    for prompt in prompts:
        for _ in range(w.group):
            pad = p - len(prompt)
            resp = torch.randint(0, tokenizer.vocab_size, (t,), generator=g).tolist()
            rows_ids.append([tokenizer.pad_token_id or 0] * pad + prompt + resp)
            rows_mask.append([0] * pad + [1] * (len(prompt) + t))
    ids, att = torch.tensor(rows_ids), torch.tensor(rows_mask)
    return ids, att, (att.cumsum(-1) - 1).clamp(min=0), p, t


def alternate(reps: int, what: str, run) -> dict[str, list]:
    """``run("before")`` and ``run("after")`` ``reps`` times each, the order swapped every round.

    ``run`` returns seconds, or (seconds, tokens); returns {"before"/"after": [results]}.
    """
    results: dict[str, list] = {"before": [], "after": []}
    for r in range(reps):
        for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
            out = run(name)
            results[name].append(out)
            seconds, tokens = out if isinstance(out, tuple) else (out, None)
            shown = f", {tokens} tokens" if tokens is not None else ""
            print(f"{what} {name}: {seconds:.2f} s{shown} (load {os.getloadavg()[0]:.2f})", flush=True)
    return results


def seeded_requests(w, tokenizer) -> tuple[list[list[int]], list]:
    """The first iteration's prompts, ``w.group`` times each, as 32 separately seeded requests
    (as the agent loop sends them)."""
    from agentfly.rollout.engines.base import SamplingParams

    texts = render_prompts(w, tokenizer)
    prompts = [tokenizer(texts[i])["input_ids"] for i in iteration_rows(w, 0)]
    requests = [p for p in prompts for _ in range(w.group)]
    params = [SamplingParams(temperature=1.0, max_tokens=w.max_new_tokens, seed=1000 + i)
              for i in range(len(requests))]
    return requests, params


def compare_generation(reps: int, generate, requests, params) -> None:
    """Time ``generate(name)(requests, params)`` for "before" and "after", alternating."""

    def run(name: str) -> tuple[float, int]:
        start = time.perf_counter()
        out = generate(name)(requests, params)
        return time.perf_counter() - start, sum(len(o[0].token_ids) for o in out)

    results = alternate(reps, "generate", run)
    report("generation (32 seeded requests)",
           {k: [s for s, _ in v] for k, v in results.items()},
           {k: [n for _, n in v] for k, v in results.items()})


def bench_update(w, reps: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_path(w)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    batch = make_batch(w, tokenizer)
    update_step(model, batch, True)
    times = alternate(reps, "update", lambda name: update_step(model, batch, name == "after"))
    report("update (forward + backward)", times)


def bench_generate(w, reps: int, rev: str) -> None:
    import torch

    old_module(rev, "agentfly/rollout/engines/sampling.py", "agentfly.rollout.engines._old_sampling")
    old = old_module(
        rev, "agentfly/rollout/engines/hf.py", "agentfly.rollout.engines._old_hf",
        {"agentfly.rollout.engines.sampling": "agentfly.rollout.engines._old_sampling",
         '@register_engine("hf", aliases=("transformers",))': ""},
    )
    from agentfly.rollout.engines.transformers_engine import TransformersEngine

    engines = {"before": old.HFEngine(model_path(w), device="cpu"), "after": TransformersEngine(model_path(w), device="cpu")}
    requests, params = seeded_requests(w, engines["after"].tokenizer)
    torch.manual_seed(0)
    compare_generation(reps, lambda name: engines[name].generate, requests, params)


def bench_gqa(w, reps: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from agentfly.models.attention import use_grouped_sdpa
    from agentfly.rollout.engines.transformers_engine import TransformersEngine

    path = model_path(w)
    engines = {"before": TransformersEngine(path, device="cpu", attn_implementation="sdpa"), "after": TransformersEngine(path, device="cpu")}
    tokenizer = engines["after"].tokenizer
    requests, params = seeded_requests(w, tokenizer)
    compare_generation(reps, lambda name: engines[name].generate, requests, params)
    engines.clear()  # free the engines' models before loading the update's

    models = {
        "before": AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train(),
        "after": use_grouped_sdpa(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)).train(),
    }
    ids, att, pos, p, t = make_batch(w, tokenizer)
    micro = w.micro

    def update(name: str) -> float:
        return sum(update_step(models[name], (ids[i : i + micro], att[i : i + micro], pos[i : i + micro], p, t), True)
                   for i in range(0, len(ids), micro))

    update("after")
    report(f"update (forward + backward, micro-batches of {micro})", alternate(reps, "update", update))


def bench_kvcache(w, reps: int) -> None:
    from transformers import DynamicCache

    from agentfly.rollout.engines import kv_cache, transformers_engine

    engine = transformers_engine.TransformersEngine(model_path(w), device="cpu")
    growing = kv_cache.growing_cache
    caches = {"before": lambda model, reserve: DynamicCache(config=model.config), "after": growing}
    requests, params = seeded_requests(w, engine.tokenizer)

    def generate(name: str):
        kv_cache.growing_cache = caches[name]
        return engine.generate

    try:
        compare_generation(reps, generate, requests, params)
    finally:
        kv_cache.growing_cache = growing


def bench_prefix(w, reps: int, turns: int = 5, chains: int = 3) -> None:
    from agentfly.rollout.engines.base import SamplingParams
    from agentfly.rollout.engines.transformers_engine import TransformersEngine

    engines = {
        "before": TransformersEngine(model_path(w), device="cpu", enable_prefix_caching=False),
        "after": TransformersEngine(model_path(w), device="cpu"),
    }
    tokenizer = engines["after"].tokenizer
    texts = render_prompts(w, tokenizer)
    first = [tokenizer(texts[i])["input_ids"] for i in iteration_rows(w, 0)]
    scene = (" You are in a small kitchen. A fridge stands to the north, a door leads east, and a"
             " wooden table holds a knife, an apple and a note that says: the coin is in the chest.")

    spent: dict[str, float] = {}
    for engine in engines.values():  # the forward passes' time, prefills (they keep 1 logit) apart
        engine.model.forward = timed_forward(engine.model.forward, spent)

    def run(name: str) -> tuple[float, int]:
        engine = engines[name]
        engine.sleep()  # empties the prefix cache: every round starts cold
        spent.clear()
        prompts = first
        params = [SamplingParams(n=chains, temperature=1.0, max_tokens=20, ignore_eos=True, seed=i)
                  for i in range(len(prompts))]
        prefilled = engine.prefill_stats.prefilled_tokens
        start, cpu = time.perf_counter(), time.process_time()
        for turn in range(turns):
            chains_now = [(p, o) for p, per in zip(prompts, engine.generate(prompts, params), strict=True)
                          for o in per]
            prompts = [p + o.token_ids + tokenizer(f"\nObservation {turn}.{c}:{scene}")["input_ids"]
                       for c, (p, o) in enumerate(chains_now)]
            params = [SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True, seed=100 * turn + c)
                      for c in range(len(prompts))]
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"  {name}: CPU time {cpu:.1f} s, prompt tokens prefilled {engine.prefill_stats.prefilled_tokens - prefilled}, "
              f"last prompts {min(map(len, prompts))}-{max(map(len, prompts))} tokens, prefill "
              f"{spent.get('prefill', 0):.1f} s, decode {spent.get('decode', 0):.1f} s", flush=True)
        return seconds, sum(map(len, prompts))

    results = alternate(reps, "chains", run)
    report(f"{len(first) * chains} chains x {turns} turns",
           {k: [s for s, _ in v] for k, v in results.items()})


def timed_forward(forward, spent: dict[str, float]):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        out = forward(*args, **kwargs)
        kind = "prefill" if "logits_to_keep" in kwargs else "decode"
        spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - start
        return out

    return timed


def bench_thread(w, reps: int) -> None:
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM

    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.engines.caller_thread import run_sync

    pool = EnginePool("hf", num_engines=0, engine_kwargs={"model": model_path(w), "device": "cpu"})
    requests, params = seeded_requests(w, pool.tokenizer)
    model = AutoModelForCausalLM.from_pretrained(model_path(w), dtype=torch.float32).train()
    batch = make_batch(w, pool.tokenizer)
    paths = {"before": asyncio.run, "after": lambda coro: run_sync(pool, coro)}

    async def chains():  # one request per chain, as the agent loop sends them
        return await asyncio.gather(
            *(pool.generate([r], p) for r, p in zip(requests, params, strict=True))
        )

    def run(name: str) -> tuple[float, int]:
        update_step(model, batch, True)  # torch work on this thread first, as the trainer's update
        start = time.perf_counter()
        out = paths[name](chains())
        return time.perf_counter() - start, sum(len(o[0][0].token_ids) for o in out)

    results = alternate(reps, "generate", run)
    report("generation after an update (32 seeded requests)",
           {k: [s for s, _ in v] for k, v in results.items()},
           {k: [n for _, n in v] for k, v in results.items()})
    pool.shutdown()


def report(what: str, times: dict[str, list[float]], tokens: dict[str, list[int]] | None = None) -> None:
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    line = f"{what}: before {b:.2f} s, after {a:.2f} s (medians of {len(times['after'])}): {b / a:.2f}x"
    if tokens:
        tb, ta = statistics.median(tokens["before"]), statistics.median(tokens["after"])
        line += f"; tokens/s {tb / b:.1f} -> {ta / a:.1f} ({(ta / a) / (tb / b):.2f}x)"
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", choices=["update", "generate", "gqa", "kvcache", "prefix", "thread"], required=True)
    ap.add_argument("--workload", default="w1", choices=sorted(WORKLOADS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rev", default="06fed29", help="git revision holding the code before the work")
    args = ap.parse_args()
    w = WORKLOADS[args.workload]
    if args.what == "update":
        bench_update(w, args.reps)
    elif args.what == "gqa":
        bench_gqa(w, args.reps)
    elif args.what == "kvcache":
        bench_kvcache(w, args.reps)
    elif args.what == "prefix":
        bench_prefix(w, args.reps)
    elif args.what == "thread":
        bench_thread(w, args.reps)
    else:
        bench_generate(w, args.reps, args.rev)


if __name__ == "__main__":
    main()
