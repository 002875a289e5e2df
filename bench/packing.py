"""The packed update pass (``use_remove_padding``) against the padded one it replaces, per
attention kind: forward + backward of the response log-probs, seconds and peak memory.

    .venv/bin/python bench/packing.py                  # SmolLM2-135M, 8 rows of mixed lengths
    .venv/bin/python bench/packing.py --model demo     # the demo's tiny model, quick

The batch: ``--rows`` rows, prompts left-padded (lengths spread evenly over 40..280 tokens),
responses right-padded (16..128), so about half the padded positions are padding. Each arm runs
in a process of its own (``--arm``): the model loaded, one pass to warm up, then its peak
resident memory above the memory before that pass (``ru_maxrss``: the pass's own allocations,
the attention mask included) and the median of ``--reps`` timed passes. The arms:

- ``padded``: :func:`agentfly.modules.response_logits.response_logits` (no shared prompts, as a
  packed pass has none), under the attention named;
- ``packed``: :func:`agentfly.modules.packing.packed_response_logits` under the same attention
  (``agentfly_sdpa``: row by row; ``sdpa``/``eager``: transformers' (N, N) block mask).

Results: bench/README.md ("Packing").
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def batch(rows: int, vocab: int):
    import torch

    p_lens = [40 + (240 * i) // max(rows - 1, 1) for i in range(rows)]
    t_lens = [16 + (112 * ((i * 5) % rows)) // max(rows - 1, 1) for i in range(rows)]
    p, t = max(p_lens), max(t_lens)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, p + t), generator=g)
    mask = torch.zeros(rows, p + t, dtype=torch.long)
    for r, (a, b) in enumerate(zip(p_lens, t_lens, strict=True)):
        mask[r, p - a : p + b] = 1
    return ids * mask, mask, (mask.cumsum(-1) - 1).clamp(min=0), p, t


def arm(model_path: str, attention: str, packed: bool, rows: int, reps: int) -> dict:
    import torch

    from agentfly.modules.losses import logprobs_from_logits
    from agentfly.modules.packing import packed_response_logits
    from agentfly.modules.policy_model import build_policy_model
    from agentfly.modules.response_logits import response_logits
    from agentfly.modules.settings import ModelSettings

    torch.manual_seed(0)
    model = build_policy_model(ModelSettings(path=model_path, attn_implementation=attention)).train()
    ids, mask, pos, p, t = batch(rows, model.config.vocab_size)
    keep = mask[:, p:].float()

    def once() -> float:
        start = time.perf_counter()
        if packed:
            logits = packed_response_logits(model, ids, mask, pos, p)
        else:
            logits = response_logits(model, ids, mask, pos, p, t, share_prompts=False)
        loss = (logprobs_from_logits(logits.float(), ids[:, p:]) * keep).sum()
        loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20

    before = rss_mb()
    once()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    times = [once() for _ in range(reps)]
    return {"attention": attention, "packed": packed, "seconds": statistics.median(times),
            "peak_mb": peak, "real_tokens": int(mask.sum()), "padded_positions": mask.numel()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2 | demo | a checkpoint folder")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--attention", nargs="*", default=["agentfly_sdpa", "sdpa", "eager"])
    ap.add_argument("--arm", help=argparse.SUPPRESS)  # attention:packed, in a process of its own
    args = ap.parse_args()
    if args.model == "smollm2":
        from agentfly.models.smollm2 import prepare_smollm2

        path = str(prepare_smollm2())
    elif args.model == "demo":
        path = str(REPO / "agentfly/demo/model")
    else:
        path = args.model
    if args.arm:
        attention, packed = args.arm.split(":")
        print(json.dumps(arm(path, attention, packed == "1", args.rows, args.reps)))
        return
    results = []
    for attention in args.attention:
        for packed in ("0", "1"):
            out = subprocess.run([sys.executable, __file__, "--model", path, "--rows", str(args.rows),
                                  "--reps", str(args.reps), "--arm", f"{attention}:{packed}"],
                                 capture_output=True, text=True, check=True, timeout=3600)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    r0 = results[0]
    print(f"model {path}: {args.rows} rows, {r0['real_tokens']} real tokens in {r0['padded_positions']} "
          f"padded positions; forward + backward, median of {args.reps}")
    print("| attention | padded s | packed s | packed / padded | padded peak MB | packed peak MB |")
    print("|---|---|---|---|---|---|")
    for padded, packed in zip(results[::2], results[1::2], strict=True):
        print(f"| {padded['attention']} | {padded['seconds']:.3f} | {packed['seconds']:.3f} | "
              f"{packed['seconds'] / padded['seconds']:.2f} | {padded['peak_mb']:.0f} | {packed['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()
