"""reasoning-gym's task generators as a data source, scored by each generator's own ``score_answer``.

:func:`reasoning_gym_rows` turns a generator (``basic_arithmetic``, ``leg_counting``... 105 of
them) into task rows: ``question``, ``answer``, ``metadata`` (made JSON-safe: tuples become
lists) and ``dataset``. :func:`score_answer` scores an answer against such a row with the
generator's scorer (``reasoning_gym.get_score_answer_fn``), a value in [0, 1]. The environment is
one step: ``reset`` shows the question, ``step(answer)`` returns the score and ends the episode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentfly.envs.base import Env, EnvUnavailable, EnvUsageError, StepResult, register_env, require


def _import_reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError as e:
        raise EnvUnavailable(
            f"reasoning_gym needs the reasoning-gym package ({e}); install agentfly's envs extra: "
            "pip install 'agentfly[envs]'"
        ) from e
    return reasoning_gym


def reasoning_gym_rows(dataset: str, size: int, seed: int, **config: Any) -> list[dict[str, Any]]:
    """``size`` task rows of the generator ``dataset`` (the same for the same ``seed``);
    ``config`` goes to the generator (its difficulty settings)."""
    reasoning_gym = _import_reasoning_gym()
    if dataset not in reasoning_gym.factory.DATASETS:
        raise ValueError(f"unknown reasoning-gym dataset {dataset!r} (known: {', '.join(sorted(reasoning_gym.factory.DATASETS))})")
    generated = reasoning_gym.create_dataset(dataset, size=size, seed=seed, **config)
    return [{**json.loads(json.dumps(item)), "dataset": dataset} for item in generated]


def score_answer(answer: str | None, row: Mapping[str, Any]) -> float:
    """The score in [0, 1] that the row's generator gives ``answer``."""
    reasoning_gym = _import_reasoning_gym()
    name = row.get("dataset") or (row.get("metadata") or {}).get("source_dataset")
    if not name:
        raise ValueError(f"a reasoning-gym row names its generator in 'dataset' or metadata.source_dataset (it has {sorted(row)})")
    entry = {"question": row.get("question"), "answer": row.get("answer"), "metadata": row.get("metadata") or {}}
    return float(reasoning_gym.get_score_answer_fn(name)(answer, entry))


@register_env("reasoning_gym")
class ReasoningGymEnv(Env):
    """One question per episode (a row of :func:`reasoning_gym_rows`), answered in one step."""

    def __init__(self) -> None:
        super().__init__(max_steps=1)
        _import_reasoning_gym()
        self._row: dict[str, Any] = {}

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        question = str(require(task, "question", self.name))
        if not (task.get("dataset") or (task.get("metadata") or {}).get("source_dataset")):
            raise EnvUsageError("reasoning_gym: the task row needs a 'dataset' (the generator's name)")
        self._row = task
        return question, {"goal": question}

    def _step(self, action: str) -> StepResult:
        score = score_answer(action, self._row)
        return StepResult(f"Score: {score:g}", score, terminated=True, info={"score": score, "won": score >= 1.0})
