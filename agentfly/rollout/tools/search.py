"""``search`` (alias ``google_search``): top-k passages from a local BM25 index or a search API.

Settings (:class:`SearchSettings`; ``agent.init_config.tool_config.search.<name>`` in a config,
``get_tool("search").configure(...)`` from Python):

- ``backend="bm25"`` (default): a ``bm25s`` index over ``corpus_path``, a JSONL file (one
  object per line with ``"text"``, or ``"contents"`` as in the Search-R1 wiki dump, and
  optionally ``"title"`` and ``"id"``) or a text file with one passage per line. The index is
  built on the first search and cached per file (rebuilt if the file changes).
- ``backend="http"``: POST (or GET) the query to ``url``. The request carries ``query``/``top_k``
  and the Search-R1 retriever's ``queries``/``topk``; an API key is read from the environment
  variable ``api_key_env`` and sent as a bearer token. The reply may be a list of passages or an
  object holding one under ``results``, ``result``, ``passages``, ``documents``, ``items`` or
  ``organic``; a passage is a string or an object with ``text``/``contents``/``snippet``/
  ``content`` and optionally ``title``.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentfly.rollout.tools.base import ToolUnavailableError, tool


@dataclass(frozen=True)
class Passage:
    text: str
    title: str | None = None
    id: str | None = None


@dataclass(frozen=True)
class SearchSettings:
    """The search tool's settings; checks everything it can when built, not at the first call.

    Attributes:
        corpus_path: the JSONL or text corpus (``bm25`` backend).
        top_k: passages returned per query.
        backend: ``"bm25"`` (local index) or ``"http"`` (a search service).
        url: the service's address (``http`` backend).
        api_key_env: the environment variable holding the service's API key, if it needs one.
        method: ``"POST"`` (JSON body) or ``"GET"`` (query string).
        http_timeout: seconds to wait for the service.

    Raises:
        FileNotFoundError: the corpus file does not exist.
        ValueError: an unknown backend or method, a missing ``url`` or API key, ``top_k < 1``.
    """

    corpus_path: str | os.PathLike | None = None
    top_k: int = 3
    backend: Literal["bm25", "http"] = "bm25"
    url: str | None = None
    api_key_env: str | None = None
    method: Literal["POST", "GET"] = "POST"
    http_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.backend not in ("bm25", "http"):
            raise ValueError(f"unknown search backend {self.backend!r} (known: bm25, http)")
        if self.method not in ("POST", "GET"):
            raise ValueError(f"search method must be POST or GET, got {self.method!r}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")
        if not self.http_timeout > 0:
            raise ValueError(f"http_timeout must be positive, got {self.http_timeout}")
        if self.corpus_path is not None:
            path = Path(self.corpus_path).expanduser().resolve()
            object.__setattr__(self, "corpus_path", path)
            if self.backend == "bm25" and not path.is_file():
                raise FileNotFoundError(f"search corpus not found: {path}")
        if self.backend == "http":
            if not self.url:
                raise ValueError("the http search backend needs a url")
            if self.api_key_env and not os.environ.get(self.api_key_env):
                raise ValueError(f"the search API key variable {self.api_key_env!r} is not set")


_indexes: dict[tuple[str, int, int], Bm25Index] = {}
_indexes_lock = threading.Lock()


def load_corpus(path: Path) -> list[Passage]:
    """Read passages from a JSONL file (``.jsonl``/``.json``) or a text file, one per line."""
    passages = []
    is_json = path.suffix in (".jsonl", ".json")
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            if not is_json:
                passages.append(Passage(text=line.strip()))
                continue
            try:
                row = json.loads(line)
                text = row.get("text", row.get("contents"))
            except (json.JSONDecodeError, AttributeError) as e:
                raise ValueError(f"{path}:{number}: not a JSON object ({e})") from None
            if not isinstance(text, str):
                raise ValueError(f"{path}:{number}: no 'text' (or 'contents') string")
            title, ident = row.get("title"), row.get("id")
            passages.append(Passage(text, title, None if ident is None else str(ident)))
    if not passages:
        raise ValueError(f"search corpus {path} has no passages")
    return passages


class Bm25Index:
    """A BM25 index (``bm25s``, English stop words) over a list of passages."""

    def __init__(self, passages: list[Passage]) -> None:
        import bm25s

        self.passages = passages
        documents = [f"{p.title}\n{p.text}" if p.title else p.text for p in passages]
        self._retriever = bm25s.BM25()
        tokens = bm25s.tokenize(documents, stopwords="en", show_progress=False)
        self._retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int) -> list[tuple[Passage, float]]:
        """The at most ``k`` passages sharing a word with the query, best first."""
        import bm25s

        words = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not words[0]:
            return []
        k = min(k, len(self.passages))
        ids, scores = self._retriever.retrieve(words, k=k, show_progress=False)
        return [
            (self.passages[int(i)], float(s))
            for i, s in zip(ids[0], scores[0], strict=True)
            if float(s) > 0
        ]


def bm25_index(path: Path) -> Bm25Index:
    """The index of the corpus at ``path``, built once per file version."""
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    with _indexes_lock:
        if key not in _indexes:
            for stale in [k for k in _indexes if k[0] == key[0]]:  # an older version of the file
                del _indexes[stale]
            _indexes[key] = Bm25Index(load_corpus(path))
        return _indexes[key]


def _passage(item: Any) -> Passage | None:
    if isinstance(item, str):
        return Passage(item)
    if not isinstance(item, dict):
        return None
    item = item.get("document", item)
    for field in ("text", "contents", "snippet", "content"):
        if isinstance(item.get(field), str):
            return Passage(item[field], item.get("title"))
    return None


#: HTTP statuses of a 4xx reply that are the service's or the setup's, not the query's
_SERVICE_4XX = frozenset({401, 403, 407, 408, 429})


def http_search(query: str, settings: SearchSettings) -> list[Passage]:
    """Ask the configured search service.

    Raises:
        ToolUnavailableError: the service is unreachable, timed out, answered 5xx (or 401, 403,
            407, 408, 429) or sent a reply in no known shape.
        ValueError: the service refused the query itself (any other 4xx).
    """
    headers = {"Accept": "application/json"}
    if settings.api_key_env:
        headers["Authorization"] = f"Bearer {os.environ.get(settings.api_key_env, '')}"
    fields = {"query": query, "top_k": settings.top_k, "queries": [query], "topk": settings.top_k}
    if settings.method == "GET":
        params = urllib.parse.urlencode({"query": query, "top_k": settings.top_k})
        request = urllib.request.Request(f"{settings.url}?{params}", headers=headers)
    else:
        headers["Content-Type"] = "application/json"
        body = json.dumps(fields).encode("utf-8")
        request = urllib.request.Request(settings.url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=settings.http_timeout) as response:
            reply = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        if 400 <= e.code < 500 and e.code not in _SERVICE_4XX:
            raise ValueError(f"the search service at {settings.url} refused the query: {e}") from None
        raise ToolUnavailableError(f"the search service at {settings.url} failed: {e}") from None
    except Exception as e:
        raise ToolUnavailableError(f"the search service at {settings.url} failed: {e}") from None
    if isinstance(reply, dict):
        keys = ("results", "result", "passages", "documents", "items", "organic")
        reply = next((reply[k] for k in keys if k in reply), [])
    if isinstance(reply, list) and reply and isinstance(reply[0], list):
        reply = reply[0]  # a batched reply to ``queries``
    if not isinstance(reply, list):
        raise ToolUnavailableError(f"the search service at {settings.url} sent no list of passages")
    passages = [p for p in map(_passage, reply) if p is not None]
    return passages[: settings.top_k]


def format_passages(passages: list[Passage]) -> str:
    """``Doc 1 (Title: ...) text`` lines, one per passage."""
    if not passages:
        return "No results found."
    lines = []
    for i, p in enumerate(passages, start=1):
        title = f" (Title: {p.title})" if p.title else ""
        lines.append(f"Doc {i}{title} {p.text}")
    return "\n".join(lines)


@tool(
    name="search",
    aliases=("google_search",),
    timeout=30.0,
    max_output_chars=6000,
    settings=SearchSettings,
    runs_in="thread",  # trusted, and its index is loaded once in the trainer, not per worker
)
def search(query: str, settings: SearchSettings) -> str:
    """Search for passages relevant to a query and return the best matches.

    Args:
        query: what to search for, in a few keywords.
    """
    if not query.strip():
        raise ValueError("the query is empty")
    if settings.backend == "http":
        return format_passages(http_search(query, settings))
    if settings.corpus_path is None:
        raise RuntimeError(
            "search has no corpus: set agent.init_config.tool_config.search.corpus_path"
        )
    hits = bm25_index(Path(settings.corpus_path)).search(query, settings.top_k)
    return format_passages([passage for passage, _ in hits])
