"""The DataModule of ``agentfly sft``: prepared examples in, collated batches out.

The examples are made before the run is built (:mod:`agentfly.sft.examples`). Training batches
are addressed by optimizer step as ``agentfly fit``'s prompts are by iteration
(:class:`~agentfly.rollout.loaders.IterationBatches`: epoch ``e`` is a permutation seeded by
``seed + e``, step ``k`` its ``k``-th slice, each rank its share), so a resumed run sees exactly
the batches the uninterrupted one would have. Each batch is collated as a rollout is
(:func:`~agentfly.rollout.collate.collate_trajectories`: examples holding images bring their
processed pixels, ``RolloutBatch.images``) and carries the data's counts as its metrics.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from agentfly.core.batch import RolloutBatch
from agentfly.core.trajectory import Trajectory
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.loaders import IterationBatches


class SFTDataModule(pl.LightningDataModule):
    """Batches of examples, drawn per optimizer step.

    Args:
        train: the training examples.
        val: the validation examples (may be empty).
        tokenizer: the model's tokenizer (the padding id; saved beside the exported model).
        train_batch_size: examples per optimizer step, all ranks together.
        val_batch_size: validation examples per batch on a rank (None: the rank's whole share).
        shuffle: shuffle the examples each epoch.
        seed: the shuffling seed.
        counts: the data's counts, logged with every step.
        vision: a vision-language model's image processor (saved beside the exported model);
            None for a text model.
    """

    def __init__(
        self,
        train: list[Trajectory],
        val: list[Trajectory],
        tokenizer: Any,
        *,
        train_batch_size: int,
        val_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        counts: dict[str, float] | None = None,
        vision: Any = None,
    ) -> None:
        super().__init__()
        self.train = list(train)
        self.val = list(val)
        self.tokenizer = tokenizer
        self.train_batch_size = train_batch_size
        self.val_batch_size = val_batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.counts = dict(counts or {})
        self.vision = vision
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad or 0)

    def collate(self, items: list[tuple[int, Trajectory]]) -> RolloutBatch:
        batch = collate_trajectories([t for _, t in items], self.pad_id)
        batch.rollout_metrics = dict(self.counts)
        return batch

    def train_dataloader(self) -> DataLoader:
        batches = IterationBatches(
            self.train, max(1, self.train_batch_size // self.rank()[1]), seed=self.seed, shuffle=self.shuffle,
            start=self.step, rank=self.rank,
        )
        batches.batch(0)  # a batch larger than the data fails here, naming both sizes
        return DataLoader(batches, batch_size=None, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader | list:
        """This rank's contiguous slice of the validation examples."""
        if not self.val:
            return []
        rank, world = self.rank()
        n = len(self.val)
        if n < world:
            raise ValueError(f"{n} validation examples cannot be split over {world} ranks (each needs one)")
        mine = [(i, self.val[i]) for i in range(rank * n // world, (rank + 1) * n // world)]
        return DataLoader(mine, batch_size=self.val_batch_size or len(mine), shuffle=False, collate_fn=self.collate)

    def step(self) -> int:
        """Optimizer steps done (the module's count; 0 without a trainer)."""
        trainer = self.trainer
        return int(getattr(trainer.lightning_module, "iteration", 0)) if trainer else 0

    def rank(self) -> tuple[int, int]:
        """(rank, world size)."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer else (0, 1)

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state.get("seed", self.seed))
