"""Which transformers class loads a checkpoint as a generating model.

A text model loads as ``AutoModelForCausalLM``; a vision-language one (its config has a
``vision_config``: Qwen2.5-VL, Qwen3-VL...) as ``AutoModelForImageTextToText``, whose forward
takes ``pixel_values`` and ``image_grid_thw`` beside the ids and returns the same logits. The
trainer and the engines load through here, so both hold the same class and parameter names.
"""

from __future__ import annotations

import os
from typing import Any


def is_vision_model(path: str | os.PathLike[str], trust_remote_code: bool = False) -> bool:
    """Whether the checkpoint at ``path`` is a vision-language model."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(os.fspath(path), trust_remote_code=trust_remote_code)
    return getattr(config, "vision_config", None) is not None


def causal_lm_class(path: str | os.PathLike[str], trust_remote_code: bool = False) -> Any:
    """``AutoModelForImageTextToText`` for a vision-language checkpoint, else
    ``AutoModelForCausalLM``."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    vision = is_vision_model(path, trust_remote_code)
    return AutoModelForImageTextToText if vision else AutoModelForCausalLM
