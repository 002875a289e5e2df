"""Per-batch rollout statistics and the JSON form of a trajectory."""

from __future__ import annotations

import copy
import statistics
from collections import Counter
from dataclasses import asdict
from typing import Any

from agentfly.core.trajectory import Trajectory


def trajectory_record(traj: Trajectory, tokenizer: Any = None) -> dict[str, Any]:
    """One JSON-serialisable line per chain (messages as text, ids, mask, logprobs, reward...);
    each image as its grid, token count and digest, not its pixels."""
    bare = copy.copy(traj)
    bare.images = []
    rec = asdict(bare)
    rec["images"] = [
        {"grid_thw": list(i.grid_thw), "num_tokens": i.num_tokens, "digest": i.digest} for i in traj.images
    ]
    rec["tool_calls"] = [asdict(c) for c in traj.tool_calls]
    rec["num_tool_calls"] = traj.num_tool_calls
    if tokenizer is not None:  # the prompt as the model saw it: system prompt, tools' schemas, template
        rec["prompt_text"] = tokenizer.decode(traj.prompt_ids, skip_special_tokens=False)
        rec["response_text"] = tokenizer.decode(traj.response_ids, skip_special_tokens=False)
    return rec


def failure_counts(trajs: list[Trajectory], *, flat: bool = True) -> dict[str, Any]:
    """Failures among ``trajs``: ``failures/tool`` (tool calls that returned an error, the
    model's own among them) with ``failures/tool_kinds``, ``failures/reward`` (reward calls that
    failed) with ``failures/reward_kinds``, ``failures/chain`` (chains that ended on an error).
    The kinds are dicts, or with ``flat`` one number per kind (``failures/tool_kinds/timeout``),
    the form a logger takes."""
    out: dict[str, Any] = {
        "failures/tool": sum(1 for t in trajs for c in t.tool_calls if not c.ok),
        "failures/tool_kinds": dict(Counter(c.error for t in trajs for c in t.tool_calls if not c.ok)),
        "failures/reward": sum(1 for t in trajs if t.reward_failed),
        "failures/reward_kinds": dict(Counter(t.reward_error or "unknown" for t in trajs if t.reward_failed)),
        "failures/chain": sum(1 for t in trajs if t.finish_reason == "error"),
    }
    if flat:
        for counts in ("failures/tool_kinds", "failures/reward_kinds"):
            out.update({f"{counts}/{kind}": n for kind, n in out.pop(counts).items()})
    return out


def summarize(trajs: list[Trajectory]) -> dict[str, Any]:
    """Mean reward, accuracy (where the reward reports ``acc``), turns, tool use and failures.

    Failures by kind and chains by finish reason are counted twice: as a dict
    (``failures/tool_kinds``, ``failures/reward_kinds``, ``finish_reasons``) and as one number per
    kind (``failures/tool_kinds/timeout``, ``finish_reasons/prompt_too_long``...), the form a
    logger takes.
    """
    if not trajs:
        return {"chains": 0}
    rewards = [t.reward for t in trajs if t.reward is not None]
    out: dict[str, Any] = {
        "chains": len(trajs),
        "prompts": len({t.group_id for t in trajs}),
        "reward/mean": statistics.fmean(rewards) if rewards else None,
        "reward/std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "reward/min": min(rewards) if rewards else None,
        "reward/max": max(rewards) if rewards else None,
        "turns/mean": statistics.fmean(t.num_turns for t in trajs),
        "tool_calls/mean": statistics.fmean(t.num_tool_calls for t in trajs),
        "tool_call_rate": statistics.fmean(1.0 if t.tool_calls else 0.0 for t in trajs),
        "response_length/mean": statistics.fmean(sum(t.loss_mask) for t in trajs),
        "truncation_rate": statistics.fmean(1.0 if t.truncated else 0.0 for t in trajs),
        "finish_reasons": dict(Counter(t.finish_reason for t in trajs)),
        "tool_calls_per_tool": dict(Counter(c.name for t in trajs for c in t.tool_calls)),
        **failure_counts(trajs, flat=False),
        "first_error": next((t.error for t in trajs if t.error), None),
    }
    for counts in ("failures/tool_kinds", "failures/reward_kinds", "finish_reasons"):  # flat numbers, to log
        for kind, n in out[counts].items():
            out[f"{counts}/{kind}"] = n
    for key in sorted({k for t in trajs for k in t.harness}):  # harness chains' requests, breaks...
        out[f"harness/{key}"] = sum(t.harness.get(key, 0) for t in trajs)
    extras = sorted({k for t in trajs for k in t.reward_extras})
    for key in extras:
        vals = [float(t.reward_extras[key]) for t in trajs if key in t.reward_extras]
        out[f"reward_extras/{key}"] = statistics.fmean(vals)
    if "acc" in extras:
        out["accuracy"] = out["reward_extras/acc"]
    return out
