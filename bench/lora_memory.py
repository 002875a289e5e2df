"""The LightningModule's parameter memory with a KL term, full fine-tuning against LoRA: bytes of
every parameter and buffer of the actor and the reference, each storage once
(:func:`agentfly.modules.lora.parameter_bytes`), after ``configure_model``.

    python bench/lora_memory.py [MODEL_DIR] [--rank 16]

MODEL_DIR defaults to the demo model; ``$(python -m agentfly.models.smollm2)`` gives SmolLM2-135M.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import agentfly
from agentfly.modules.lora import parameter_bytes
from agentfly.modules.rl_module import AgentRLModule
from agentfly.modules.settings import KLSettings, LoraSettings, ModelSettings, UpdateSettings

DEMO_MODEL_DIR = Path(agentfly.__file__).parent / "demo" / "model"


def module_bytes(path: str, lora: LoraSettings) -> tuple[int, int]:
    """(bytes of actor + reference, bytes of the trainable parameters)."""
    module = AgentRLModule(
        ModelSettings(path, lora=lora), actor=UpdateSettings("actor", mini_batch_size=1),
        kl=KLSettings(use_kl_loss=True),
    )
    module.configure_model()
    trainable = sum(p.numel() * p.element_size() for p in module.actor.parameters() if p.requires_grad)
    return parameter_bytes(module.actor, module.reference), trainable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(DEMO_MODEL_DIR))
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    mib = 1 << 20
    for name, lora in (("full", LoraSettings()), (f"lora r{args.rank}", LoraSettings(rank=args.rank, alpha=2.0 * args.rank))):
        held, trainable = module_bytes(args.model, lora)
        print(f"{name:>10}: actor + reference {held / mib:9.2f} MiB, trainable {trainable / mib:8.2f} MiB")


if __name__ == "__main__":
    main()
