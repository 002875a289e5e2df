"""The search tool: a local BM25 index over a corpus file, and an HTTP backend (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from agentfly.rollout.tools import Tool, ToolSettingsError, get_tool, run_tool_call
from agentfly.rollout.tools import search as search_module
from agentfly.rollout.tools.search import load_corpus

PASSAGES = [
    {"id": "1", "title": "Cats", "text": "The cat sat on the mat and purred."},
    {"id": "2", "title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"id": "3", "title": "Volcanoes", "text": "A volcano erupts when magma reaches the surface."},
    {"id": "4", "title": "Dogs", "text": "Dogs are loyal animals that love to fetch."},
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n\n", encoding="utf-8")
    return path


def search_with(**settings: object) -> Tool:
    """The search tool with ``settings`` bound (the registered one is left as it is)."""
    return get_tool("search").configure(**settings)


def search(tool: Tool, query: str) -> object:
    return asyncio.run(run_tool_call(tool, {"query": query}))


def test_bm25_puts_the_passage_with_the_query_words_first(corpus: Path) -> None:
    tool = search_with(corpus_path=corpus, top_k=2)
    result = search(tool, "capital of France")
    assert result.ok
    lines = result.observation.splitlines()
    assert lines[0] == "Doc 1 (Title: Paris) Paris is the capital and largest city of France."
    assert len(lines) == 1  # no other passage shares a word with the query

    magma = search(tool, "what happens when magma erupts").observation
    assert magma.startswith("Doc 1 (Title: Volcanoes) A volcano erupts")


def test_top_k_and_ranking(corpus: Path) -> None:
    tool = search_with(corpus_path=corpus, top_k=2)
    # Passage 1 matches two query terms once each ("cats" in the title, "cat"), passage 4 one
    # term twice ("dogs"); every term is in one document of four, so has the same IDF, and
    # BM25's saturation makes two distinct hits outscore one repeated hit (passage 1 is also
    # shorter after stop words: 5 tokens against 6). Passages 2 and 3 share no word: left out.
    lines = search(tool, "cat cats dogs").observation.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("Doc 1 (Title: Cats)")
    assert lines[1].startswith("Doc 2 (Title: Dogs)")


def test_no_match_and_empty_query(corpus: Path) -> None:
    tool = search_with(corpus_path=corpus)
    assert search(tool, "zeppelin quasar").observation == "No results found."
    empty = search(tool, "   ")
    assert not empty.ok and "the query is empty" in empty.observation


def test_alias_google_search(corpus: Path) -> None:
    tool = get_tool("google_search").configure(corpus_path=corpus, top_k=1)
    assert tool.name == "search"
    result = search(tool, "loyal dogs")
    assert result.observation.startswith("Doc 1 (Title: Dogs)")


def test_plain_text_corpus(tmp_path: Path) -> None:
    path = tmp_path / "passages.txt"
    path.write_text("apples are red\nbananas are yellow\n\ngrapes are purple\n", encoding="utf-8")
    tool = search_with(corpus_path=path, top_k=3)
    assert search(tool, "yellow bananas").observation == "Doc 1 bananas are yellow"


def test_index_is_built_once_per_file(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = search_with(corpus_path=corpus)
    built = []
    original = search_module.Bm25Index.__init__

    def counting_init(self: object, passages: list) -> None:
        built.append(len(passages))
        original(self, passages)

    monkeypatch.setattr(search_module.Bm25Index, "__init__", counting_init)
    monkeypatch.setattr(search_module, "_indexes", {})
    search(tool, "cat")
    search(tool, "dog")
    assert built == [4]
    with corpus.open("a", encoding="utf-8") as f:  # a changed file is indexed again
        f.write(json.dumps({"text": "Penguins live in Antarctica."}) + "\n")
    assert search(tool, "penguins").observation == "Doc 1 Penguins live in Antarctica."
    assert built == [4, 5]


def test_missing_corpus_fails_at_configure_time_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "wiki.jsonl"
    with pytest.raises(ToolSettingsError, match="search corpus not found") as info:
        search_with(corpus_path=missing)
    assert str(missing) in str(info.value)


def test_bad_corpus_lines_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n{"title": "no text"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: no 'text'"):
        load_corpus(path)


def test_unconfigured_search_is_an_error_observation() -> None:
    tool = search_with()
    result = search(tool, "anything")
    assert not result.ok and "tool_config.search.corpus_path" in result.observation


def test_configuration_errors() -> None:
    with pytest.raises(ValueError, match="backend='bing': expected one of 'bm25', 'http'"):
        search_with(backend="bing")
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        search_with(top_k=0)
    with pytest.raises(ValueError, match="needs a url"):
        search_with(backend="http")
    with pytest.raises(ValueError, match="AGENTFLY_TEST_UNSET_KEY"):
        search_with(backend="http", url="http://127.0.0.1:1", api_key_env="AGENTFLY_TEST_UNSET_KEY")


class _Handler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict]] = []

    def _reply(self, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"body": body, "auth": self.headers.get("Authorization")})
        # The Search-R1 retriever's shape: one list of hits per query.
        hits = [{"document": {"contents": f"about {body['query']}"}, "score": 1.0}]
        hits.append({"document": {"contents": "second"}, "score": 0.5})
        hits.append({"document": {"contents": "third"}, "score": 0.1})
        self._reply({"result": [hits]})

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        self.requests.append({"query": query, "auth": self.headers.get("Authorization")})
        self._reply({"results": [{"title": "T", "snippet": f"snippet for {query['query'][0]}"}]})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.requests = []
    httpd = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"
    httpd.shutdown()
    httpd.server_close()


def test_http_backend_post(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLY_TEST_SEARCH_KEY", "s3cret")
    tool = search_with(backend="http", url=server, top_k=2, api_key_env="AGENTFLY_TEST_SEARCH_KEY")
    result = search(tool, "llamas")
    assert result.ok
    assert result.observation == "Doc 1 about llamas\nDoc 2 second"
    (request,) = _Handler.requests
    assert request["body"]["query"] == "llamas" and request["body"]["queries"] == ["llamas"]
    assert request["body"]["top_k"] == 2
    assert request["auth"] == "Bearer s3cret"


def test_http_backend_get(server: str) -> None:
    tool = search_with(backend="http", url=server, method="GET", top_k=3)
    result = search(tool, "alpacas")
    assert result.observation == "Doc 1 (Title: T) snippet for alpacas"
    assert _Handler.requests[0]["query"] == {"query": ["alpacas"], "top_k": ["3"]}
    assert _Handler.requests[0]["auth"] is None


def test_http_backend_down_is_the_infrastructures_failure() -> None:
    # Port 9 (discard) on the loopback: nothing listens there, the connection is refused.
    tool = search_with(backend="http", url="http://127.0.0.1:9/retrieve", http_timeout=2)
    result = search(tool, "anything")
    assert not result.ok and result.error == "unavailable"
    assert "the search service at http://127.0.0.1:9/retrieve failed" in result.observation


class _Failing(BaseHTTPRequestHandler):
    status = 500

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("status", "error"),
    [(500, "unavailable"), (503, "unavailable"), (429, "unavailable"), (401, "unavailable"),
     (400, "exception"), (422, "exception")],
)
def test_an_http_error_is_the_services_unless_it_refused_the_query(status: int, error: str) -> None:
    """5xx, throttling and auth are the service's or the setup's (the chain is failed, see
    agentfly.rollout.failures); another 4xx refused what the model asked (its reward stands)."""
    handler = type("Handler", (_Failing,), {"status": status})
    httpd = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"
        result = search(search_with(backend="http", url=url, http_timeout=5), "anything")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not result.ok and result.error == error
    assert str(status) in result.observation
