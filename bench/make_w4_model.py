"""Make W4's model folder: a Qwen2 architecture with seeded random weights and SmolLM2's tokenizer.

    python bench/make_w4_model.py w4          # $AGENTFLY_CACHE/w4-qwen2.5-1.5b-random
    python bench/make_w4_model.py w4-tiny     # the 2-layer CPU check

Speed does not depend on the weights, so none are downloaded: the model is built from its config
(``Workload.random_model``) with a fixed seed and saved in bf16. There is no Qwen tokenizer
offline; SmolLM2's files are copied in and the vocabulary set to its size (49,152), so the LM head
is smaller than Qwen's (151,936 rows): the one departure from Qwen2.5-1.5B. The tokenizer comes
from ``--tokenizer``, else ``.gpu/tokenizer/`` (what ``scripts/gpu_prepare.sh`` puts there for a
machine with no network), else the converted SmolLM2 folder.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import REPO, WORKLOADS, Workload, model_path, smollm2_path

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def tokenizer_source(given: str | None = None) -> Path:
    for cand in (given, REPO / ".gpu" / "tokenizer", smollm2_path()):
        if cand and (Path(cand) / "tokenizer.json").is_file():
            return Path(cand)
    raise FileNotFoundError(
        "no tokenizer for the random model: run scripts/gpu_prepare.sh (fills .gpu/tokenizer/) or "
        "python -m agentfly.models.smollm2"
    )


def ensure_model(w: Workload, tokenizer: str | None = None, seed: int = 0) -> str:
    """The workload's random-weight model folder, made once (a no-op for other workloads)."""
    path = Path(model_path(w))
    if w.random_model is None or (path / "config.json").is_file():
        return str(path)
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    started = time.perf_counter()
    src = tokenizer_source(tokenizer)
    tok = AutoTokenizer.from_pretrained(src)
    cfg = Qwen2Config(
        **w.random_model,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        dtype="bfloat16",
    )
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # 1.5B random draws: seconds on a GPU
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    tmp = path.with_name(path.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(tmp)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, tmp / name)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)  # whole or absent: a killed run leaves no half folder behind
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{w.name}: {params / 1e9:.3f}B parameters (vocab {len(tok)}) in {path}, "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=[k for k, w in WORKLOADS.items() if w.random_model])
    ap.add_argument("--tokenizer", default=None, help="a folder with SmolLM2's tokenizer.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(ensure_model(WORKLOADS[args.workload], args.tokenizer, args.seed))


if __name__ == "__main__":
    main()
