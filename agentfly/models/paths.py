"""Model paths checked before anything loads: a missing checkpoint fails in the plan, by key.

A model path is either a local directory or a Hugging Face repo id (``org/name``). Without this
check a typo surfaces only when an engine actor calls ``from_pretrained``, tens of seconds into
the run and inside Ray, as Hugging Face's "Repo id must be in the form..." message. Here:

- a path that exists is accepted as it is;
- a path that looks local (starts with ``/``, ``./``, ``../`` or ``~``, or is not a valid repo
  id) and does not exist is refused, naming the key and the path;
- a repo id is accepted when the hub may be reached; when it may not (``HF_HUB_OFFLINE`` or
  ``TRANSFORMERS_OFFLINE`` set), it must be in the local Hugging Face cache. This check never asks
  the network (:func:`~agentfly.run.plan.plan_run` stays cheap).

Before a run starts, :func:`resolve_model_paths` turns each repo id into a local folder, once:
the Hub is asked whether the repo exists (within :data:`HUB_TIMEOUT_S`) and the snapshot is
downloaded (or found complete in the cache); where the Hub cannot be reached, the cached snapshot
is used. A repo that does not exist, or that is neither cached nor reachable, stops the run there,
naming the key, the id and why; the engines, the module and the tokenizer then load the folder
(no process of the run asks the Hub again, nor waits on it).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from agentfly.core.errors import ConfigError

logger = logging.getLogger(__name__)

HUB_TIMEOUT_S = 10.0  # how long the Hub may take to answer whether a repo exists
# weights in other formats than the one the loaders take (safetensors first, else .bin)
_OTHER_FORMATS = ["*.h5", "*.msgpack", "*.onnx", "*.gguf", "*.ot", "*.tflite", "original/*"]
_TORCH_PICKLES = ["*.bin", "*.pt", "*.pth"]

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


def _looks_local(path: str) -> bool:
    """A path, not a repo id: it starts like one, or is no valid repo id."""
    return path.startswith(_LOCAL_PREFIXES) or not _REPO_ID.match(path) or ".." in path


def model_path_problem(key: str, path: str) -> str | None:
    """Why ``path`` (the value of ``key``) cannot be loaded, or None when it can or may."""
    if Path(path).expanduser().exists():
        return None
    if _looks_local(path):
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
    keys = _model_keys(needs_critic)
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


def model_context(path: str | Path) -> int | None:
    """The longest sequence a local model's ``config.json`` admits (``max_position_embeddings``,
    a vision-language model's in its ``text_config``); None when it says none or is not there."""
    import json

    file = Path(str(path)).expanduser() / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    n = config.get("max_position_embeddings") or (config.get("text_config") or {}).get("max_position_embeddings")
    return int(n) if isinstance(n, int) and n > 0 else None


def check_context(cfg: Any) -> None:
    """``agent.init_config.max_model_len`` fits the actor's context: an engine serves no longer
    a sequence than the model's positions, so a longer setting would let prompts through that no
    chain can continue (each failing as an error, the batch lost).

    Raises:
        ConfigError: naming the key, the model and its ``max_position_embeddings``.
    """
    wanted = cfg.agent.init_config.max_model_len
    context = model_context(str(cfg.actor_rollout_ref.model.path))
    if wanted is not None and context is not None and int(wanted) > context:
        raise ConfigError(
            f"agent.init_config.max_model_len={wanted} is longer than the model's context: "
            f"{cfg.actor_rollout_ref.model.path}/config.json says max_position_embeddings={context}; "
            f"set it to at most {context} (unset: the model's)"
        )


def _model_keys(needs_critic: bool) -> list[str]:
    return ["actor_rollout_ref.model.path"] + (["critic.model.path"] if needs_critic else [])


def _cached_snapshot(key: str, repo_id: str, why: str) -> str:
    """The repo's snapshot folder in the local cache, or a ConfigError saying ``why`` the Hub
    could not be used instead."""
    from huggingface_hub import constants, snapshot_download

    try:
        folder = snapshot_download(repo_id, local_files_only=True)
    except OSError:  # not cached (LocalEntryNotFoundError), or cached in part
        folder = None
    if folder is None or not (Path(folder) / "config.json").is_file():
        raise ConfigError(
            f"{key}={repo_id!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}), "
            f"and {why}; download it where the Hub is reachable (hf download {repo_id}) or give a "
            "local path"
        )
    return folder


def hub_snapshot(key: str, repo_id: str, timeout_s: float = HUB_TIMEOUT_S) -> str:
    """The local folder of the Hub repo ``repo_id`` (the value of ``key``): downloaded where the
    Hub is reachable, else the cached snapshot.

    Raises:
        ConfigError: the repo does not exist (or may not be read without a token), or it is not
            cached and the Hub cannot be reached within ``timeout_s`` (or may not be:
            ``HF_HUB_OFFLINE``); the message names the key, the id and why.
    """
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError

    if _offline():
        return _cached_snapshot(key, repo_id, "the Hub may not be reached (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set)")
    try:
        info = HfApi().model_info(repo_id, timeout=timeout_s)
    except RepositoryNotFoundError as err:
        raise ConfigError(
            f"{key}={repo_id!r}: no such model on the Hugging Face Hub ({_hub_answer(err)}); check "
            "the id, or give a local path (a private or gated repo needs a token: hf auth login, "
            "or HF_TOKEN)"
        ) from None
    except Exception as err:  # the Hub did not answer: a connection error, a timeout, a 5xx
        why = f"the Hub cannot be reached ({type(err).__name__}: {_first_line(err)})"
        folder = _cached_snapshot(key, repo_id, why)
        logger.warning("%s=%s: %s; using the cached snapshot %s", key, repo_id, why, folder)
        return folder
    files = [s.rfilename for s in info.siblings or []]
    ignored = _OTHER_FORMATS + (_TORCH_PICKLES if any(f.endswith(".safetensors") for f in files) else [])
    return snapshot_download(repo_id, revision=info.sha, ignore_patterns=ignored, etag_timeout=timeout_s)


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [""])[0]


def _hub_answer(err: Exception) -> str:
    """``the Hub answered 404: Repository Not Found`` from a Hub HTTP error."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    said = getattr(err, "server_message", None) or _first_line(err)
    return f"the Hub answered {status}: {said.strip()}" if status else said


def resolve_model_paths(cfg: Any, needs_critic: bool) -> Any:
    """``cfg`` with each model path that is a Hub repo id replaced by its local folder
    (:func:`hub_snapshot`); ``cfg`` itself when every path is local.

    Raises:
        ConfigError: a repo id that cannot be had (:func:`hub_snapshot`). A path that looks local
            is left to :func:`check_model_paths`.
    """
    from omegaconf import OmegaConf, read_write

    found: dict[str, str] = {}
    for key in _model_keys(needs_critic):
        path = OmegaConf.select(cfg, key)
        if not path or Path(str(path)).expanduser().exists() or _looks_local(str(path)):
            continue
        found[key] = hub_snapshot(key, str(path))
    if not found:
        return cfg
    resolved = cfg.copy()
    with read_write(resolved):
        for key, folder in found.items():
            OmegaConf.update(resolved, key, folder)
    return resolved
