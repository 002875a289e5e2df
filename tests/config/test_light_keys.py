"""A config's keys are checked before Lightning and torch load: the trainer's and the data
module's signatures read from their source (agentfly.config.signatures) say of every key what
the imported classes' signatures say, and a misspelt key is refused with neither imported."""

from __future__ import annotations

import subprocess
import sys
import types
import typing

from agentfly.config.keys import build_key_table, lightning_trainer_names, takes


def nullable(tp) -> bool:
    union = isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union
    return tp is None or type(None) is tp or (union and type(None) in typing.get_args(tp))


def stand_ins(tp) -> bool:
    """Whether a type holds a stand-in for a class the source reader did not import."""
    return "stand_in" in repr(tp) or any(stand_ins(a) for a in typing.get_args(tp))


def test_the_source_signatures_say_what_the_imported_ones_say():
    light, light_sections = build_key_table(from_source=True)
    exact, exact_sections = build_key_table(from_source=False)
    assert light.keys() == exact.keys() and light_sections == exact_sections
    assert any(k.startswith("trainer.") for k in light) and "data.train_files" in light
    for key, (tp, default) in exact.items():
        light_tp, light_default = light[key]
        assert light_default == default, key
        for origin in (list, dict):
            assert takes(light_tp, origin) == takes(tp, origin), (key, light_tp, tp)
        assert nullable(light_tp) == nullable(tp), (key, light_tp, tp)
        if not stand_ins(light_tp):
            assert light_tp == tp, (key, light_tp, tp)
    # the one stand-in, where Lightning is not loaded yet, is its Logger in trainer.logger's list
    assert {k for k, (tp, _) in light.items() if stand_ins(tp)} <= {"trainer.logger"}


def test_lightnings_trainer_arguments_read_from_its_source_are_its_signatures():
    names = lightning_trainer_names(from_source=True)
    assert names == lightning_trainer_names(from_source=False)
    assert {"precision", "max_time", "accumulate_grad_batches"} <= names


def test_a_misspelt_key_is_refused_before_lightning_and_torch_load():
    code = (
        "import sys\n"
        "from agentfly.config.keys import verl_key_table\n"
        "assert [k for k, (tp, _) in verl_key_table()[0].items() if 'stand_in' in repr(tp)] == ['trainer.logger']\n"
        "from agentfly.cli import main\n"
        "assert main(['fit', 'trainer.save_frq=3']) == 2\n"
        "assert main(['sft', 'trainer.save_frq=3']) == 2\n"
        "print(sorted(m for m in ('torch', 'lightning', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
    assert done.stderr.count("unknown key 'trainer.save_frq' (command line); did you mean 'trainer.save_freq'?") == 2
