"""``async_dense_retrieve`` (alias ``asyncdense_retrieve``, its name before AgentFly renamed it):
the top passages of a FAISS index for a query, embedded by a local E5-style encoder.

AgentFly's tool (``src/agentfly/tools/src/search/async_dense_retriever.py``) reads fixed files
under its cache, ``wiki-18.jsonl`` and ``e5_Flat.index``, and downloads ``intfloat/e5-base-v2``;
here all three are settings (:class:`DenseRetrieveSettings`), so the tool is accepted only once
they are configured, and nothing is downloaded. As AgentFly's: the query gets E5's ``query: ``
prefix (unless it has one), is tokenized to at most 256 tokens, embedded by the mean of the
encoder's last hidden states over its tokens, L2-normalised (cosine similarity against an index
of normalised passages), and the index's row ``i`` is the corpus passage whose ``id`` is ``i``;
the reply is ``Doc k: <contents>`` lines. Departures: AgentFly also reads a pickled ``.ids`` file
beside the index (row → passage id); it is not read here (a pickle runs code when loaded), so
rows are passage ids. The encoder runs on the CPU, as AgentFly's.

The index, the corpus and the encoder load where the run starts (the tool's ``prepare``,
:func:`agentfly.rollout.runner.prepare_tools`), outside the calls' 60 s deadline: a wiki-scale
FAISS index takes minutes to read. The corpus is kept as the byte offset of each passage's line
(two int64 arrays, 16 bytes a passage: 0.3 GB for wiki-18's 21M passages, against tens of GB
as Python strings) over a memory map of the file; a hit reads and parses its line alone.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly.rollout.tools.base import tool

MAX_QUERY_TOKENS = 256
NOT_FOUND = "[Error: Doc not found]"


@dataclass(frozen=True)
class DenseRetrieveSettings:
    """Where the index, its corpus and its encoder are (AgentFly's ``e5_Flat.index``,
    ``wiki-18.jsonl`` and ``intfloat/e5-base-v2``).

    Attributes:
        index_path: a FAISS index file of the passages' normalised embeddings (inner product).
        corpus_path: a JSONL file, one passage a line: ``id`` (its index row) and ``contents``
            (or ``text``).
        encoder_path: a local Hugging Face encoder folder (its config, weights and tokenizer).
        top_k: passages returned per query.

    Raises:
        FileNotFoundError: a file or the encoder folder does not exist.
        ValueError: ``top_k < 1``.
    """

    index_path: str
    corpus_path: str
    encoder_path: str
    top_k: int = 3

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")
        for name in ("index_path", "corpus_path"):
            path = Path(getattr(self, name)).expanduser().resolve()
            if not path.is_file():
                raise FileNotFoundError(f"{name}: no file at {path}")
            object.__setattr__(self, name, str(path))
        encoder = Path(self.encoder_path).expanduser().resolve()
        if not (encoder / "config.json").is_file():
            raise FileNotFoundError(
                f"encoder_path: {encoder} is not a local model folder (no config.json); "
                "nothing is downloaded"
            )
        object.__setattr__(self, "encoder_path", str(encoder))

    def environment_problem(self) -> str | None:
        """The FAISS package the index needs, when it is not installed."""
        if importlib.util.find_spec("faiss") is None:
            return "needs the faiss package to read index_path (pip install faiss-cpu)"
        return None


def passage_text(row: dict[str, Any]) -> str:
    return row.get("contents") or row.get("text") or ""


class Corpus:
    """A JSONL corpus read by passage id without holding its text: each line's id and byte
    offset (a line without ``id`` takes its position), the file memory-mapped.

    Raises:
        ValueError: a line that is not JSON, or two lines with one id, named with the file.
    """

    def __init__(self, path: str) -> None:
        import numpy as np

        ids, offsets = [], []
        size = os.path.getsize(path)
        with open(path, "rb") as f:  # an empty file cannot be mapped: it has no passage to read
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        start, number = 0, 0
        data = self._map
        while start < size:
            end = data.find(b"\n", start)
            end = size if end == -1 else end
            line = data[start:end]
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {number + 1} is not JSON ({e.msg})") from None
                ids.append(int(row.get("id", number)))
                offsets.append(start)
            start, number = end + 1, number + 1
        self.ids = np.asarray(ids, dtype=np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        order = np.argsort(self.ids, kind="stable")
        self.ids, self.offsets = self.ids[order], self.offsets[order]
        if len(self.ids) > 1 and (repeated := self.ids[1:][self.ids[1:] == self.ids[:-1]]).size:
            raise ValueError(f"{path}: passage id {int(repeated[0])} is on two lines")

    def __len__(self) -> int:
        return len(self.ids)

    def get(self, passage_id: int) -> str | None:
        """The text of passage ``passage_id``, or None."""
        import numpy as np

        k = int(np.searchsorted(self.ids, passage_id))
        if k == len(self.ids) or self.ids[k] != passage_id:
            return None
        start = int(self.offsets[k])
        end = self._map.find(b"\n", start)
        return passage_text(json.loads(self._map[start: None if end == -1 else end]))


class DenseIndex:
    """A FAISS index, its corpus and its encoder, loaded once."""

    def __init__(self, settings: DenseRetrieveSettings) -> None:
        import faiss
        from transformers import AutoModel, AutoTokenizer

        self.index = faiss.read_index(settings.index_path)
        self.passages = Corpus(settings.corpus_path)
        self.tokenizer = AutoTokenizer.from_pretrained(settings.encoder_path)
        self.model = AutoModel.from_pretrained(settings.encoder_path).eval()

    def embed(self, queries: list[str]) -> Any:
        """Normalised mean-pooled embeddings of the E5-prefixed queries. Shape: (Q, D), float32."""
        import torch

        prefixed = [q if q.startswith("query:") else f"query: {q}" for q in queries]
        batch = self.tokenizer(
            prefixed, padding=True, truncation=True, max_length=MAX_QUERY_TOKENS,
            return_tensors="pt",
        )
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state  # (Q, L, D)
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (Q, L, 1)
        pooled = (hidden * mask).sum(1) / mask.sum(1)  # (Q, D)
        pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
        return pooled.numpy()

    def search(self, query: str, k: int) -> list[str]:
        """The texts of the ``k`` nearest passages, best first."""
        _, rows = self.index.search(self.embed([query]), k)  # (1, k)
        texts = [self.passages.get(int(r)) for r in rows[0] if int(r) != -1]
        return [NOT_FOUND if t is None else t for t in texts]


_indexes: dict[DenseRetrieveSettings, DenseIndex] = {}
_lock = threading.Lock()


def dense_index(settings: DenseRetrieveSettings) -> DenseIndex:
    """The index these settings name, loaded once and kept (where the run starts: the tool's
    ``prepare``; else on the first call)."""
    with _lock:
        if settings not in _indexes:
            _indexes[settings] = DenseIndex(settings)
        return _indexes[settings]


@tool(
    name="async_dense_retrieve",
    aliases=("asyncdense_retrieve",),
    description="Retrieve wiki documents.",
    timeout=60.0,
    max_output_chars=8192,
    settings=DenseRetrieveSettings,
    runs_in="thread",  # the index is loaded once in the trainer, not per worker
    prepare=dense_index,  # where the run starts, not inside the first call's deadline
)
def async_dense_retrieve(query: str, settings: DenseRetrieveSettings) -> str:
    """Retrieve wiki documents.

    Args:
        query: what to look for.
    """
    docs = dense_index(settings).search(query, settings.top_k)
    return "\n".join(f"Doc {i + 1}: {d}" for i, d in enumerate(docs)) + "\n"
