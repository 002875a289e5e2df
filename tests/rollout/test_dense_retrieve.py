"""``async_dense_retrieve`` (AgentFly's dense retrieval, alias ``asyncdense_retrieve``): refused
until its index, corpus and encoder are configured; configured, it answers from a FAISS index
over a tiny BERT encoder built here (no download)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from agentfly.rollout.tools import dense_retrieve
from agentfly.rollout.tools.bind import ToolConfigError, bind_tools

WORDS = ["query", ":", "who", "wrote", "hamlet", "capital", "of", "france", "is", "the", "sun", "a", "star"]
# passage id -> (the question whose embedding is that id's index row, the passage)
PASSAGES = {
    0: ("the capital of france", "Paris is the capital of France."),
    1: ("who wrote hamlet", "Hamlet was written by William Shakespeare."),
    2: ("the sun is a star", "The Sun is a G-type star."),
}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("encoder")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(root)
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(root)
    return root


def by_hand(encoder, text: str) -> torch.Tensor:
    """E5's query embedding, computed here: ``query: `` prefix, mean over tokens, L2 norm."""
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(encoder), AutoModel.from_pretrained(encoder).eval()
    batch = tok([f"query: {text}"], return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state[0]  # (L, D); no padding in a batch of one
    mean = hidden.mean(0)
    return mean / mean.norm()


@pytest.fixture(scope="module")
def configured(encoder, tmp_path_factory):
    faiss = pytest.importorskip("faiss", reason="needs faiss-cpu (the retrieval extra)")
    root = tmp_path_factory.mktemp("index")
    rows = torch.stack([by_hand(encoder, PASSAGES[i][0]) for i in range(len(PASSAGES))])
    index = faiss.IndexFlatIP(rows.shape[1])
    index.add(rows.numpy())
    faiss.write_index(index, str(root / "e5_Flat.index"))
    corpus = root / "wiki.jsonl"  # out of id order: rows are found by id, not by line
    corpus.write_text("\n".join(json.dumps({"id": i, "contents": PASSAGES[i][1]}) for i in (2, 0, 1)))
    return {"index_path": str(root / "e5_Flat.index"), "corpus_path": str(corpus),
            "encoder_path": str(encoder)}


def test_refused_until_index_corpus_and_encoder_are_configured():
    with pytest.raises(ToolConfigError) as err:
        bind_tools(["asyncdense_retrieve"])
    assert "needs the setting(s) index_path, corpus_path, encoder_path" in str(err.value)


def test_an_encoder_that_is_not_a_local_folder_is_refused(configured, tmp_path):
    settings = {**configured, "encoder_path": "intfloat/e5-base-v2"}
    with pytest.raises(ToolConfigError, match=r"not a local model folder.*nothing is downloaded"):
        bind_tools(["asyncdense_retrieve"], {"asyncdense_retrieve": settings})


def test_without_faiss_it_is_refused_naming_the_package(configured, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "faiss" else find_spec(n, *a))
    with pytest.raises(ToolConfigError, match=r"faiss package .*pip install faiss-cpu"):
        bind_tools(["asyncdense_retrieve"], {"asyncdense_retrieve": configured})


def test_the_query_embedding_is_e5s(configured, encoder):
    (tool,) = bind_tools(["asyncdense_retrieve"], {"asyncdense_retrieve": configured})
    got = dense_retrieve.dense_index(tool.settings).embed(["who wrote hamlet", "query: the sun is a star"])
    assert torch.allclose(torch.from_numpy(got[0]), by_hand(encoder, "who wrote hamlet"), atol=1e-5)
    assert torch.allclose(torch.from_numpy(got[1]), by_hand(encoder, "the sun is a star"), atol=1e-5)


def test_configured_it_answers_the_nearest_passages_by_id(configured):
    (tool,) = bind_tools(["asyncdense_retrieve"], {"asyncdense_retrieve": {**configured, "top_k": 1}})
    assert tool.name == "async_dense_retrieve"
    for question, passage in PASSAGES.values():
        assert tool(query=question) == f"Doc 1: {passage}\n"
    (three,) = bind_tools(["async_dense_retrieve"], {"async_dense_retrieve": configured})
    lines = three(query="who wrote hamlet").splitlines()
    assert len(lines) == 3 and lines[0] == f"Doc 1: {PASSAGES[1][1]}"
    assert sorted(line.split(": ", 1)[1] for line in lines) == sorted(p for _, p in PASSAGES.values())


def test_the_index_loads_where_the_run_starts_not_inside_a_call_s_deadline(configured, monkeypatch):
    """An index whose load (2 s here; minutes for a wiki-scale one) is longer than the call's
    deadline (1 s): loaded by the run's start (``prepare_tools``), the first call answers within
    its deadline; loaded by the call, it times out."""
    import asyncio
    import time

    from agentfly.rollout.runner import prepare_tools
    from agentfly.rollout.tools.call import run_tool_call

    load = dense_retrieve.DenseIndex.__init__

    def slow_load(self, settings):
        time.sleep(2.0)
        load(self, settings)

    monkeypatch.setattr(dense_retrieve.DenseIndex, "__init__", slow_load)
    config = {"asyncdense_retrieve": {**configured, "top_k": 1, "timeout": 1.0}}
    monkeypatch.setattr(dense_retrieve, "_indexes", {})
    (lazy,) = bind_tools(["asyncdense_retrieve"], config)
    late = asyncio.run(run_tool_call(lazy, {"query": "who wrote hamlet"}))
    assert late.error == "timeout"  # the load ran inside the call
    monkeypatch.setattr(dense_retrieve, "_indexes", {})
    (tool,) = bind_tools(["asyncdense_retrieve"], config)
    prepare_tools([tool])
    result = asyncio.run(run_tool_call(tool, {"query": "who wrote hamlet"}))
    assert result.ok and result.observation == f"Doc 1: {PASSAGES[1][1]}\n"


def test_the_corpus_is_read_by_id_from_offsets(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": 7, "contents": "seven"}\n\n{"text": "by position"}\n{"id": 0, "contents": ""}\n')
    passages = dense_retrieve.Corpus(str(corpus))
    assert len(passages) == 3 and passages.offsets.dtype.name == "int64"
    assert passages.get(7) == "seven" and passages.get(2) == "by position" and passages.get(0) == ""
    assert passages.get(5) is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "contents": "a"}\n{"id": 1, "contents": "b"}\n')
    with pytest.raises(ValueError, match="passage id 1 is on two lines"):
        dense_retrieve.Corpus(str(bad))
    (tmp_path / "broken.jsonl").write_text('{"id": 1}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        dense_retrieve.Corpus(str(tmp_path / "broken.jsonl"))
