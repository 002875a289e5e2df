"""Task files: a file that cannot be read is named with the line (and column) at fault."""

from __future__ import annotations

import json

import pytest

from agentfly.rollout.data import DataError, load_rows

GOOD = json.dumps({"question": "What is 1+1?", "answer": "2"}).encode()
BAD = b'{"question": "caf\xe9 au lait?", "answer": "2"}'  # Latin-1, not UTF-8


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_bytes_that_are_not_utf8_are_named_by_file_line_and_column(tmp_path, suffix):
    path = tmp_path / f"task{suffix}"
    lines = [GOOD, GOOD, BAD] if suffix == ".jsonl" else [b"[", GOOD + b",", GOOD + b",", BAD, b"]"]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError) as err:
        load_rows(path)
    line = 3 if suffix == ".jsonl" else 4
    column = BAD.index(b"\xe9") + 1  # 1-based, counted in bytes
    assert f"{path}: line {line}, column {column}" in str(err.value)
    assert "not UTF-8" in str(err.value)


def test_invalid_json_is_named_by_file_and_line(tmp_path):
    jsonl = tmp_path / "task.jsonl"
    jsonl.write_bytes(GOOD + b"\n\n" + b'{"question": "x",}' + b"\n")
    with pytest.raises(DataError, match=rf"{jsonl}: line 3 is not valid JSON"):
        load_rows(jsonl)
    whole = tmp_path / "task.json"
    whole.write_bytes(b"[\n" + GOOD + b",\n" + b'{"question": "x",}' + b"\n]\n")
    # the decoder stops at the "}" after the trailing comma: line 3, character 18
    with pytest.raises(DataError, match=rf"{whole}: not valid JSON \(line 3, column 18:"):
        load_rows(whole)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD + b"\n")
    assert load_rows(path) == [json.loads(GOOD)]


def test_a_missing_relative_path_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as err:
        load_rows("tasks/train.jsonl")
    assert "data file 'tasks/train.jsonl' does not exist" in str(err.value)
    assert f"read from the current folder, {tmp_path}, not from the config file's" in str(err.value)
    with pytest.raises(DataError) as err:
        load_rows(tmp_path / "train.jsonl")
    assert "current folder" not in str(err.value)  # an absolute path says only that it is missing
