"""bf16 on a CPU that emulates it is named at the trainer's start (measured 25x slower there)."""

from __future__ import annotations

import warnings

import pytest

from agentfly.modules import trainer


@pytest.mark.parametrize(
    ("precision", "on_cpu", "native", "warns"),
    [
        ("bf16-mixed", True, False, True),
        ("bf16-true", True, False, True),
        ("bf16-mixed", True, True, False),  # AVX512-BF16/AMX: real bf16
        ("bf16-mixed", False, False, False),  # a GPU
        ("32-true", True, False, False),
    ],
)
def test_emulated_bf16_is_named(monkeypatch, precision, on_cpu, native, warns):
    monkeypatch.setattr(trainer, "cpu_bf16_is_native", lambda: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.warn_if_bf16_is_emulated(precision, on_cpu)
    said = [str(w.message) for w in caught]
    assert bool(said) == warns, said
    if warns:
        assert f"trainer.precision={precision}" in said[0] and "32-true" in said[0]


def test_the_trainer_checks_its_own_precision(monkeypatch):
    monkeypatch.setattr(trainer, "cpu_bf16_is_native", lambda: False)
    with pytest.warns(UserWarning, match="without bf16 instructions"):
        trainer.AgentflyTrainer(precision="bf16-mixed", accelerator="cpu", devices=1, logger=None)
