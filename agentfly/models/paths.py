"""Model paths checked before anything loads: a missing checkpoint fails in the plan, by key.

A model path is either a local directory or a Hugging Face repo id (``org/name``). Without this
check a typo surfaces only when an engine actor calls ``from_pretrained``, tens of seconds into
the run and inside Ray, as Hugging Face's "Repo id must be in the form..." message. Here:

- a path that exists is accepted as it is;
- a path that looks local (starts with ``/``, ``./``, ``../`` or ``~``, or is not a valid repo
  id) and does not exist is refused, naming the key and the path;
- a repo id is accepted when the hub may be reached; when it may not (``HF_HUB_OFFLINE`` or
  ``TRANSFORMERS_OFFLINE`` set), it must be in the local Hugging Face cache. The network is never
  asked: whether a repo exists online is left to the download.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from agentfly.core.errors import ConfigError

# huggingface_hub's rule: one optional namespace, names of word characters, '.', '-'
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_LOCAL_PREFIXES = ("/", "./", "../", "~")


def _offline() -> bool:
    return any(
        os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _cached(repo_id: str) -> bool:
    """The repo's ``config.json`` is in the local Hugging Face cache (no network)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def model_path_problem(key: str, path: str) -> str | None:
    """Why ``path`` (the value of ``key``) cannot be loaded, or None when it can or may."""
    if Path(path).expanduser().exists():
        return None
    looks_local = path.startswith(_LOCAL_PREFIXES) or not _REPO_ID.match(path) or ".." in path
    if looks_local:
        return f"{key}={path!r}: no such file or directory"
    if _offline() and not _cached(path):
        return (
            f"{key}={path!r} is neither a local directory nor in the local Hugging Face cache, "
            "and the hub may not be reached (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set); "
            "download it first or give a local path"
        )
    return None


def check_model_paths(cfg: Any, needs_critic: bool) -> None:
    """Every model path the run will load exists (or is a repo id that may be downloaded).

    Args:
        cfg: the composed config.
        needs_critic: the estimator trains a critic, so ``critic.model.path`` is loaded.

    Raises:
        ConfigError: naming each key and path that cannot be loaded.
    """
    keys = ["actor_rollout_ref.model.path"] + (["critic.model.path"] if needs_critic else [])
    errors = []
    for key in keys:
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        if node:
            problem = model_path_problem(key, str(node))
            if problem:
                errors.append(problem)
    if errors:
        raise ConfigError(errors)
