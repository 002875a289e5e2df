"""The machine's own limits, measured by the benchmark itself: fp32 matmul and memory bandwidth.

On ``device="cuda"`` both are the GPU's: fp32 GEMM at torch's default precision (TF32 off, as
both systems run) and a device-to-device copy; timings are taken after a synchronize. There the
bf16 GEMM is measured too, the GPU's tensor-core peak, which the update's rate is also set
against.

Also the model's FLOP count, so an update's achieved FLOP/s can be set against the matmul
throughput, and the decode bound that generation tokens/s is set against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from _worker import cuda_sync


def matmul_gflops(
    device: str = "cpu", n: int | None = None, reps: int = 6, dtype: str = "float32"
) -> float:
    """Best-of GEMM throughput (GFLOP/s): fp32 by default (torch's default thread count on the
    CPU); ``dtype="bfloat16"`` on a GPU gives the tensor-core peak its share is set against."""
    import torch

    n = n or (8192 if device == "cuda" else 2048)
    kind = getattr(torch, dtype)
    a = torch.randn(n, n, device=device, dtype=kind)
    b = torch.randn(n, n, device=device, dtype=kind)
    a @ b
    best = 0.0
    for _ in range(reps):
        cuda_sync()
        start = time.perf_counter()
        a @ b
        cuda_sync()
        best = max(best, 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def memory_gbps(device: str = "cpu", mib: int | None = None, reps: int = 5) -> float:
    """Best-of copy bandwidth (GB/s, read + write counted) of a large fp32 buffer."""
    import torch

    mib = mib or (2048 if device == "cuda" else 512)
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = 0.0
    for _ in range(reps):
        cuda_sync()
        start = time.perf_counter()
        dst.copy_(src)
        cuda_sync()
        best = max(best, 2 * src.numel() * 4 / (time.perf_counter() - start) / 1e9)
    return best


@dataclass
class ModelShape:
    params: int  # all parameters (tied embedding counted once)
    embedding: int  # vocab x hidden
    layers: int
    hidden: int
    vocab: int

    @property
    def body(self) -> int:
        """Parameters every token passes through (all but the embedding lookup)."""
        return self.params - self.embedding

    def update_flops(self, seq_tokens: int, response_tokens: int, mean_len: float) -> float:
        """Model FLOPs of one forward + backward over the batch, each sequence on its own.

        6 x body params per token, 6 x hidden x vocab per scored (response) position, and
        causal attention (6 x 2 x layers x hidden x mean context, halved). Implementation
        tricks (shared prompt prefixes, skipped positions) do not change this count, so the
        figure is comparable between systems.
        """
        body = 6 * self.body * seq_tokens
        head = 6 * self.hidden * self.vocab * response_tokens
        attention = 6 * self.layers * self.hidden * mean_len * seq_tokens
        return float(body + head + attention)

    def decode_bound(
        self, rows: int, gbps: float, gflops: float, weight_bytes_each: int = 4
    ) -> float:
        """Tokens/s ceiling of batched decoding: weights read once per step (4 bytes each in
        fp32, 2 in bf16; the KV cache's reads are not counted), or compute."""
        weight_bytes = weight_bytes_each * self.params
        bandwidth_bound = gbps * 1e9 / weight_bytes * rows
        compute_bound = gflops * 1e9 / (2 * self.params)
        return min(bandwidth_bound, compute_bound)


def model_shape(path: str) -> ModelShape:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg: Any = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    return ModelShape(
        params=params,
        embedding=cfg.vocab_size * cfg.hidden_size,
        layers=cfg.num_hidden_layers,
        hidden=cfg.hidden_size,
        vocab=cfg.vocab_size,
    )
